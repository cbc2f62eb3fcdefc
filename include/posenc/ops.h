#pragma once

/// posenc's custom operators, registered with the PyTorch dispatcher under the namespace `posenc`
/// (`TORCH_LIBRARY(posenc, m)`): from Python, `torch.ops.load_library("libposenc.so")` and then
/// `torch.ops.posenc.<name>`; from TorchScript, `torch.ops.posenc.<name>(...)`. The functions
/// below call the same operators through the dispatcher, so CPU, CUDA, Meta (fake tensors) and
/// autograd all take the registered kernels.
///
/// Schemas:
///
///   posenc::sinusoidal_table(int max_len, int d_model, float base=10000., int offset=0,
///                            ScalarType? dtype=None, Device? device=None) -> Tensor
///   posenc::add_positional_encoding(Tensor x, int offset=0, float base=10000.,
///                                   bool batch_first=True) -> Tensor
///   posenc::add_position_table(Tensor x, Tensor table, int offset=0,
///                              bool batch_first=True) -> Tensor
///   posenc::add_position_table_backward(Tensor grad, Tensor table, int offset,
///                                       bool batch_first) -> Tensor

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Optional.h>

#include <cstdint>

namespace posenc {
namespace ops {

/// The `[max_len, d_model]` sinusoidal table for positions `offset .. offset + max_len - 1`,
/// computed in float64 and rounded once to `dtype` (default float32) on `device` (default CPU).
at::Tensor sinusoidal_table(
    int64_t max_len,
    int64_t d_model,
    double base = 10000.0,
    int64_t offset = 0,
    c10::optional<at::ScalarType> dtype = c10::nullopt,
    c10::optional<at::Device> device = c10::nullopt);

/// `x + PE(offset .. offset + L - 1)` without a precomputed table: the rows needed are computed in
/// float64 on the device of `x` for every call. `x` is `[B, L, D]` (`batch_first`) or `[L, B, D]`,
/// any `D >= 1`; the result has the dtype of `x`. Differentiable with respect to `x`.
at::Tensor add_positional_encoding(
    const at::Tensor& x,
    int64_t offset = 0,
    double base = 10000.0,
    bool batch_first = true);

/// `x + table[offset : offset + L]` broadcast over the batch, in the dtype of `x` (the sum is
/// formed in at least float32 and rounded once). `table` is `[max_len, D]` or `[1, max_len, D]`.
/// Differentiable with respect to `x` (identity) and `table` (the batch-summed gradient lands in
/// rows `offset .. offset + L - 1`), so a trainable table works too.
at::Tensor add_position_table(
    const at::Tensor& x,
    const at::Tensor& table,
    int64_t offset = 0,
    bool batch_first = true);

/// The gradient of `add_position_table` with respect to `table`: a tensor shaped like `table`
/// whose rows `offset .. offset + L - 1` hold `grad` summed over the batch, zeros elsewhere.
at::Tensor add_position_table_backward(
    const at::Tensor& grad,
    const at::Tensor& table,
    int64_t offset,
    bool batch_first);

} // namespace ops

namespace detail {
/// Returns the number of operators posenc registers. Referenced below so that any program that
/// includes this header keeps libposenc (and with it the registrations) even when linked with
/// --as-needed, as torchvision does for its ops.
int64_t registered_op_count();
inline const auto registered_op_count_anchor = &registered_op_count;
} // namespace detail
} // namespace posenc
