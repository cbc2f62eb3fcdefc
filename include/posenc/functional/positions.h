#pragma once

/// Positions for padded batches: real tokens count 0, 1, 2, ... from the first real token of
/// their sequence, padding gets -1 (which the modules turn into a zero vector, as fairseq does).
/// Correct for left padding, right padding and padding in between.

#include <ATen/core/Tensor.h>

#include <cstdint>

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

} // namespace functional
} // namespace posenc
