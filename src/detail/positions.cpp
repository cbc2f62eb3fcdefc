#include "detail/positions.h"

#include "detail/checks.h"
#include "detail/device_checks.h"

#include <ATen/ops/arange.h>
#include <ATen/TensorIndexing.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros.h>

#include <c10/util/Exception.h>

#include <limits>

namespace posenc {
namespace detail {

std::vector<int64_t> packed_positions(const char* who, const std::vector<int64_t>& cu_seqlens,
                                      int64_t total, const std::vector<int64_t>& start) {
  TORCH_CHECK(cu_seqlens.size() >= 2, who,
              ": cu_seqlens must hold the cumulative sequence lengths [0, l0, l0 + l1, ..., T] "
              "(at least 2 entries), but holds ", cu_seqlens.size());
  const size_t sequences = cu_seqlens.size() - 1;
  TORCH_CHECK(cu_seqlens.front() == 0 && cu_seqlens.back() == total, who,
              ": cu_seqlens must start at 0 and end at the number of packed tokens T = ", total,
              ", but goes from ", cu_seqlens.front(), " to ", cu_seqlens.back());
  TORCH_CHECK(start.empty() || start.size() == sequences, who,
              ": start_positions must hold one position per sequence (", sequences,
              "), but holds ", start.size());
  // Every boundary is checked before anything is written: with cu_seqlens non-decreasing from 0
  // to total, every token index lies in [0, total).
  for (size_t s = 0; s < sequences; ++s) {
    TORCH_CHECK(cu_seqlens[s] <= cu_seqlens[s + 1], who, ": cu_seqlens must not decrease, but "
                "entry ", s, " is ", cu_seqlens[s], " and entry ", s + 1, " is ",
                cu_seqlens[s + 1]);
  }
  std::vector<int64_t> positions(static_cast<size_t>(total));
  for (size_t s = 0; s < sequences; ++s) {
    const int64_t begin = cu_seqlens[s];
    const int64_t end = cu_seqlens[s + 1];
    const int64_t first = start.empty() ? 0 : start[s];
    TORCH_CHECK(first >= 0, who, ": start_positions must be >= 0, but sequence ", s, " starts at ",
                first);
    TORCH_CHECK(end - begin <= 0 || first <= std::numeric_limits<int64_t>::max() - (end - begin),
                who, ": sequence ", s, " starting at position ", first, " with ", end - begin,
                " tokens has positions past the int64 range");
    for (int64_t t = begin; t < end; ++t) {
      positions[static_cast<size_t>(t)] = first + (t - begin);
    }
  }
  return positions;
}

at::Tensor packed_positions_from(const char* who, const at::Tensor& cu_seqlens, int64_t total,
                                 const at::Tensor& start) {
  const int64_t entries = cu_seqlens.numel();
  TORCH_CHECK(entries >= 2, who,
              ": cu_seqlens must hold the cumulative sequence lengths [0, l0, l0 + l1, ..., T] "
              "(at least 2 entries), but holds ", entries);
  const int64_t sequences = entries - 1;
  TORCH_CHECK(!start.defined() || start.numel() == sequences, who,
              ": start_positions must hold one position per sequence (", sequences,
              "), but holds ", start.numel());
  const at::Tensor cu = cu_seqlens.reshape({-1}).to(at::kLong);
  // (the lengths are only meaningful where the entries never decrease, which is checked by
  // comparing them: their differences could wrap around int64)
  const at::Tensor lengths = cu.narrow(0, 1, sequences) - cu.narrow(0, 0, sequences);
  // What packed_positions checks on the host, as one tensor of conditions and the values they
  // are about: the first entry (0), the last (total), entries that never decrease (then each
  // length >= 0), each start (>= 0, and its last position within int64).
  std::vector<at::Tensor> ok = {cu.narrow(0, 0, 1).eq(0), cu.narrow(0, sequences, 1).eq(total),
                                cu.narrow(0, 1, sequences).ge(cu.narrow(0, 0, sequences))};
  std::vector<at::Tensor> values = {cu.narrow(0, 0, 1), cu.narrow(0, sequences, 1), lengths};
  at::Tensor first;
  if (start.defined()) {
    first = start.reshape({-1}).to(at::kLong);
    ok.push_back(first.ge(0) &
                 (lengths.le(0) | first.le(std::numeric_limits<int64_t>::max() - lengths)));
    values.push_back(first);
  }
  check_on_device(at::cat(ok), at::cat(values), DeviceCheck::kCuSeqlens);
  // Token t belongs to sequence s = the number of ends cu[1..] that are <= t: a count of the ends
  // at each index (those at `total` land in the extra last slot), summed up to t.
  const at::Tensor ends = cu.narrow(0, 1, sequences).clamp(0, total);
  const at::Tensor sequence = at::zeros({total + 1}, cu.options())
                                  .scatter_add(0, ends, at::ones_like(ends))
                                  .cumsum(0)
                                  .narrow(0, 0, total)
                                  .clamp_max(sequences - 1);
  const at::Tensor tokens = at::arange(total, cu.options());
  at::Tensor positions = tokens - cu.index({sequence});
  if (first.defined()) {
    positions = positions + first.index({sequence});
  }
  return positions;
}

std::vector<int64_t> context_parallel_positions(const char* who, int64_t seq_len,
                                                int64_t world_size, int64_t rank, bool zigzag) {
  TORCH_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, who,
              ": expected 0 <= rank < world_size with world_size >= 1, but got rank ", rank,
              " and world_size ", world_size);
  TORCH_CHECK(world_size <= kMaxTableElements, who, ": world_size must be <= 2^28 (posenc's limit "
              "of chunks), but got ", world_size);
  TORCH_CHECK(seq_len >= 0, who, ": seq_len must be >= 0 (the length of the whole sequence), but "
              "got ", seq_len);
  const int64_t chunks = zigzag ? 2 * world_size : world_size;
  TORCH_CHECK(seq_len >= 0 && seq_len % chunks == 0, who, ": the sequence length (", seq_len,
              ") must be a multiple of ", zigzag ? "2 * world_size = " : "world_size = ", chunks,
              " to split it into equal chunks; pad the sequence to a multiple of ", chunks);
  const int64_t chunk = seq_len / chunks;
  TORCH_CHECK(chunk <= kMaxTableElements / (zigzag ? 2 : 1), who, ": a rank's shard of seq_len = ",
              seq_len, " over ", chunks, " chunks holds ", zigzag ? 2 * chunk : chunk,
              " positions, over posenc's limit of 2^28; lower seq_len or raise world_size");
  std::vector<int64_t> positions;
  positions.reserve(static_cast<size_t>(zigzag ? 2 * chunk : chunk));
  const auto append = [&](int64_t index) {
    for (int64_t p = index * chunk; p < (index + 1) * chunk; ++p) {
      positions.push_back(p);
    }
  };
  append(rank);
  if (zigzag) {
    append(chunks - 1 - rank);
  }
  return positions;
}

} // namespace detail
} // namespace posenc
