#pragma once

// Pieces shared by the autograd kernels.

#include "ops/common/arguments.h"

#include <ATen/ops/mul.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/csrc/autograd/variable.h>

namespace posenc {
namespace ops {

/// d(x * scale + rows)/dx = scale; the output has the dtype of x, and so has its gradient.
inline at::Tensor scaled(const at::Tensor& grad, double scale) {
  return scale == 1.0 || !grad.defined() ? grad : at::mul(grad, scale);
}

/// Why a table extended by `columns` cannot take a gradient.
constexpr const char* kExtendedTable =
    "a table extended past its end by `columns` gets no gradient; pass table.detach(), or a table "
    "that holds every position";

/// Checks that a table that gets no gradient from `op` does not ask for one.
inline void check_fixed_table(const char* op, const at::Tensor& table, const char* why) {
  TORCH_CHECK(!table.requires_grad(), op, ": ", why);
}

/// Raises, before anything is written, where autograd forbids writing `x` in place (a leaf that
/// requires grad, a view of one, a view that may not be modified), as ATen's in-place operators
/// do; `requires_grad`: some argument of the call requires grad.
inline void check_inplace_allowed(const at::Tensor& x, bool requires_grad) {
  torch::autograd::check_inplace(x, requires_grad);
}

/// The ADInplaceOrView kernel of a mutating operator: runs it below this key, then bumps the
/// version of the mutated tensor, so that autograd notices later uses of stale values (as for
/// ATen's in-place operators). An inference tensor cannot be bumped outside InferenceMode: that is
/// checked before anything is written.
template <typename F>
void mutate_and_bump(at::Tensor& mutated, F&& run) {
  TORCH_CHECK(!mutated.is_inference() || c10::InferenceMode::is_enabled(),
              "Inplace update to inference tensor outside InferenceMode is not allowed. You can "
              "make a clone to get a normal tensor before doing inplace update.");
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    run();
  }
  torch::autograd::impl::bump_version(mutated);
}

} // namespace ops
} // namespace posenc
