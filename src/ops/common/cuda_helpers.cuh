#pragma once

// The CUDA launcher shared by posenc's kernels: every kernel is a thread body from ../kernels
// (plain C++ run by the tests' emulated grid too) executed by `grid_stride_kernel`, whose threads
// do exactly what kernels::run_thread says, on the grid kernels::launch_geometry gives.

#include "ops/common/launch.h"

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>

#include <cstdint>

namespace posenc {
namespace ops {
namespace cuda {

/// The one `__global__` function: thread (blockIdx.x, threadIdx.x) of `geometry` runs its items
/// of `body` (kernels::run_thread).
template <typename Body>
__global__ void grid_stride_kernel(Body body, int64_t work, kernels::LaunchGeometry geometry) {
  kernels::run_thread(body, work, blockIdx.x, threadIdx.x, geometry);
}

/// Runs `body` over `work` items on the current stream of the current device: the executor the
/// family headers' run_*_grid functions take.
struct Launch {
  template <typename Body>
  void operator()(const Body& body, int64_t work) const {
    if (work == 0) {
      return;
    }
    const kernels::LaunchGeometry geometry = kernels::launch_geometry(work);
    grid_stride_kernel<<<static_cast<unsigned int>(geometry.blocks),
                         static_cast<unsigned int>(geometry.threads), 0,
                         at::cuda::getCurrentCUDAStream()>>>(body, work, geometry);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
};

/// A fresh tensor on the device of `options`.
inline at::Tensor empty_cuda(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return at::empty(sizes, options);
}

} // namespace cuda
} // namespace ops
} // namespace posenc
