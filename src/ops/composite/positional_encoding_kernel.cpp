// Kernels for every backend (CPU, CUDA, ...) built from ATen operations, registered as
// CompositeExplicitAutograd: autograd comes from the kernels in ../autograd.

#include "detail/checks.h"
#include "detail/positional_encoding.h"
#include "detail/rotary.h"
#include "detail/sinusoidal.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/index_add.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace posenc {
namespace ops {
namespace {

using OptionalTensor = const c10::optional<at::Tensor>&;

at::Tensor sinusoidal_table_kernel(
    int64_t max_len,
    int64_t d_model,
    double base,
    int64_t offset,
    c10::string_view channels,
    c10::string_view frequencies,
    c10::optional<at::ScalarType> dtype,
    c10::optional<at::Device> device) {
  constexpr const char* who = "posenc::sinusoidal_table";
  const detail::SinusoidSpec spec{
      d_model, base, detail::parse_channel_layout(who, channels), detail::parse_frequency_spacing(who, frequencies)};
  const at::ScalarType out_dtype = dtype.value_or(at::kFloat);
  const at::Device out_device = device.value_or(at::Device(at::kCPU));
  detail::check_table_request(who, max_len, d_model, base, offset, out_dtype);
  if (out_device.is_meta()) {
    // Fake tensors and shape propagation: the same checks, then only an allocation.
    return at::empty({max_len, d_model}, at::TensorOptions().dtype(out_dtype).device(out_device));
  }
  return detail::sinusoidal_table(max_len, offset, spec, out_dtype, out_device);
}

// Checks of the position arguments of the table operators: either an offset inside the table or
// explicit positions; returns the checked positions (undefined for the offset form).
at::Tensor checked_table_positions(
    const char* who,
    const at::Tensor& x,
    int64_t max_len,
    int64_t offset,
    OptionalTensor positions,
    bool batch_first) {
  if (positions.has_value() && positions->defined()) {
    TORCH_CHECK(offset == 0, who, ": pass either an offset or explicit positions, not both (got offset = ", offset, ")");
    return detail::checked_sequence_positions(who, *positions, x, batch_first, max_len, {}).values;
  }
  detail::check_offset(who, offset, x.size(batch_first ? 1 : 0), max_len);
  return at::Tensor();
}

at::Tensor add_position_table_kernel(
    const at::Tensor& x,
    const at::Tensor& table,
    int64_t offset,
    bool batch_first,
    OptionalTensor positions,
    double scale) {
  constexpr const char* who = "posenc::add_position_table";
  const at::Tensor rows = detail::table_rows(who, table);
  detail::check_sequence_input(who, x, rows.size(1), batch_first, rows.device());
  TORCH_CHECK(std::isfinite(scale), who, ": scale must be finite, but got ", scale);
  const at::Tensor checked = checked_table_positions(who, x, rows.size(0), offset, positions, batch_first);
  const at::Tensor selected = checked.defined() ? detail::rows_for_positions(rows, checked, batch_first)
                                                : detail::rows_for_offset(rows, offset, x.size(batch_first ? 1 : 0), batch_first);
  return detail::add_rows(x, selected, scale);
}

at::Tensor add_position_table_backward_kernel(
    const at::Tensor& grad,
    const at::Tensor& table,
    int64_t offset,
    bool batch_first,
    OptionalTensor positions) {
  constexpr const char* who = "posenc::add_position_table_backward";
  const at::Tensor rows = detail::table_rows(who, table);
  detail::check_sequence_input(who, grad, rows.size(1), batch_first, rows.device());
  const at::Tensor checked = checked_table_positions(who, grad, rows.size(0), offset, positions, batch_first);
  at::Tensor grad_table = at::zeros_like(table, at::MemoryFormat::Contiguous);
  at::Tensor grad_rows = grad_table.dim() == 3 ? grad_table.select(0, 0) : grad_table;
  const int64_t batch_dim = batch_first ? 0 : 1;
  if (!checked.defined()) {
    // Summed over the batch in the table's dtype (float32 for a bfloat16 gradient, say).
    grad_rows.narrow(0, offset, grad.size(1 - batch_dim))
        .copy_(at::sum(grad, {batch_dim}, /*keepdim=*/false, table.scalar_type()));
    return grad_table;
  }
  // One row of gradient per position (shared positions: summed over the batch first), added into
  // the table rows they came from; padding (-1) contributes nothing.
  at::Tensor per_position;
  if (checked.dim() == 1) {
    per_position = at::sum(grad, {batch_dim}, /*keepdim=*/false, table.scalar_type());
  } else {
    per_position = grad.to(table.scalar_type()).reshape({-1, grad.size(2)});
  }
  const at::Tensor flat = checked.reshape({-1});
  per_position = per_position.masked_fill(flat.lt(0).unsqueeze(1), 0);
  grad_rows.index_add_(0, flat.clamp_min(0), per_position);
  return grad_table;
}

at::Tensor add_positional_encoding_kernel(
    const at::Tensor& x,
    int64_t offset,
    double base,
    bool batch_first,
    OptionalTensor positions,
    double scale,
    c10::string_view channels,
    c10::string_view frequencies) {
  constexpr const char* who = "posenc::add_positional_encoding";
  detail::check_sequence_input(who, x, detail::kAnyWidth, batch_first, x.device());
  TORCH_CHECK(std::isfinite(scale), who, ": scale must be finite, but got ", scale);
  const int64_t length = x.size(batch_first ? 1 : 0);
  const int64_t width = x.size(2);
  const detail::SinusoidSpec spec{
      std::max<int64_t>(width, 1), base, detail::parse_channel_layout(who, channels), detail::parse_frequency_spacing(who, frequencies)};
  // The same rules as a table of L rows starting at `offset` (any position is allowed).
  detail::check_table_request(who, std::max<int64_t>(length, 1), spec.d_model, base, std::max<int64_t>(offset, 0), at::kDouble);
  at::Tensor checked;
  if (positions.has_value() && positions->defined()) {
    TORCH_CHECK(offset == 0, who, ": pass either an offset or explicit positions, not both (got offset = ", offset, ")");
    checked = detail::checked_sequence_positions(who, *positions, x, batch_first, /*limit=*/-1, {}).values;
  } else {
    TORCH_CHECK(offset >= 0, who, ": offset must be >= 0, but got ", offset, "; positions start at 0");
    checked = at::arange(offset, offset + length, x.options().dtype(at::kLong));
  }
  if (x.numel() == 0) {
    return at::empty_like(x);
  }
  // float64 inputs get float64 rows; every other dtype adds float32 ones (in float32).
  const at::ScalarType rows_dtype = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor rows = detail::sinusoidal_rows(checked, spec, rows_dtype);
  return detail::add_rows(x, detail::broadcast_rows(rows, checked, batch_first), scale);
}

at::Tensor apply_rotary_kernel(
    const at::Tensor& x,
    const at::Tensor& cos,
    const at::Tensor& sin,
    int64_t offset,
    OptionalTensor positions,
    bool interleaved,
    bool heads_first,
    bool inverse) {
  constexpr const char* who = "posenc::apply_rotary";
  TORCH_CHECK(
      cos.defined() && sin.defined() && cos.dim() == 2 && cos.sizes() == sin.sizes() && cos.size(1) >= 1,
      who, ": cos and sin must be [max_len, R/2] tables of the same shape, but got ",
      cos.defined() ? cos.sizes() : at::IntArrayRef{}, " and ", sin.defined() ? sin.sizes() : at::IntArrayRef{});
  detail::check_float_dtype(who, "the dtype of cos and sin", cos.scalar_type());
  TORCH_CHECK(cos.scalar_type() == sin.scalar_type() && cos.device() == sin.device(), who, ": cos and sin must share dtype and device");
  detail::check_rotary_input(who, x, 2 * cos.size(1), heads_first, cos.device());
  const int64_t length = x.size(heads_first ? 2 : 1);
  at::Tensor cos_rows;
  at::Tensor sin_rows;
  if (positions.has_value() && positions->defined()) {
    TORCH_CHECK(offset == 0, who, ": pass either an offset or explicit positions, not both (got offset = ", offset, ")");
    const int64_t batch_and_length[] = {x.size(0), length};
    const at::Tensor checked = detail::checked_positions(who, *positions, length, batch_and_length, "[B, L]", x.device(), cos.size(0), {}).values;
    const at::Tensor flat = checked.reshape({-1});
    const at::Tensor padding = flat.lt(0).unsqueeze(1);
    // Padding (-1) is not rotated: cos 1, sin 0.
    const int64_t batch = checked.dim() == 1 ? 1 : x.size(0);
    cos_rows = detail::rotary_broadcast(cos.index_select(0, flat.clamp_min(0)).masked_fill(padding, 1), batch, length, heads_first);
    sin_rows = detail::rotary_broadcast(sin.index_select(0, flat.clamp_min(0)).masked_fill(padding, 0), batch, length, heads_first);
  } else {
    detail::check_offset(who, offset, length, cos.size(0));
    cos_rows = detail::rotary_broadcast(cos.narrow(0, offset, length), 1, length, heads_first);
    sin_rows = detail::rotary_broadcast(sin.narrow(0, offset, length), 1, length, heads_first);
  }
  return detail::rotate(x, cos_rows, sin_rows, interleaved, inverse);
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, CompositeExplicitAutograd, m) {
  m.impl("sinusoidal_table", TORCH_FN(sinusoidal_table_kernel));
  m.impl("add_positional_encoding", TORCH_FN(add_positional_encoding_kernel));
  m.impl("add_position_table", TORCH_FN(add_position_table_kernel));
  m.impl("add_position_table_backward", TORCH_FN(add_position_table_backward_kernel));
  m.impl("apply_rotary", TORCH_FN(apply_rotary_kernel));
}

} // namespace ops
} // namespace posenc
