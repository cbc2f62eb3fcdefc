#pragma once

// The arithmetic of the table-based forwards (sinusoidal and learned), after the input checks.

#include "detail/sinusoidal.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace posenc {
namespace detail {

/// How a table-based forward treats positions at or past the table's end.
struct BeyondTable {
  /// When set, positions past the table are computed on the fly with this encoding; otherwise
  /// they are an error.
  const SinusoidSpec* extrapolate = nullptr;
  /// What the error message suggests besides a larger max_len.
  const char* hint = "";
};

/// Explicit positions after checking: contiguous int64 values and their largest value.
struct CheckedPositions {
  at::Tensor values;
  int64_t largest = -1;
};

/// Checks explicit positions: an integer tensor of shape `[L]` (shared by the batch) or
/// `per_sequence` (described by `per_sequence_name`, e.g. "[B, L]"), on `device`, with values in
/// [-1, limit) (-1 = padding; limit < 0 or `beyond.extrapolate` set: no upper bound). Reading the
/// extremes synchronizes with the device.
CheckedPositions checked_positions(const char* who,
                                   const at::Tensor& positions,
                                   int64_t length,
                                   at::IntArrayRef per_sequence,
                                   const char* per_sequence_name,
                                   const c10::Device& device,
                                   int64_t limit,
                                   const BeyondTable& beyond);

/// checked_positions for an input `x` of layout [B, L, D] (batch_first) or [L, B, D].
CheckedPositions checked_sequence_positions(const char* who,
                                            const at::Tensor& positions,
                                            const at::Tensor& x,
                                            bool batch_first,
                                            int64_t limit,
                                            const BeyondTable& beyond);

/// `table_rows[offset : offset + L]` shaped to broadcast against `x` (`[1, L, D]` or `[L, 1, D]`).
at::Tensor rows_for_offset(const at::Tensor& table_rows,
                           int64_t offset,
                           int64_t length,
                           bool batch_first);

/// Rows `[N, D]` (one per position, in the order of `positions`) shaped to broadcast against `x`:
/// positions of shape `[L]` give `[1, L, D]` / `[L, 1, D]`, positions shaped like x's first two
/// dimensions give `[B, L, D]` / `[L, B, D]`.
at::Tensor broadcast_rows(const at::Tensor& rows, const at::Tensor& positions, bool batch_first);

/// `table_rows[positions]` with zero rows for -1 (padding), shaped by `broadcast_rows`.
at::Tensor rows_for_positions(const at::Tensor& table_rows,
                              const at::Tensor& positions,
                              bool batch_first);

/// `x * scale + rows` (rows broadcast) in the dtype of `x`. Type promotion forms the sum in
/// float32 for float16/bfloat16 inputs (float64 when either side is float64); the single cast at
/// the end is the only rounding to the input's dtype.
at::Tensor add_rows(const at::Tensor& x, const at::Tensor& rows, double scale);

/// `dropout(x, p)` when `training` and `p > 0`, otherwise `x` itself.
at::Tensor apply_dropout(const at::Tensor& x, double p, bool training);

/// The forward of a table-based module or functional: checks (messages prefixed by `who`), then
/// `x * scale + table[positions]` through the posenc::add_position_table operator, or, for
/// positions past the table with `beyond.extrapolate` set, with those rows computed on the fly.
/// `positions` undefined means `offset .. offset + L - 1`. Dropout is left to the caller.
at::Tensor table_forward(const char* who,
                         const at::Tensor& x,
                         const at::Tensor& table,
                         int64_t offset,
                         const at::Tensor& positions,
                         bool batch_first,
                         double scale,
                         const BeyondTable& beyond,
                         bool inplace = false);

/// Dropout after a table forward: in place on `x` when `inplace`.
at::Tensor apply_dropout(const at::Tensor& x, double p, bool training, bool inplace);

} // namespace detail
} // namespace posenc
