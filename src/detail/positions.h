#pragma once

// Positions of packed sequences, of context-parallel shards and of multimodal batches: the one
// definition the operators (posenc::packed_positions, posenc::context_parallel_positions,
// posenc::mrope_position_ids), the functional forms and RotaryEmbedding::forward_packed use.

#include <array>
#include <utility>
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace posenc {
namespace detail {

/// Positions of `total` packed tokens: token t of sequence s (cu_seqlens[s] <= t <
/// cu_seqlens[s + 1]) is at start[s] + t - cu_seqlens[s] (start empty: 0). Checks that
/// cu_seqlens starts at 0, never decreases and ends at `total`, that `start` has one entry per
/// sequence (>= 0), and that every position fits in int64.
std::vector<int64_t> packed_positions(const std::vector<int64_t>& cu_seqlens, int64_t total,
                                      const std::vector<int64_t>& start);

/// packed_positions computed with tensor operations where `cu_seqlens` lies (1-D int32/int64, at
/// least 2 entries; `start` undefined or one entry per sequence on the same device): an int64
/// `[total]` tensor there. Nothing is read back: the conditions packed_positions checks are
/// checked on the device (check_on_device, DeviceCheck::kCuSeqlens).
at::Tensor packed_positions_from(const at::Tensor& cu_seqlens, int64_t total,
                                 const at::Tensor& start);

/// Positions of rank `rank`'s shard of a `seq_len` sequence split over `world_size` ranks:
/// contiguous (chunk `rank` of `world_size` equal chunks) or zigzag (TransformerEngine's
/// load-balanced causal split: chunks `rank` and `2 * world_size - 1 - rank` of
/// `2 * world_size`).
std::vector<int64_t> context_parallel_positions(int64_t seq_len, int64_t world_size, int64_t rank,
                                                bool zigzag);

/// Rank `rank`'s shard of `total` packed tokens (cu_seqlens as packed_positions reads it) split
/// for context parallelism sequence by sequence (TransformerEngine's THD layout): each sequence
/// in `world_size` equal chunks (the rank's chunk `rank`) or, zigzag, in `2 * world_size` (its
/// chunks `rank` and `2 * world_size - 1 - rank`); the rank holds its chunks of sequence 0, then
/// of sequence 1, ... `positions` counts from each sequence's first token, `indices` are those
/// tokens' places in the packed batch (`total / world_size` of each). Checks cu_seqlens as
/// packed_positions does, and that every sequence's length is a multiple of the chunks.
struct PackedShard {
  std::vector<int64_t> positions;
  std::vector<int64_t> indices;
};
PackedShard context_parallel_packed_positions(const std::vector<int64_t>& cu_seqlens,
                                              int64_t total, int64_t world_size, int64_t rank,
                                              bool zigzag);

/// context_parallel_packed_positions computed with tensor operations where `cu_seqlens` lies
/// (1-D int32/int64, at least 2 entries): int64 `[total / world_size]` positions and indices
/// there, nothing read back (the conditions on cu_seqlens are checked on the device:
/// DeviceCheck::kCuSeqlensChunks). `total` must be a multiple of the chunks (the caller checks).
std::pair<at::Tensor, at::Tensor> context_parallel_packed_positions_from(
    const at::Tensor& cu_seqlens, int64_t total, int64_t world_size, int64_t rank, bool zigzag);

/// Checks world_size and rank of a context-parallel split (0 <= rank < world_size <= 2^28).
void check_context_parallel_ranks(int64_t world_size, int64_t rank);

/// The image or the video grids of a multimodal batch, as multimodal RoPE numbers them: each
/// grid's temporal, height and width patches (before merging) and its frames' temporal spacing.
struct MRopeGrids {
  /// The argument that gave them (`image_grid_thw`, `video_grid_thw`), for messages.
  const char* name;
  /// `[t, h, w]` of each grid.
  std::vector<std::array<int64_t, 3>> thw;
  /// Each grid's temporal spacing, one per grid (finite and >= 0: checked by the caller).
  std::vector<double> intervals;
};

/// The numbering of a multimodal batch: `[3, B, L]` positions (row-major) and each row's delta.
struct MRopeNumbering {
  std::vector<int64_t> positions;
  std::vector<int64_t> deltas;
};

/// Multimodal RoPE's positions of `batch` rows of `length` tokens (transformers' get_rope_index
/// of Qwen2-VL, Qwen2.5-VL and Qwen3-VL): `token_types` (row-major, 0 text, 1 image, 2 video),
/// `keep` (empty: every token; else 0 for tokens left out, which get position 0). Text counts up
/// by one on all three axes; each run of image or video tokens takes the next grids of its kind
/// until it is filled, a grid of t * (h / m) * (w / m) tokens (m = `spatial_merge_size`)
/// numbered start + (frame * interval in float32, truncated), start + row, start + column, the
/// next token starting at start + max(h, w) / m. `frames_apart`: each frame of a video is a grid
/// of its own (its interval then has no effect). A row's delta is its largest position + 1 - its
/// number of kept tokens (0 for a row of none). Checks the grids, the token types and that the
/// runs and the grids match exactly.
MRopeNumbering mrope_position_ids(const std::vector<int64_t>& token_types,
                                  const std::vector<uint8_t>& keep, int64_t batch, int64_t length,
                                  const MRopeGrids& images, const MRopeGrids& videos,
                                  int64_t spatial_merge_size, bool frames_apart);

} // namespace detail
} // namespace posenc
