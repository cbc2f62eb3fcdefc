#pragma once

// The arithmetic of the sinusoidal forward, after every argument has been checked.

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace posenc {
namespace detail {

/// `x + rows[offset : offset + L]` broadcast over the batch, in the dtype of `x`. `rows` is the
/// `[max_len, D]` table; the caller has checked shapes, devices and the offset.
at::Tensor add_table_rows(const at::Tensor& x, const at::Tensor& rows, int64_t offset, bool batch_first);

/// `dropout(x, p)` when `training` and `p > 0`, otherwise `x` itself.
at::Tensor apply_dropout(const at::Tensor& x, double p, bool training);

} // namespace detail
} // namespace posenc
