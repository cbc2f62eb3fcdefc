#pragma once

// A tensor's sizes read without fixing them. Under torch.export and torch.compile a size may be a
// symbol; comparing and printing it (a check, a message) keeps it one, where reading it as an
// integer would fail or specialize it. LibTorch 1.13 has concrete sizes only.

#include <ATen/core/Tensor.h>
#include <c10/core/WrapDimMinimal.h>
#include <torch/version.h>

#include <cstdint>

namespace posenc {
namespace detail {

#if TORCH_VERSION_MAJOR >= 2
/// A size as the checks read it: concrete or symbolic.
using SymSize = c10::SymInt;
/// A tensor's sizes, each concrete or symbolic.
using SymShape = c10::SymIntArrayRef;
#else
using SymSize = int64_t;
using SymShape = c10::IntArrayRef;
#endif

/// A tensor's sizes, symbolic under torch.export and torch.compile (for checks, messages, views).
inline SymShape shape_of(const at::Tensor& tensor) {
#if TORCH_VERSION_MAJOR >= 2
  return tensor.sym_sizes();
#else
  return tensor.sizes();
#endif
}

/// A size of a tensor (`dim` may count from the end), symbolic under torch.export and
/// torch.compile: a call compares and prints it without fixing it.
inline SymSize size_of(const at::Tensor& tensor, int64_t dim) {
  return shape_of(tensor)[c10::maybe_wrap_dim(dim, tensor.dim())];
}

} // namespace detail
} // namespace posenc
