// Kernels for every backend (CPU, CUDA, ...) built from ATen operations, registered as
// CompositeExplicitAutograd: autograd comes from the kernels in ../autograd.

#include "detail/checks.h"
#include "detail/positional_encoding.h"
#include "detail/sinusoidal.h"

#include <posenc/functional/positional_encoding.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>

namespace posenc {
namespace ops {
namespace {

at::Tensor sinusoidal_table_kernel(
    int64_t max_len,
    int64_t d_model,
    double base,
    int64_t offset,
    c10::optional<at::ScalarType> dtype,
    c10::optional<at::Device> device) {
  const at::ScalarType out_dtype = dtype.value_or(at::kFloat);
  const at::Device out_device = device.value_or(at::Device(at::kCPU));
  if (out_device.is_meta()) {
    // Fake tensors and shape propagation: the same checks, then only an allocation.
    detail::check_table_request("posenc::sinusoidal_table", max_len, d_model, base, offset, out_dtype);
    return at::empty({max_len, d_model}, at::TensorOptions().dtype(out_dtype).device(out_device));
  }
  return functional::detail::sinusoidal_table(max_len, d_model, base, offset, out_dtype, out_device);
}

at::Tensor add_position_table_kernel(const at::Tensor& x, const at::Tensor& table, int64_t offset, bool batch_first) {
  constexpr const char* who = "posenc::add_position_table";
  const at::Tensor rows = detail::table_rows(who, table);
  detail::check_sequence_input(who, x, rows.size(1), batch_first, rows.device());
  detail::check_offset(who, offset, x.size(batch_first ? 1 : 0), rows.size(0));
  return detail::add_table_rows(x, rows, offset, batch_first);
}

at::Tensor add_position_table_backward_kernel(
    const at::Tensor& grad,
    const at::Tensor& table,
    int64_t offset,
    bool batch_first) {
  constexpr const char* who = "posenc::add_position_table_backward";
  const at::Tensor rows = detail::table_rows(who, table);
  detail::check_sequence_input(who, grad, rows.size(1), batch_first, rows.device());
  const int64_t length = grad.size(batch_first ? 1 : 0);
  detail::check_offset(who, offset, length, rows.size(0));
  at::Tensor grad_table = at::zeros_like(table, at::MemoryFormat::Contiguous);
  at::Tensor grad_rows = grad_table.dim() == 3 ? grad_table.select(0, 0) : grad_table;
  // Summed over the batch in the table's dtype (float32 for a bfloat16 gradient, say).
  grad_rows.narrow(0, offset, length).copy_(at::sum(grad, {batch_first ? 0 : 1}, /*keepdim=*/false, table.scalar_type()));
  return grad_table;
}

at::Tensor add_positional_encoding_kernel(const at::Tensor& x, int64_t offset, double base, bool batch_first) {
  constexpr const char* who = "posenc::add_positional_encoding";
  detail::check_sequence_input(who, x, detail::kAnyWidth, batch_first, x.device());
  const int64_t length = x.size(batch_first ? 1 : 0);
  // The same rules as a table of L rows starting at `offset`.
  detail::check_table_request(who, std::max<int64_t>(length, 1), std::max<int64_t>(x.size(2), 1), base, offset, at::kDouble);
  if (length == 0 || x.size(2) == 0) {
    return at::empty_like(x);
  }
  // float64 inputs get a float64 table; every other dtype adds a float32 one (in float32).
  const at::ScalarType table_dtype = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor rows = functional::detail::sinusoidal_table(length, x.size(2), base, offset, table_dtype, x.device());
  return detail::add_table_rows(x, rows, 0, batch_first);
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, CompositeExplicitAutograd, m) {
  m.impl("sinusoidal_table", TORCH_FN(sinusoidal_table_kernel));
  m.impl("add_positional_encoding", TORCH_FN(add_positional_encoding_kernel));
  m.impl("add_position_table", TORCH_FN(add_position_table_kernel));
  m.impl("add_position_table_backward", TORCH_FN(add_position_table_backward_kernel));
}

} // namespace ops
} // namespace posenc
