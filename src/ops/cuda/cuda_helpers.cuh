#pragma once

// Pieces shared by the CUDA kernels (device code and launch arithmetic).

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

namespace posenc {
namespace ops {
namespace cuda {

constexpr int kThreads = 256;

// N values of T moved as one aligned access (16 bytes for the vectorized paths).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T value[N];
};

// Elements per thread for 16-byte accesses of scalar_t, if the row width and every base pointer
// allow it; 1 otherwise.
template <typename scalar_t>
inline int vector_width(int64_t width, std::initializer_list<const void*> pointers) {
  constexpr int n = 16 / sizeof(scalar_t);
  if (width % n != 0) {
    return 1;
  }
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
      return 1;
    }
  }
  return n;
}

inline int blocks_for(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  // Enough blocks to fill the device several times; the kernels loop over the rest.
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(blocks, 1), int64_t{1} << 16));
}

/// A fresh tensor on the device of `options`.
inline at::Tensor empty_cuda(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return at::empty(sizes, options);
}

} // namespace cuda
} // namespace ops
} // namespace posenc
