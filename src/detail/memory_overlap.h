#pragma once

// Whether two tensors share memory, decided exactly where PyTorch's at::get_overlap_status answers
// "too hard" (two strided views of one buffer, e.g. the q and k slices of a fused qkv projection):
// the bytes of an element of `a` and of `b` coincide for some indices iff a bounded integer
// equation in those indices has a solution, which a depth-first search over the dimensions (the
// largest stride first, each bounded by what the smaller strides can still reach) finds or rules
// out. A search that would take more than a fixed number of steps answers kUnknown, which callers
// treat as sharing: what cannot be proven apart is refused.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace posenc {
namespace detail {

enum class Sharing {
  kNone,    ///< no byte of `a` is a byte of `b`
  kSome,    ///< at least one byte is in both
  kUnknown, ///< not decided within the search's budget (treat as kSome)
};

/// A strided view of a buffer, in bytes: element (i_0, ..., i_n) starts at
/// `offset + sum(i_d * strides[d])` and spans `item_size` bytes. (Sizes >= 1: a view with a size 0
/// holds nothing, which the caller decides; tensors_share does.)
struct ByteLayout {
  int64_t offset = 0;
  int64_t item_size = 1;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides; ///< >= 0
};

/// Whether two byte layouts of the same buffer share a byte (exact, within `budget` search steps).
Sharing layouts_share(const ByteLayout& a, const ByteLayout& b, int64_t budget = 100000);

/// Whether `a` and `b` share memory: at::get_overlap_status where it decides, layouts_share where
/// it answers "too hard". Undefined or empty tensors share nothing.
Sharing tensors_share(const at::Tensor& a, const at::Tensor& b);

} // namespace detail
} // namespace posenc
