#pragma once

/// @file
/// posenc's operators: positions of packed sequences, context-parallel shards, padded sequences and
/// multimodal batches.
/// Each function calls its operator `posenc::<name>` through the dispatcher
/// (`torch.ops.posenc.<name>` from Python and TorchScript); its schema is the `m.def` beside its
/// entry point in `src/ops/positions/positions.cpp` (kernels: the same file). What positions, padding and
/// rows past a table mean for every operator is in <posenc/ops.h>.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <tuple>

namespace posenc {
namespace ops {

/// Positions of packed sequences (flash-attn varlen, TransformerEngine's THD format): `total`
/// tokens, sequence s holding tokens cu_seqlens[s] .. cu_seqlens[s + 1] - 1 (`cu_seqlens`: 1-D
/// int32 or int64, 0 first, non-decreasing, `total` last); its tokens get positions
/// start_positions[s], start_positions[s] + 1, ... (default 0: positions restart at each
/// sequence). An int64 `[total]` tensor on the device of `cu_seqlens` (computed there: nothing is read back from a GPU).
at::Tensor packed_positions(const at::Tensor& cu_seqlens, int64_t total,
                            const c10::optional<at::Tensor>& start_positions = c10::nullopt);

/// Positions of one rank's shard of a `seq_len` sequence under context parallelism: chunk `rank`
/// of `world_size` equal chunks, or, `zigzag`, TransformerEngine's load-balanced split into
/// `2 * world_size` chunks of which rank r holds chunks r and 2 * world_size - 1 - r. int64, on
/// `device` (default CPU).
at::Tensor context_parallel_positions(int64_t seq_len, int64_t world_size, int64_t rank,
                                      bool zigzag = false,
                                      c10::optional<at::Device> device = c10::nullopt);

/// One rank's shard of `total` packed sequences under context parallelism, split sequence by
/// sequence as TransformerEngine splits its THD batches: each sequence (`cu_seqlens` as
/// packed_positions reads it) in `world_size` equal chunks of which the rank holds chunk `rank`,
/// or, `zigzag`, in `2 * world_size` chunks of which it holds chunks `rank` and
/// `2 * world_size - 1 - rank`; its chunks of sequence 0 first, then of sequence 1, ... Every
/// sequence's length must be a multiple of the chunks. Returns int64 `[total / world_size]`
/// `(positions, indices)` on the device of `cu_seqlens`: each token's position in its sequence
/// (for the rotary operators' `positions`) and its index in the packed batch (`index_select`
/// the rank's tokens, labels and masks with it). Computed there: nothing is read back from a GPU.
std::tuple<at::Tensor, at::Tensor> context_parallel_packed_positions(const at::Tensor& cu_seqlens,
                                                                     int64_t total,
                                                                     int64_t world_size,
                                                                     int64_t rank,
                                                                     bool zigzag = false);

/// Positions of padded sequences (fairseq's): each real token's position is the number of real
/// tokens before it in its sequence, padding (`true` in the bool `padding_mask`, `[B, L]`, or
/// `[L, B]` with `batch_first = false`) gets -1. int64, on the mask's device.
at::Tensor positions_from_padding_mask(const at::Tensor& padding_mask, bool batch_first = true);

/// Multimodal RoPE's positions of a batch of text, image and video tokens (transformers'
/// `get_rope_index` of Qwen2-VL, Qwen2.5-VL and Qwen3-VL): int64 `[3, B, L]` (temporal, height,
/// width) and each row's delta `[B, 1]` (its largest position + 1 - its number of kept tokens),
/// on the device of `token_types` (`[B, L]` integers: 0 text, 1 image, 2 video). Text counts up
/// by one on all axes; a run of image or video tokens takes the next grids of `image_grid_thw` /
/// `video_grid_thw` (`[N, 3]`: t, h, w patches before merging) until it is filled, a grid of
/// t * (h / m) * (w / m) tokens (m = `spatial_merge_size`) numbered start + (frame * interval,
/// multiplied in float32 and truncated, as transformers' float32 tensors), start + row, start +
/// column; the next token starts at start + max(h, w) / m. `video_time_intervals`: each video's
/// temporal spacing in positions (finite, >= 0; default 1). `frames_apart`: each frame of a video
/// is a grid of its own (Qwen3-VL; the intervals then have no effect). Tokens where
/// `attention_mask` (on the device of `token_types`) is 0 get position 0 and are not counted. The
/// values are read on the host (the grids decide the numbering).
std::tuple<at::Tensor, at::Tensor> mrope_position_ids(
    const at::Tensor& token_types, const c10::optional<at::Tensor>& image_grid_thw = c10::nullopt,
    const c10::optional<at::Tensor>& video_grid_thw = c10::nullopt,
    const c10::optional<at::Tensor>& attention_mask = c10::nullopt, int64_t spatial_merge_size = 2,
    c10::optional<c10::ArrayRef<double>> video_time_intervals = c10::nullopt,
    bool frames_apart = false);

} // namespace ops
} // namespace posenc
