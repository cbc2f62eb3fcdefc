// Kernels for every backend (CPU, CUDA, ...) built from ATen operations, registered as
// CompositeExplicitAutograd: autograd comes from the kernels in ../autograd. The CPU and CUDA
// kernels replace them where it pays (see ../cpu and ../cuda) and call them for the rest.

#include "ops/composite/kernels.h"

#include "detail/checks.h"
#include "detail/positional_encoding.h"
#include "detail/rotary.h"
#include "detail/sinusoidal.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/bernoulli.h>
#include <ATen/ops/embedding.h>
#include <ATen/ops/embedding_dense_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

namespace posenc {
namespace ops {
namespace composite {

at::Tensor selected_rows(const TableCall& call, int64_t offset, bool batch_first) {
  const at::Tensor rows = call.rows();
  return call.positions.defined() ? detail::rows_for_positions(rows, call.positions, batch_first)
                                  : detail::rows_for_offset(rows, offset, call.length, batch_first);
}

at::Tensor add_position_table(const at::Tensor& x,
                              const at::Tensor& table,
                              int64_t offset,
                              bool batch_first,
                              OptionalTensor positions,
                              double scale) {
  const TableCall call = prepare_table_call(
      "posenc::add_position_table", x, table, offset, positions, batch_first, scale);
  return detail::add_rows(x, selected_rows(call, offset, batch_first), scale);
}

void add_position_table_(at::Tensor& x,
                         const at::Tensor& table,
                         int64_t offset,
                         bool batch_first,
                         OptionalTensor positions,
                         double scale) {
  const TableCall call = prepare_table_call(
      "posenc::add_position_table_", x, table, offset, positions, batch_first, scale);
  at::assert_no_internal_overlap(x);
  x.copy_(detail::add_rows(x, selected_rows(call, offset, batch_first), scale));
}

void add_position_table_out(const at::Tensor& x,
                            const at::Tensor& table,
                            int64_t offset,
                            bool batch_first,
                            OptionalTensor positions,
                            double scale,
                            at::Tensor& out) {
  constexpr const char* who = "posenc::add_position_table_out";
  const TableCall call = prepare_table_call(who, x, table, offset, positions, batch_first, scale);
  prepare_out(who, out, x);
  out.copy_(detail::add_rows(x, selected_rows(call, offset, batch_first), scale));
}

at::Tensor add_position_table_backward(const at::Tensor& grad,
                                       const at::Tensor& table,
                                       int64_t offset,
                                       bool batch_first,
                                       OptionalTensor positions) {
  const TableCall call = prepare_table_call(
      "posenc::add_position_table_backward", grad, table, offset, positions, batch_first, 1.0);
  at::Tensor grad_table = at::zeros_like(table, at::MemoryFormat::Contiguous);
  at::Tensor grad_rows = grad_table.dim() == 3 ? grad_table.select(0, 0) : grad_table;
  const int64_t batch_dim = batch_first ? 0 : 1;
  if (!call.positions.defined()) {
    // Summed over the batch in the table's dtype (float32 for a bfloat16 gradient, say).
    grad_rows.narrow(0, offset, call.length)
        .copy_(at::sum(grad, {batch_dim}, /*keepdim=*/false, table.scalar_type()));
    return grad_table;
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

namespace {
// cos/sin rows for the call, shaped to broadcast against x; padding (-1) is not rotated.
std::pair<at::Tensor, at::Tensor> rotary_rows_for(const RotaryCall& call,
                                                  const at::Tensor& cos,
                                                  const at::Tensor& sin,
                                                  int64_t offset,
                                                  bool heads_first) {
  if (call.positions.defined()) {
    const at::Tensor flat = call.positions.reshape({-1});
    const at::Tensor padding = flat.lt(0).unsqueeze(1);
    const int64_t batch = call.positions.dim() == 1 ? 1 : call.batch;
    return {detail::rotary_broadcast(cos.index_select(0, flat.clamp_min(0)).masked_fill(padding, 1),
                                     batch,
                                     call.length,
                                     heads_first),
            detail::rotary_broadcast(sin.index_select(0, flat.clamp_min(0)).masked_fill(padding, 0),
                                     batch,
                                     call.length,
                                     heads_first)};
  }
  return {
      detail::rotary_broadcast(cos.narrow(0, offset, call.length), 1, call.length, heads_first),
      detail::rotary_broadcast(sin.narrow(0, offset, call.length), 1, call.length, heads_first)};
}
} // namespace

at::Tensor apply_rotary(const at::Tensor& x,
                        const at::Tensor& cos,
                        const at::Tensor& sin,
                        int64_t offset,
                        OptionalTensor positions,
                        bool interleaved,
                        bool heads_first,
                        bool inverse) {
  const RotaryCall call =
      prepare_rotary_call("posenc::apply_rotary", x, cos, sin, offset, positions, heads_first);
  const auto rows = rotary_rows_for(call, cos, sin, offset, heads_first);
  return detail::rotate(x, rows.first, rows.second, interleaved, inverse);
}

void apply_rotary_(at::Tensor& x,
                   const at::Tensor& cos,
                   const at::Tensor& sin,
                   int64_t offset,
                   OptionalTensor positions,
                   bool interleaved,
                   bool heads_first,
                   bool inverse) {
  const RotaryCall call =
      prepare_rotary_call("posenc::apply_rotary_", x, cos, sin, offset, positions, heads_first);
  at::assert_no_internal_overlap(x);
  const auto rows = rotary_rows_for(call, cos, sin, offset, heads_first);
  x.copy_(detail::rotate(x, rows.first, rows.second, interleaved, inverse));
}

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding(const at::Tensor& tokens,
                                                                const at::Tensor& weight,
                                                                const at::Tensor& table,
                                                                int64_t offset,
                                                                bool batch_first,
                                                                OptionalTensor positions,
                                                                double scale,
                                                                int64_t /*padding_idx*/,
                                                                double dropout,
                                                                bool train) {
  const TableCall call = prepare_token_call("posenc::token_and_position_embedding",
                                            tokens,
                                            weight,
                                            table,
                                            offset,
                                            positions,
                                            batch_first,
                                            scale,
                                            dropout);
  const at::Tensor embedded = at::embedding(weight, tokens);
  at::Tensor out = detail::add_rows(embedded, selected_rows(call, offset, batch_first), scale);
  at::Tensor mask = at::empty({0}, out.options().dtype(at::kBool));
  if (train && dropout > 0.0) {
    // Keep each element with probability 1 - p and scale the kept ones by 1 / (1 - p).
    mask = at::empty(out.sizes(), out.options().dtype(at::kFloat))
               .bernoulli_(1.0 - dropout)
               .to(at::kBool);
    out = dropout >= 1.0 ? at::zeros_like(out)
                         : out.masked_fill(mask.logical_not(), 0)
                               .mul(1.0 / (1.0 - dropout))
                               .to(out.scalar_type());
  }
  return {out, mask};
}

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding_backward(
    const at::Tensor& grad,
    const at::Tensor& mask,
    const at::Tensor& tokens,
    const at::Tensor& weight,
    const at::Tensor& table,
    int64_t offset,
    bool batch_first,
    OptionalTensor positions,
    double scale,
    int64_t padding_idx,
    double dropout,
    std::array<bool, 2> output_mask) {
  at::Tensor g = grad;
  if (mask.numel() > 0) {
    g = dropout >= 1.0 ? at::zeros_like(grad)
                       : grad.masked_fill(mask.logical_not(), 0)
                             .mul(1.0 / (1.0 - dropout))
                             .to(grad.scalar_type());
  }
  at::Tensor grad_weight;
  at::Tensor grad_table;
  if (output_mask[0]) {
    grad_weight = at::embedding_dense_backward(g.mul(scale).to(weight.scalar_type()),
                                               tokens,
                                               weight.size(0),
                                               padding_idx,
                                               /*scale_grad_by_freq=*/false);
  }
  if (output_mask[1]) {
    grad_table = add_position_table_backward(g, table, offset, batch_first, positions);
  }
  return {grad_weight, grad_table};
}

} // namespace composite

namespace {

at::Tensor sinusoidal_table_kernel(int64_t max_len,
                                   int64_t d_model,
                                   double base,
                                   int64_t offset,
                                   c10::string_view channels,
                                   c10::string_view frequencies,
                                   c10::optional<at::ScalarType> dtype,
                                   c10::optional<at::Device> device) {
  constexpr const char* who = "posenc::sinusoidal_table";
  const detail::SinusoidSpec spec{d_model,
                                  base,
                                  detail::parse_channel_layout(who, channels),
                                  detail::parse_frequency_spacing(who, frequencies)};
  const at::ScalarType out_dtype = dtype.value_or(at::kFloat);
  const at::Device out_device = device.value_or(at::Device(at::kCPU));
  detail::check_table_request(who, max_len, d_model, base, offset, out_dtype);
  if (out_device.is_meta()) {
    // Fake tensors and shape propagation: the same checks, then only an allocation.
    return at::empty({max_len, d_model}, at::TensorOptions().dtype(out_dtype).device(out_device));
  }
  return detail::sinusoidal_table(max_len, offset, spec, out_dtype, out_device);
}

at::Tensor add_positional_encoding_kernel(const at::Tensor& x,
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
  const detail::SinusoidSpec spec{std::max<int64_t>(x.size(2), 1),
                                  base,
                                  detail::parse_channel_layout(who, channels),
                                  detail::parse_frequency_spacing(who, frequencies)};
  // The same rules as a table of L rows starting at `offset` (any position is allowed).
  detail::check_table_request(who,
                              std::max<int64_t>(length, 1),
                              spec.d_model,
                              base,
                              std::max<int64_t>(offset, 0),
                              at::kDouble);
  at::Tensor checked;
  if (positions.has_value() && positions->defined()) {
    TORCH_CHECK(offset == 0,
                who,
                ": pass either an offset or explicit positions, not both (got offset = ",
                offset,
                ")");
    checked = detail::checked_sequence_positions(who, *positions, x, batch_first, /*limit=*/-1, {})
                  .values;
  } else {
    TORCH_CHECK(
        offset >= 0, who, ": offset must be >= 0, but got ", offset, "; positions start at 0");
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

} // namespace

TORCH_LIBRARY_IMPL(posenc, CompositeExplicitAutograd, m) {
  m.impl("sinusoidal_table", TORCH_FN(sinusoidal_table_kernel));
  m.impl("add_positional_encoding", TORCH_FN(add_positional_encoding_kernel));
  m.impl("add_position_table", TORCH_FN(composite::add_position_table));
  m.impl("add_position_table_", TORCH_FN(composite::add_position_table_));
  m.impl("add_position_table_out", TORCH_FN(composite::add_position_table_out));
  m.impl("add_position_table_backward", TORCH_FN(composite::add_position_table_backward));
  m.impl("apply_rotary", TORCH_FN(composite::apply_rotary));
  m.impl("apply_rotary_", TORCH_FN(composite::apply_rotary_));
  m.impl("token_and_position_embedding", TORCH_FN(composite::token_and_position_embedding));
  m.impl("token_and_position_embedding_backward",
         TORCH_FN(composite::token_and_position_embedding_backward));
}

} // namespace ops
} // namespace posenc
