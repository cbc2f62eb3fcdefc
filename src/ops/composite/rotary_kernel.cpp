// Composite kernels of the rotary family (ATen operations only), registered as
// CompositeExplicitAutograd: autograd comes from ../autograd.

#include "ops/backend_entries.h"
#include "ops/composite/kernels.h"

#include "detail/rotary.h"

#include <ATen/ops/gather.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <torch/library.h>

#include <utility>
#include <vector>

namespace posenc {
namespace ops {
namespace composite {
namespace {

// cos/sin rows of a checked call, shaped to broadcast against x; padding (-1) is not rotated.
std::pair<at::Tensor, at::Tensor> rotary_rows_for(const RotaryCall& call) {
  if (!call.positions.defined()) {
    const auto shaped = [&](const at::Tensor& table) {
      return detail::rotary_broadcast(table.narrow(0, call.offset, call.length), 1, call.length,
                                      call.heads_first);
    };
    return {shaped(call.cos), shaped(call.sin)};
  }
  const at::Tensor flat = call.positions.reshape({-1});
  const at::Tensor padding = flat.lt(0).unsqueeze(1);
  const int64_t batch = call.positions.dim() == 1 ? 1 : call.batch;
  const auto shaped = [&](const at::Tensor& table, double fill) {
    return detail::rotary_broadcast(
        at::index_select(table, 0, flat.clamp_min(0)).masked_fill(padding, fill), batch,
        call.length, call.heads_first);
  };
  return {shaped(call.cos, 1.0), shaped(call.sin, 0.0)};
}

} // namespace

void rotary_loop(const at::Tensor& x, at::Tensor& out, const RotaryCall& call, bool interleaved,
                 bool inverse) {
  const auto rows = rotary_rows_for(call);
  out.copy_(detail::rotate(x, rows.first, rows.second, interleaved, inverse));
}

void rotary_qk_loop(const RotaryOperand& q, const RotaryOperand& k, const RotaryQkCall& call,
                    bool interleaved, bool inverse) {
  const auto rows = rotary_rows_for(call); // the heads broadcast: one set of rows for both
  q.out.copy_(detail::rotate(q.in, rows.first, rows.second, interleaved, inverse));
  k.out.copy_(detail::rotate(k.in, rows.first, rows.second, interleaved, inverse));
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                        int64_t offset, OptionalTensor positions, bool interleaved,
                        bool heads_first, bool inverse, OptionalTensor inv_freq,
                        double attention_factor) {
  return apply_rotary_kernel<rotary_loop, empty>(x, cos, sin, offset, positions, interleaved,
                                                 heads_first, inverse, inv_freq, attention_factor);
}

std::tuple<at::Tensor, at::Tensor> apply_rotary_qk(const at::Tensor& q, const at::Tensor& k,
                                                   const at::Tensor& cos, const at::Tensor& sin,
                                                   int64_t offset, OptionalTensor positions,
                                                   bool interleaved, bool heads_first,
                                                   bool inverse, OptionalTensor inv_freq,
                                                   double attention_factor) {
  return apply_rotary_qk_kernel<rotary_qk_loop, empty>(q, k, cos, sin, offset, positions,
                                                       interleaved, heads_first, inverse,
                                                       inv_freq, attention_factor);
}

std::tuple<at::Tensor, at::Tensor> multimodal_rotary_tables(
    const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& positions,
    at::IntArrayRef mrope_section, bool interleaved, OptionalTensor inv_freq,
    double attention_factor) {
  const MultimodalTablesCall call =
      prepare_multimodal_tables_call("posenc::multimodal_rotary_tables", cos, sin, positions,
                                     mrope_section, interleaved, inv_freq, attention_factor);
  const int64_t half = cos.size(1);
  const int64_t tokens = call.positions.size(1);
  // [3, N, R/2]: the rows of each axis' positions, from the caches or computed (past them).
  std::vector<at::Tensor> cos_axes;
  std::vector<at::Tensor> sin_axes;
  for (int64_t a = 0; a < 3; ++a) {
    if (call.host_positions.defined()) {
      const auto rows =
          detail::rotary_rows(call.host_positions[a], call.frequencies, cos.scalar_type());
      cos_axes.push_back(rows.first.to(cos.device()));
      sin_axes.push_back(rows.second.to(cos.device()));
    } else {
      cos_axes.push_back(at::index_select(cos, 0, call.positions[a]));
      sin_axes.push_back(at::index_select(sin, 0, call.positions[a]));
    }
  }
  const at::Tensor axis = at::tensor(call.axes, at::TensorOptions().dtype(at::kLong))
                              .to(cos.device())
                              .view({1, 1, half})
                              .expand({1, tokens, half});
  const auto pick = [&](const std::vector<at::Tensor>& rows) {
    return at::stack(rows, 0).gather(0, axis).squeeze(0).view(call.shape);
  };
  return {pick(cos_axes), pick(sin_axes)};
}

} // namespace composite

TORCH_LIBRARY_IMPL(posenc, CompositeExplicitAutograd, m) {
  using composite::empty;
  using composite::rotary_loop;
  m.impl("apply_rotary", TORCH_FN((apply_rotary_kernel<rotary_loop, empty>)));
  m.impl("apply_rotary_", TORCH_FN((apply_rotary_inplace_kernel<rotary_loop, empty>)));
  m.impl("multimodal_rotary_tables", TORCH_FN(composite::multimodal_rotary_tables));
  using composite::rotary_qk_loop;
  m.impl("apply_rotary_qk", TORCH_FN((apply_rotary_qk_kernel<rotary_qk_loop, empty>)));
  m.impl("apply_rotary_qk_", TORCH_FN((apply_rotary_qk_inplace_kernel<rotary_qk_loop, empty>)));
}

} // namespace ops
} // namespace posenc
