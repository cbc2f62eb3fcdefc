// The rotary family: rotating queries and keys by the angles of their positions. Schemas and C++
// entry points; kernels per backend in */rotary_kernel.*.

#include "ops/dispatch.h"

#include <posenc/ops.h>

#include <torch/library.h>

namespace posenc {

TORCH_LIBRARY_FRAGMENT(posenc, m) {
  m.def(
      "apply_rotary(Tensor x, Tensor cos, Tensor sin, int offset=0, Tensor? positions=None, "
      "bool interleaved=False, bool heads_first=False, bool inverse=False, Tensor? inv_freq=None, "
      "float attention_factor=1.0) -> Tensor");
  m.def(
      "apply_rotary_(Tensor(a!) x, Tensor cos, Tensor sin, int offset=0, Tensor? positions=None, "
      "bool interleaved=False, bool heads_first=False, bool inverse=False, Tensor? inv_freq=None, "
      "float attention_factor=1.0) -> ()");
}

namespace ops {

using RotarySignature = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                                   OptionalTensor, bool, bool, bool, OptionalTensor, double);
using RotaryInplaceSignature = void(at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                                    OptionalTensor, bool, bool, bool, OptionalTensor, double);

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                        int64_t offset, OptionalTensor positions, bool interleaved,
                        bool heads_first, bool inverse, OptionalTensor inv_freq,
                        double attention_factor) {
  static const auto op = typed_op<RotarySignature>("posenc::apply_rotary");
  return op.call(x, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq,
                 attention_factor);
}

at::Tensor& apply_rotary_(at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                          int64_t offset, OptionalTensor positions, bool interleaved,
                          bool heads_first, bool inverse, OptionalTensor inv_freq,
                          double attention_factor) {
  static const auto op = typed_op<RotaryInplaceSignature>("posenc::apply_rotary_");
  op.call(x, cos, sin, offset, positions, interleaved, heads_first, inverse, inv_freq,
          attention_factor);
  return x;
}

} // namespace ops
} // namespace posenc
