#include "detail/positions.h"

#include "detail/checks.h"
#include "detail/device_checks.h"

#include <ATen/ops/arange.h>
#include <ATen/TensorIndexing.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

namespace posenc {
namespace detail {

namespace {

// The sequence each of `count` slots belongs to, where sequence s ends before slot ends[s]
// (non-decreasing where the checks hold): the number of ends <= the slot, as a count of the ends
// at each slot (clamped into [0, count]: those at `count` land in the extra last one) summed up
// to it, capped at the last sequence (so that wrong ends never index out of range).
at::Tensor sequence_of_slots(const at::Tensor& ends, int64_t count) {
  const at::Tensor clamped = ends.clamp(0, count);
  return at::zeros({count + 1}, ends.options())
      .scatter_add(0, clamped, at::ones_like(clamped))
      .cumsum(0)
      .narrow(0, 0, count)
      .clamp_max(ends.numel() - 1);
}

} // namespace

std::vector<int64_t> packed_positions(const std::vector<int64_t>& cu_seqlens, int64_t total,
                                      const std::vector<int64_t>& start) {
  static constexpr detail::CallerName who{};
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

at::Tensor packed_positions_from(const at::Tensor& cu_seqlens, int64_t total,
                                 const at::Tensor& start) {
  static constexpr detail::CallerName who{};
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
  // Token t belongs to sequence s = the number of ends cu[1..] that are <= t.
  const at::Tensor sequence = sequence_of_slots(cu.narrow(0, 1, sequences), total);
  const at::Tensor tokens = at::arange(total, cu.options());
  at::Tensor positions = tokens - cu.index({sequence});
  if (first.defined()) {
    positions = positions + first.index({sequence});
  }
  return positions;
}

std::vector<int64_t> context_parallel_positions(int64_t seq_len, int64_t world_size, int64_t rank,
                                                bool zigzag) {
  static constexpr detail::CallerName who{};
  check_context_parallel_ranks(world_size, rank);
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

void check_context_parallel_ranks(int64_t world_size, int64_t rank) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, who,
              ": expected 0 <= rank < world_size with world_size >= 1, but got rank ", rank,
              " and world_size ", world_size);
  TORCH_CHECK(world_size <= kMaxTableElements, who, ": world_size must be <= 2^28 (posenc's limit "
              "of chunks), but got ", world_size);
}

PackedShard context_parallel_packed_positions(const std::vector<int64_t>& cu_seqlens,
                                              int64_t total, int64_t world_size, int64_t rank,
                                              bool zigzag) {
  static constexpr detail::CallerName who{};
  check_context_parallel_ranks(world_size, rank);
  TORCH_CHECK(cu_seqlens.size() >= 2, who,
              ": cu_seqlens must hold the cumulative sequence lengths [0, l0, l0 + l1, ..., T] "
              "(at least 2 entries), but holds ", cu_seqlens.size());
  TORCH_CHECK(cu_seqlens.front() == 0 && cu_seqlens.back() == total, who,
              ": cu_seqlens must start at 0 and end at the number of packed tokens T = ", total,
              ", but goes from ", cu_seqlens.front(), " to ", cu_seqlens.back());
  const int64_t chunks = zigzag ? 2 * world_size : world_size;
  const size_t sequences = cu_seqlens.size() - 1;
  // Every boundary is checked before anything is written.
  for (size_t s = 0; s < sequences; ++s) {
    TORCH_CHECK(cu_seqlens[s] <= cu_seqlens[s + 1], who, ": cu_seqlens must not decrease, but "
                "entry ", s, " is ", cu_seqlens[s], " and entry ", s + 1, " is ",
                cu_seqlens[s + 1]);
    const int64_t length = cu_seqlens[s + 1] - cu_seqlens[s];
    TORCH_CHECK(length % chunks == 0, who, ": sequence ", s, " has ", length,
                " tokens, which must be a multiple of ",
                zigzag ? "2 * world_size = " : "world_size = ", chunks,
                " to split it into equal chunks; pad each sequence to a multiple of ", chunks,
                " (TransformerEngine pads its cu_seqlens so)");
  }
  PackedShard shard;
  shard.positions.reserve(static_cast<size_t>(total / world_size));
  shard.indices.reserve(static_cast<size_t>(total / world_size));
  for (size_t s = 0; s < sequences; ++s) {
    const int64_t chunk = (cu_seqlens[s + 1] - cu_seqlens[s]) / chunks;
    for (const int64_t index : {rank, chunks - 1 - rank}) {
      for (int64_t p = index * chunk; p < (index + 1) * chunk; ++p) {
        shard.positions.push_back(p);
        shard.indices.push_back(cu_seqlens[s] + p);
      }
      if (!zigzag) {
        break;
      }
    }
  }
  return shard;
}

std::pair<at::Tensor, at::Tensor> context_parallel_packed_positions_from(
    const at::Tensor& cu_seqlens, int64_t total, int64_t world_size, int64_t rank, bool zigzag) {
  static constexpr detail::CallerName who{};
  check_context_parallel_ranks(world_size, rank);
  const int64_t entries = cu_seqlens.numel();
  TORCH_CHECK(entries >= 2, who,
              ": cu_seqlens must hold the cumulative sequence lengths [0, l0, l0 + l1, ..., T] "
              "(at least 2 entries), but holds ", entries);
  const int64_t sequences = entries - 1;
  const int64_t chunks = zigzag ? 2 * world_size : world_size;
  const at::Tensor cu = cu_seqlens.reshape({-1}).to(at::kLong);
  const at::Tensor starts = cu.narrow(0, 0, sequences);
  const at::Tensor lengths = cu.narrow(0, 1, sequences) - starts;
  // What the host form checks, as one tensor of conditions and the values they are about: the
  // first entry (0), the last (total), entries that never decrease, lengths that split evenly.
  check_on_device(
      at::cat({cu.narrow(0, 0, 1).eq(0), cu.narrow(0, sequences, 1).eq(total),
               cu.narrow(0, 1, sequences).ge(starts), lengths.remainder(chunks).eq(0)}),
      at::cat({cu.narrow(0, 0, 1), cu.narrow(0, sequences, 1), lengths, lengths}),
      DeviceCheck::kCuSeqlensChunks);
  // The rank holds lengths[s] / world_size tokens of sequence s: slot j of the shard belongs to
  // the sequence s whose shard range [ends[s - 1], ends[s]) holds it, at k = j - its shard's
  // first slot.
  const int64_t local = total / world_size;
  const at::Tensor shard_lengths = lengths.div(world_size, "floor");
  const at::Tensor shard_ends = shard_lengths.cumsum(0).clamp(0, local);
  const at::Tensor sequence = sequence_of_slots(shard_ends, local);
  const at::Tensor slots = at::arange(local, cu.options());
  const at::Tensor k = slots - (shard_ends - shard_lengths).index({sequence});
  const at::Tensor chunk = lengths.div(chunks, "floor").index({sequence});
  at::Tensor positions = k + chunk * rank;
  if (zigzag) { // the second chunk, 2 * world_size - 1 - rank, after the first
    positions = at::where(k < chunk, positions, k - chunk + chunk * (chunks - 1 - rank));
  }
  at::Tensor indices = positions + starts.index({sequence});
  return {positions, indices};
}

namespace {

const char* mrope_kind_name(int64_t kind) {
  return kind == 1 ? "image" : "video";
}

// Checks each grid (t >= 1, h and w positive multiples of the merge size, at most 2^28 tokens) and
// its interval (below 2^62, and its last frame's temporal position too; finite and >= 0 is the
// caller's).
void check_mrope_grids(const MRopeGrids& grids, int64_t merge) {
  static constexpr detail::CallerName who{};
  TORCH_INTERNAL_ASSERT(grids.intervals.size() == grids.thw.size());
  for (size_t g = 0; g < grids.thw.size(); ++g) {
    const int64_t t = grids.thw[g][0];
    const int64_t h = grids.thw[g][1];
    const int64_t w = grids.thw[g][2];
    TORCH_CHECK(t >= 1 && h >= merge && w >= merge && h % merge == 0 && w % merge == 0, who,
                ": each grid of ", grids.name,
                " must have t >= 1 and h, w multiples of spatial_merge_size = ", merge,
                ", but grid ", g, " is [", t, ", ", h, ", ", w, "]");
    TORCH_CHECK(t <= kMaxTableElements / (h / merge) / (w / merge), who, ": grid ", g, " of ",
                grids.name, ", [", t, ", ", h, ", ", w,
                "], holds more than 2^28 tokens (posenc's limit of positions in one call)");
    // (below 2^62, the interval and its float32 products with the frame indices convert exactly
    // enough: the temporal positions stay within int64)
    const double interval = grids.intervals[g];
    TORCH_CHECK(interval < 0x1p62 && static_cast<double>(t - 1) * interval < 0x1p62, who,
                ": video_time_intervals must keep each video's interval and temporal positions "
                "below 2^62, but video ",
                g, " of ", t, " frames has ", interval,
                "; pass each video's spacing in positions (tokens_per_second * "
                "second_per_grid_ts)");
  }
}

// The grids of one kind in the order the tokens take them: each grid, or (`per_frame`,
// frames_apart) each frame of each grid as a grid of one frame of its own.
class GridCursor {
 public:
  GridCursor(const MRopeGrids& grids, bool per_frame) : grids_(grids), per_frame_(per_frame) {
    for (const auto& thw : grids.thw) {
      available_ += per_frame ? thw[0] : 1;
    }
  }

  bool exhausted() const {
    return taken_ == available_;
  }

  // The next grid ([t, h, w]) and the spacing of its frames.
  std::pair<std::array<int64_t, 3>, double> next() {
    const std::array<int64_t, 3>& thw = grids_.thw[grid_];
    ++taken_;
    if (!per_frame_) {
      return {thw, grids_.intervals[grid_++]};
    }
    if (++frame_ == thw[0]) {
      frame_ = 0;
      ++grid_;
    }
    return {{1, thw[1], thw[2]}, 1.0};
  }

  // What the messages count: "3 grids", or "5 frames (frames_apart: ...)".
  std::string counted(int64_t count) const {
    return std::to_string(count) +
           (per_frame_ ? " frames (frames_apart: each frame is a grid)" : " grids");
  }

  int64_t available() const {
    return available_;
  }
  int64_t taken() const {
    return taken_;
  }
  const char* name() const {
    return grids_.name;
  }

 private:
  const MRopeGrids& grids_;
  bool per_frame_;
  int64_t available_ = 0;
  int64_t taken_ = 0;
  size_t grid_ = 0;
  int64_t frame_ = 0;
};

} // namespace

MRopeNumbering mrope_position_ids(const std::vector<int64_t>& token_types,
                                  const std::vector<uint8_t>& keep, int64_t batch, int64_t length,
                                  const MRopeGrids& images, const MRopeGrids& videos,
                                  int64_t spatial_merge_size, bool frames_apart) {
  static constexpr detail::CallerName who{};
  const int64_t merge = spatial_merge_size;
  TORCH_CHECK(merge >= 1, who, ": spatial_merge_size must be >= 1, but got ", merge);
  check_mrope_grids(images, merge);
  check_mrope_grids(videos, merge);
  GridCursor cursors[2] = {GridCursor(images, false), GridCursor(videos, frames_apart)};
  MRopeNumbering out;
  out.positions.assign(static_cast<size_t>(3 * batch * length), 0);
  out.deltas.assign(static_cast<size_t>(batch), 0);
  const auto plane = static_cast<size_t>(batch * length);
  std::vector<int64_t> kept; // the columns of the row's tokens that are numbered
  for (int64_t b = 0; b < batch; ++b) {
    const auto row = static_cast<size_t>(b * length);
    kept.clear();
    for (int64_t j = 0; j < length; ++j) {
      if (keep.empty() || keep[row + static_cast<size_t>(j)] != 0) {
        kept.push_back(j);
      }
    }
    const auto n = static_cast<int64_t>(kept.size());
    const auto column = [&](int64_t i) { return kept[static_cast<size_t>(i)]; };
    const auto type_of = [&](int64_t i) {
      return token_types[row + static_cast<size_t>(column(i))];
    };
    int64_t largest = std::numeric_limits<int64_t>::min();
    const auto put = [&](int64_t i, int64_t temporal, int64_t height, int64_t width) {
      const size_t at = row + static_cast<size_t>(column(i));
      out.positions[at] = temporal;
      out.positions[plane + at] = height;
      out.positions[2 * plane + at] = width;
      largest = std::max({largest, temporal, height, width});
    };
    int64_t start = 0;
    for (int64_t i = 0, end = 0; i < n; i = end) {
      const int64_t kind = type_of(i);
      for (end = i; end < n && type_of(end) == kind; ++end) {
      }
      const int64_t run = end - i;
      if (kind == 0) {
        for (int64_t j = 0; j < run; ++j) {
          put(i + j, start + j, start + j, start + j);
        }
        start += run;
        continue;
      }
      TORCH_CHECK(kind == 1 || kind == 2, who,
                  ": token_types must hold 0 (text), 1 (image) or 2 (video), but row ", b,
                  " holds ", kind, " at column ", column(i),
                  "; pass transformers' mm_token_type_ids");
      GridCursor& grids = cursors[kind - 1];
      int64_t filled = 0;
      while (filled < run) {
        TORCH_CHECK(!grids.exhausted(), who, ": row ", b, " has more ", mrope_kind_name(kind),
                    " tokens than ", grids.name(), " has grids for (",
                    grids.counted(grids.available()), "); pass one [t, h, w] row per ",
                    mrope_kind_name(kind), ", in the order of the tokens");
        const auto grid = grids.next();
        const int64_t t = grid.first[0];
        const int64_t h = grid.first[1] / merge;
        const int64_t w = grid.first[2] / merge;
        if (filled + t * h * w <= run) { // (a grid past the run is an error below)
          int64_t token = i + filled;
          for (int64_t f = 0; f < t; ++f) {
            // frame * interval in float32, truncated (transformers' float32 tensors); the
            // interval is below 2^62 here (check_mrope_grids)
            const auto frame =
                static_cast<int64_t>(static_cast<float>(f) * static_cast<float>(grid.second));
            for (int64_t r = 0; r < h; ++r) {
              for (int64_t c = 0; c < w; ++c) {
                put(token++, start + frame, start + r, start + c);
              }
            }
          }
        }
        filled += t * h * w;
        start += std::max(h, w);
      }
      TORCH_CHECK(filled == run, who, ": row ", b, "'s run of ", run, " ", mrope_kind_name(kind),
                  " tokens at columns ", column(i), "..", column(end - 1),
                  " does not match its grids in ", grids.name(), ", which hold ", filled,
                  " tokens (t * h/", merge, " * w/", merge,
                  " each); each run of tokens must fill whole grids");
    }
    if (n > 0) {
      out.deltas[static_cast<size_t>(b)] = largest + 1 - n;
    }
  }
  for (const GridCursor& grids : cursors) {
    TORCH_CHECK(grids.taken() == grids.available(), who, ": ", grids.name(), " has ",
                grids.counted(grids.available()), ", but the tokens use ", grids.taken(),
                "; pass one [t, h, w] row per image or video that the tokens hold");
  }
  return out;
}

} // namespace detail
} // namespace posenc
