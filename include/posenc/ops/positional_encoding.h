#pragma once

/// @file
/// posenc's operators: sinusoidal tables and adding position tables to inputs. Each function calls its operator
/// `posenc::<name>` through the dispatcher (`torch.ops.posenc.<name>` from Python and
/// TorchScript); its schema is the `m.def` beside its entry point in `src/ops/sequence/positional_encoding.cpp` (kernels:
/// cpu/, cuda/, meta/, autograd/ and composite/positional_encoding_kernel.*). What positions, padding and rows past a table mean for every operator is
/// in <posenc/ops.h>.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Optional.h>
#include <c10/util/string_view.h>

#include <cstdint>

namespace posenc {
namespace ops {

/// The `[max_len, d_model]` sinusoidal table for positions `offset .. offset + max_len - 1`,
/// computed in float64 and rounded once to `dtype` (default float32) on `device` (default CPU).
/// `channels`: "interleaved" or "concatenated"; `frequencies`: "paper" or "tensor2tensor".
at::Tensor sinusoidal_table(int64_t max_len, int64_t d_model, double base = 10000.0,
                            int64_t offset = 0, c10::string_view channels = "interleaved",
                            c10::string_view frequencies = "paper",
                            c10::optional<at::ScalarType> dtype = c10::nullopt,
                            c10::optional<at::Device> device = c10::nullopt);

/// `x * scale + table[positions]` broadcast over the batch, in the dtype of `x` (formed in at
/// least float32, rounded once). `x` is `[B, L, D]` (`batch_first`) or `[L, B, D]`; `table` is
/// `[max_len, D]` or `[1, max_len, D]`. Differentiable with respect to `x` and `table` (the
/// batch-summed gradient lands in the rows used), so a trainable table works too; a table extended
/// by `columns` gets no gradient.
at::Tensor add_position_table(const at::Tensor& x, const at::Tensor& table, int64_t offset = 0,
                              bool batch_first = true,
                              const c10::optional<at::Tensor>& positions = c10::nullopt,
                              double scale = 1.0,
                              const c10::optional<at::Tensor>& columns = c10::nullopt);

/// `x * scale + PE(positions)` without a precomputed table: the rows needed are computed in
/// float64 for every call (float64 rows for float64 inputs, float32 otherwise), for any position.
/// Differentiable with respect to `x`.
at::Tensor add_positional_encoding(const at::Tensor& x, int64_t offset = 0, double base = 10000.0,
                                   bool batch_first = true,
                                   const c10::optional<at::Tensor>& positions = c10::nullopt,
                                   double scale = 1.0, c10::string_view channels = "interleaved",
                                   c10::string_view frequencies = "paper");

/// `add_position_table` in place: `x = x * scale + table[positions]`. Returns `x`. Autograd treats
/// it like any in-place operation (x must not be a leaf that requires grad).
at::Tensor& add_position_table_(at::Tensor& x, const at::Tensor& table, int64_t offset = 0,
                                bool batch_first = true,
                                const c10::optional<at::Tensor>& positions = c10::nullopt,
                                double scale = 1.0,
                                const c10::optional<at::Tensor>& columns = c10::nullopt);

/// `add_position_table` into a caller-owned `out` (of x's shape, dtype and device, or empty to be
/// resized): no allocation per call. Not differentiable. Returns `out`.
at::Tensor& add_position_table_out(at::Tensor& out, const at::Tensor& x, const at::Tensor& table,
                                   int64_t offset = 0, bool batch_first = true,
                                   const c10::optional<at::Tensor>& positions = c10::nullopt,
                                   double scale = 1.0,
                                   const c10::optional<at::Tensor>& columns = c10::nullopt);

} // namespace ops
} // namespace posenc
