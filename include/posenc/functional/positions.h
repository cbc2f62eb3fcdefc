#pragma once

/// Positions for padded batches: real tokens count 0, 1, 2, ... from the first real token of
/// their sequence, padding gets -1 (which the modules turn into a zero vector, as fairseq does).
/// Correct for left padding, right padding and padding in between.

#include <ATen/core/Tensor.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <tuple>

namespace posenc {
namespace functional {

/// Positions from a padding mask (`true` = padding) of shape `[B, L]` (`batch_first`) or
/// `[L, B]`: an int64 tensor of the same shape, -1 at padding.
///
/// Example:
/// ```
/// // mask [[1, 1, 0, 0, 0]] (left padding)  ->  [[-1, -1, 0, 1, 2]]
/// auto positions = posenc::functional::positions_from_padding_mask(mask);
/// ```
at::Tensor positions_from_padding_mask(const at::Tensor& padding_mask, bool batch_first = true);

/// Positions from token ids (`[B, L]` or `[L, B]`, integral): tokens equal to `padding_idx` are
/// padding.
at::Tensor positions_from_tokens(const at::Tensor& tokens, int64_t padding_idx,
                                 bool batch_first = true);

/// Positions of packed sequences (flash-attn varlen, TransformerEngine THD): int64 `[total]`,
/// restarting at each sequence of `cu_seqlens` (`[0, l0, l0 + l1, ..., total]`, int32 or
/// int64), or starting at `start_positions[s]` (e.g. each sequence's KV-cache length). The
/// functional form of the posenc::packed_positions operator.
///
/// Example:
/// ```
/// // cu_seqlens [0, 3, 5], start_positions [0, 10]  ->  [0, 1, 2, 10, 11]
/// auto positions = posenc::functional::packed_positions(cu_seqlens, 5, start_positions);
/// ```
at::Tensor packed_positions(const at::Tensor& cu_seqlens, int64_t total,
                            const at::Tensor& start_positions = at::Tensor());

/// Positions of rank `rank`'s shard of a `seq_len` sequence under context parallelism: the
/// contiguous split (chunk `rank` of `world_size`) or TransformerEngine's zigzag split (chunks
/// `rank` and `2 * world_size - 1 - rank` of `2 * world_size`). int64 on `device`.
///
/// Example:
/// ```
/// // seq_len 8, world_size 2, rank 0, zigzag  ->  [0, 1, 6, 7]
/// auto positions = posenc::functional::context_parallel_positions(8, 2, 0, /*zigzag=*/true);
/// ```
at::Tensor context_parallel_positions(int64_t seq_len, int64_t world_size, int64_t rank,
                                      bool zigzag = false,
                                      const c10::Device& device = c10::Device(c10::kCPU));

/// Rank `rank`'s shard of packed sequences under context parallelism, split sequence by sequence
/// (TransformerEngine's THD layout; posenc::ops::context_parallel_packed_positions): each
/// sequence's positions as context_parallel_positions splits a whole sequence, the rank's chunks
/// of every sequence in order. Returns `(positions, indices)`, int64 `[total / world_size]` on
/// the device of `cu_seqlens`: the tokens' positions in their sequences and their indices in the
/// packed batch.
///
/// Example:
/// ```
/// // sequences of 8 and 4 tokens, world_size 2, rank 0, zigzag
/// //   -> positions [0, 1, 6, 7, 0, 3], indices [0, 1, 6, 7, 8, 11]
/// auto [positions, indices] = posenc::functional::context_parallel_packed_positions(
///     torch::tensor({0, 8, 12}), 12, 2, 0, /*zigzag=*/true);
/// auto local = packed.index_select(0, indices); // the rank's tokens, [6, H, Dh]
/// ```
std::tuple<at::Tensor, at::Tensor> context_parallel_packed_positions(const at::Tensor& cu_seqlens,
                                                                     int64_t total,
                                                                     int64_t world_size,
                                                                     int64_t rank,
                                                                     bool zigzag = false);

} // namespace functional
} // namespace posenc
