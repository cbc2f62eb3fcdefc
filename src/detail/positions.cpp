#include "detail/positions.h"

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

std::vector<int64_t> context_parallel_positions(const char* who, int64_t seq_len,
                                                int64_t world_size, int64_t rank, bool zigzag) {
  TORCH_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, who,
              ": expected 0 <= rank < world_size with world_size >= 1, but got rank ", rank,
              " and world_size ", world_size);
  const int64_t chunks = zigzag ? 2 * world_size : world_size;
  TORCH_CHECK(seq_len >= 0 && seq_len % chunks == 0, who, ": the sequence length (", seq_len,
              ") must be a multiple of ", zigzag ? "2 * world_size = " : "world_size = ", chunks,
              " to split it into equal chunks; pad the sequence to a multiple of ", chunks);
  const int64_t chunk = seq_len / chunks;
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
