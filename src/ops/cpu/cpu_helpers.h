#pragma once

// Pieces shared by the CPU kernels.

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>

namespace posenc {
namespace ops {
namespace cpu {

/// Rows per task: about 32k elements, like ATen's grain size.
inline int64_t grain_rows(int64_t width) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(width, 1));
}

/// A fresh CPU tensor, allocated without a trip through the dispatcher (a decoding step is ~1 us).
inline at::Tensor empty_cpu(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return at::detail::empty_cpu(sizes, options);
}

} // namespace cpu
} // namespace ops
} // namespace posenc
