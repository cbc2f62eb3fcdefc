// Composite kernels of the positional-encoding family (ATen operations only), registered as
// CompositeExplicitAutograd: autograd comes from ../autograd.

#include "ops/common/backend_entries.h"
#include "ops/common/composite_kernels.h"
#include "ops/common/composite_rows.h"
#include "ops/common/sym_length.h"
#include "ops/sequence/composite_kernel.h"

#include "detail/checks.h"
#include "detail/sinusoidal.h"
#include "detail/device_checks.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/add.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>

namespace posenc {
namespace ops {
namespace composite {

at::Tensor broadcast_rows(const at::Tensor& rows, const at::Tensor& positions, bool batch_first) {
  if (positions.dim() == 1) {
    return batch_first ? rows.unsqueeze(0) : rows.unsqueeze(1);
  }
  return rows.view({positions.size(0), positions.size(1), rows.size(1)});
}

at::Tensor selected_rows(const TableCall& call) {
  const at::Tensor rows = detail::table_rows(call.table);
  if (!call.positions.defined()) {
    const at::Tensor slice = rows.narrow(0, call.offset, call.length);
    return call.batch_first ? slice.unsqueeze(0) : slice.unsqueeze(1);
  }
  const at::Tensor flat = call.positions.reshape({-1});
  const at::Tensor selected =
      at::index_select(rows, 0, flat.clamp_min(0)).masked_fill(flat.lt(0).unsqueeze(1), 0);
  return broadcast_rows(selected, call.positions, call.batch_first);
}

at::Tensor add_rows(const at::Tensor& x, const at::Tensor& rows, double scale) {
  // rows + x * scale with the product rounded before the sum, as the hand-written kernels round
  // it (at::add's alpha may fuse the two into one FMA); computed in float32, or float64 as soon as
  // either operand is.
  const at::ScalarType acc =
      at::promote_types(at::promote_types(x.scalar_type(), rows.scalar_type()), at::kFloat);
  at::Tensor out = scale == 1.0 ? at::add(x, rows) : at::add(rows, at::mul(x.to(acc), scale));
  if (out.scalar_type() != x.scalar_type()) {
    out = out.to(x.scalar_type());
  }
  return out;
}

at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return at::empty(sizes, options);
}

void add_loop(const at::Tensor& x, at::Tensor& out, const TableCall& call) {
  out.copy_(add_rows(x, selected_rows(call), call.scale));
}

at::Tensor add_position_table(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                              bool batch_first, OptionalTensor positions, double scale,
                              OptionalTensor columns) {
  return add_position_table_kernel<add_loop, empty>(x, table, offset, batch_first, positions, scale,
                                                    columns);
}

namespace {

at::Tensor add_position_table_backward(const at::Tensor& grad, const at::Tensor& table,
                                       int64_t offset, bool batch_first, OptionalTensor positions) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{},
                                   "posenc::_add_position_table_backward");
  const TableCall call =
      prepare_table_call(grad, table, offset, positions, batch_first, 1.0, c10::nullopt);
  at::Tensor grad_table = at::zeros_like(table, at::MemoryFormat::Contiguous);
  at::Tensor grad_rows = detail::table_rows(grad_table);
  const int64_t batch_dim = batch_first ? 0 : 1;
  if (!call.positions.defined()) {
    // Summed over the batch in the table's dtype (float32 for a bfloat16 gradient, say).
    grad_rows.narrow(0, offset, call.length)
        .copy_(at::sum(grad, {batch_dim}, /*keepdim=*/false, table.scalar_type()));
    return grad_table;
  }
  if (detail::checks_on_device(grad.device())) {
    // (not read back: >= -1 here, < the table's rows by index_add_'s own device check)
    detail::check_positions_on_device(call.positions);
  }
  // One row of gradient per position (shared positions: summed over the batch first), added into
  // the table rows they came from; padding (-1) contributes nothing.
  at::Tensor per_position = call.positions.dim() == 1
                                ? at::sum(grad, {batch_dim}, /*keepdim=*/false, table.scalar_type())
                                : grad.to(table.scalar_type()).reshape({-1, grad.size(2)});
  const at::Tensor flat = call.positions.reshape({-1});
  per_position = per_position.masked_fill(flat.lt(0).unsqueeze(1), 0);
  grad_rows.index_add_(0, flat.clamp_min(0), per_position);
  return grad_table;
}

at::Tensor sinusoidal_table(SymLength length, int64_t d_model, double base, int64_t offset,
                            c10::string_view channels, c10::string_view frequencies,
                            c10::optional<at::ScalarType> dtype, c10::optional<at::Device> device) {
  const detail::CallerScope caller_scope(detail::CallerScope::Rename{}, "posenc::sinusoidal_table");
  const detail::SinusoidSpec spec{d_model, base, detail::parse_channel_layout(channels),
                                  detail::parse_frequency_spacing(frequencies)};
  const at::ScalarType out_dtype = dtype.value_or(at::kFloat);
  const at::Device out_device = device.value_or(at::Device(at::kCPU));
  if (out_device.is_meta()) {
    // Fake tensors and shape propagation: the same checks (of a concrete length; a symbolic
    // one, torch.export's, is checked when the program runs), then only an allocation.
    const c10::optional<int64_t> rows = concrete(length);
    detail::check_table_request(rows.value_or(1), d_model, base, offset, out_dtype);
    return empty_with_lengths({length, SymLength(d_model)},
                              at::TensorOptions().dtype(out_dtype).device(out_device));
  }
  const int64_t max_len = value_of(length);
  detail::check_table_request(max_len, d_model, base, offset, out_dtype);
  return detail::sinusoidal_table(max_len, offset, spec, out_dtype, out_device);
}

at::Tensor sinusoidal_columns(int64_t d_model, double base, c10::string_view channels,
                              c10::string_view frequencies, c10::optional<at::Device> device) {
  const detail::CallerScope caller_scope(detail::CallerScope::Rename{},
                                         "posenc::sinusoidal_columns");
  detail::check_table_arguments(/*max_len=*/1, d_model, base);
  const detail::SinusoidSpec spec{d_model, base, detail::parse_channel_layout(channels),
                                  detail::parse_frequency_spacing(frequencies)};
  const at::Device out_device = device.value_or(at::Device(at::kCPU));
  if (out_device.is_meta()) {
    return at::empty({2, d_model}, at::TensorOptions().dtype(at::kDouble).device(out_device));
  }
  return detail::column_plan_tensor(spec).to(out_device);
}

// add_positional_encoding with device-resident positions: checked and turned into rows where
// they lie (no read back; see detail/device_checks.h), padding (-1) adding zeros.
at::Tensor add_positional_encoding_on_device(const at::Tensor& x, const at::Tensor& positions,
                                             const detail::SinusoidSpec& spec, bool batch_first,
                                             double scale) {
  const bool continuous = detail::is_continuous(positions);
  const at::Tensor p = positions.to(continuous ? at::kDouble : at::kLong);
  detail::check_positions_on_device(p);
  if (x.numel() == 0) {
    return at::empty_like(x);
  }
  const at::ScalarType rows_dtype = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor rows = detail::sinusoidal_rows(p, detail::column_plan(spec), rows_dtype);
  return add_rows(x, broadcast_rows(rows, p, batch_first), scale);
}

} // namespace

at::Tensor add_positional_encoding(const at::Tensor& x, int64_t offset, double base,
                                   bool batch_first, OptionalTensor positions, double scale,
                                   c10::string_view channels, c10::string_view frequencies) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{},
                                         "posenc::add_positional_encoding");
  detail::check_sequence_input(x, detail::kAnyWidth, batch_first, x.device());
  detail::check_scale(scale, x.scalar_type());
  const int64_t length = x.size(batch_first ? 1 : 0);
  const detail::SinusoidSpec spec{std::max<int64_t>(x.size(2), 1), base,
                                  detail::parse_channel_layout(channels),
                                  detail::parse_frequency_spacing(frequencies)};
  // The same rules as a table of L rows starting at `offset` (any position is allowed).
  detail::check_table_request(std::max<int64_t>(length, 1), spec.d_model, base,
                              std::max<int64_t>(offset, 0), at::kDouble);
  // The positions on the host (one read from the device), where their rows are computed.
  at::Tensor checked;
  if (positions.has_value() && positions->defined()) {
    detail::check_no_offset_with_positions(offset);
    detail::check_positions_form(*positions, length, x.sizes().slice(0, 2),
                                 detail::sequence_layout(batch_first), x.device(),
                                 /*continuous=*/true);
    if (detail::checks_on_device(x.device())) {
      return add_positional_encoding_on_device(x, *positions, spec, batch_first, scale);
    }
    if (detail::is_continuous(*positions)) {
      checked = positions->to(at::kCPU, at::kDouble).contiguous();
      detail::check_continuous_range(checked);
    } else {
      checked = detail::host_read({}, *positions).whole;
    }
    if (checked.numel() > 0 && !detail::is_continuous(checked)) {
      const auto extremes = std::minmax_element(checked.data_ptr<int64_t>(),
                                                checked.data_ptr<int64_t>() + checked.numel());
      detail::check_positions_range(*extremes.first, *extremes.second, /*limit=*/-1);
    }
  } else {
    detail::check_offset_start(offset, length);
    if (detail::checks_on_device(x.device())) { // the positions made where x lies, rows there too
      return add_positional_encoding_on_device(
          x, at::arange(offset, offset + length, x.options().dtype(at::kLong)), spec, batch_first,
          scale);
    }
    checked = at::arange(offset, offset + length, at::TensorOptions().dtype(at::kLong));
  }
  if (x.numel() == 0) {
    return at::empty_like(x);
  }
  // float64 inputs get float64 rows; every other dtype adds float32 ones (in float32).
  const at::ScalarType rows_dtype = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor rows =
      detail::sinusoidal_rows(checked, detail::column_plan(spec), rows_dtype).to(x.device());
  return add_rows(x, broadcast_rows(rows, checked, batch_first), scale);
}

} // namespace composite

TORCH_LIBRARY_IMPL(posenc, CompositeExplicitAutograd, m) {
  m.impl("sinusoidal_table", TORCH_FN(composite::sinusoidal_table));
  m.impl("sinusoidal_columns", TORCH_FN(composite::sinusoidal_columns));
  m.impl("add_positional_encoding", TORCH_FN(composite::add_positional_encoding));
  using composite::add_loop;
  using composite::empty;
  m.impl("add_position_table", TORCH_FN((add_position_table_kernel<add_loop, empty>)));
  m.impl("add_position_table_", TORCH_FN((add_position_table_inplace_kernel<add_loop, empty>)));
  m.impl("add_position_table_out", TORCH_FN((add_position_table_out_kernel<add_loop, empty>)));
  m.impl("_add_position_table_backward", TORCH_FN(composite::add_position_table_backward));
}

} // namespace ops
} // namespace posenc
