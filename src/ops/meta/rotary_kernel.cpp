// Meta kernels of the rotary family (see meta_checks.h).

#include "ops/meta/meta_checks.h"

#include <ATen/ops/empty_like.h>
#include <torch/library.h>

namespace posenc {
namespace ops {
namespace meta {
namespace {

void check_rotary(const char* who, const at::Tensor& x, const at::Tensor& cos,
                  const at::Tensor& sin, OptionalTensor positions, OptionalTensor inv_freq) {
  check_input(who, x, 4);
  TORCH_CHECK(cos.dim() == 2 && sin.dim() == 2, who, ": cos and sin must be [max_len, R/2] tables");
  TORCH_CHECK(cos.device() == sin.device(), who,
              ": cos and sin must share dtype and device, but cos is on ", cos.device(),
              " and sin on ", sin.device());
  detail::check_input_device(who, x, cos.device(), "the cos/sin caches");
  check_positions(who, positions, x);
  check_definition_device(who, inv_freq, "inv_freq", x.device());
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t,
                        OptionalTensor positions, bool, bool, bool, OptionalTensor inv_freq,
                        double) {
  check_rotary(detail::caller_or("posenc::apply_rotary"), x, cos, sin, positions, inv_freq);
  return at::empty_like(x);
}

void apply_rotary_(at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t,
                   OptionalTensor positions, bool, bool, bool, OptionalTensor inv_freq, double) {
  check_rotary(detail::caller_or("posenc::apply_rotary_"), x, cos, sin, positions, inv_freq);
}

} // namespace
} // namespace meta

TORCH_LIBRARY_IMPL(posenc, Meta, m) {
  m.impl("apply_rotary", TORCH_FN(meta::apply_rotary));
  m.impl("apply_rotary_", TORCH_FN(meta::apply_rotary_));
}

} // namespace ops
} // namespace posenc
