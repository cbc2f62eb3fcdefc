#pragma once

// Pieces shared by the autograd kernels.

#include "ops/op_arguments.h"

#include <ATen/ops/mul.h>
#include <c10/util/Exception.h>
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

/// The ADInplaceOrView kernel of a mutating operator: runs it below this key, then bumps the
/// version of the mutated tensor, so that autograd notices later uses of stale values (as for
/// ATen's in-place operators).
template <typename F>
void mutate_and_bump(at::Tensor& mutated, F&& run) {
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    run();
  }
  torch::autograd::impl::bump_version(mutated);
}

} // namespace ops
} // namespace posenc
