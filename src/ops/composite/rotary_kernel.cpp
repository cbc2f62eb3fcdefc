// Composite kernels of the rotary family (ATen operations only), registered as
// CompositeExplicitAutograd: autograd comes from ../autograd.

#include "ops/backend_entries.h"
#include "ops/composite/kernels.h"

#include "detail/rotary.h"

#include <ATen/ops/index_select.h>
#include <torch/library.h>

#include <utility>

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

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                        int64_t offset, OptionalTensor positions, bool interleaved,
                        bool heads_first, bool inverse, OptionalTensor inv_freq,
                        double attention_factor) {
  return apply_rotary_kernel<rotary_loop, empty>(x, cos, sin, offset, positions, interleaved,
                                                 heads_first, inverse, inv_freq, attention_factor);
}

} // namespace composite

TORCH_LIBRARY_IMPL(posenc, CompositeExplicitAutograd, m) {
  using composite::empty;
  using composite::rotary_loop;
  m.impl("apply_rotary", TORCH_FN((apply_rotary_kernel<rotary_loop, empty>)));
  m.impl("apply_rotary_", TORCH_FN((apply_rotary_inplace_kernel<rotary_loop, empty>)));
}

} // namespace ops
} // namespace posenc
