#pragma once

// Positions of packed sequences and of context-parallel shards: the one definition the operators
// (posenc::packed_positions, posenc::context_parallel_positions), the functional forms and
// RotaryEmbedding::forward_packed use.

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace posenc {
namespace detail {

/// Positions of `total` packed tokens: token t of sequence s (cu_seqlens[s] <= t <
/// cu_seqlens[s + 1]) is at start[s] + t - cu_seqlens[s] (start empty: 0). Checks that
/// cu_seqlens starts at 0, never decreases and ends at `total`, that `start` has one entry per
/// sequence (>= 0), and that every position fits in int64.
std::vector<int64_t> packed_positions(const char* who, const std::vector<int64_t>& cu_seqlens,
                                      int64_t total, const std::vector<int64_t>& start);

/// packed_positions computed with tensor operations where `cu_seqlens` lies (1-D int32/int64, at
/// least 2 entries; `start` undefined or one entry per sequence on the same device): an int64
/// `[total]` tensor there. Nothing is read back: the conditions packed_positions checks are
/// checked on the device (check_on_device, DeviceCheck::kCuSeqlens).
at::Tensor packed_positions_from(const char* who, const at::Tensor& cu_seqlens, int64_t total,
                                 const at::Tensor& start);

/// Positions of rank `rank`'s shard of a `seq_len` sequence split over `world_size` ranks:
/// contiguous (chunk `rank` of `world_size` equal chunks) or zigzag (TransformerEngine's
/// load-balanced causal split: chunks `rank` and `2 * world_size - 1 - rank` of
/// `2 * world_size`).
std::vector<int64_t> context_parallel_positions(const char* who, int64_t seq_len,
                                                int64_t world_size, int64_t rank, bool zigzag);

} // namespace detail
} // namespace posenc
