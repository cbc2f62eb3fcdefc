#pragma once

// The arithmetic of the composite kernels, from ATen operations: rows of a table selected by a
// checked call and shaped to broadcast against its input, and the sum in the input's dtype.

#include "ops/common/arguments.h"

#include <ATen/core/Tensor.h>

namespace posenc {
namespace ops {
namespace composite {

/// Rows `[N, D]` (one per position, in the order of `positions`) shaped to broadcast against x:
/// positions `[L]` give `[1, L, D]` / `[L, 1, D]`, per-sequence positions `[B, L, D]` / `[L, B,
/// D]`.
at::Tensor broadcast_rows(const at::Tensor& rows, const at::Tensor& positions, bool batch_first);

/// `table[positions]` of a checked call (zero rows for padding), shaped to broadcast against x.
at::Tensor selected_rows(const TableCall& call);

/// `x * scale + rows` (rows broadcast) in the dtype of `x`. Type promotion forms the sum in float32
/// for float16/bfloat16 inputs (float64 when either side is float64); the single cast at the end is
/// the only rounding to the input's dtype.
at::Tensor add_rows(const at::Tensor& x, const at::Tensor& rows, double scale);

} // namespace composite
} // namespace ops
} // namespace posenc
