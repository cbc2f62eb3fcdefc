// CUDA kernels of the rotary family: the thread bodies of ../kernels (the ones the tests run on
// the CPU through an emulated grid) launched on the current stream. Arguments are checked on the
// host by the shared prepare_* functions (arguments.h), without reading device data;
// positions are checked where the threads read them.

#include "ops/common/backend_entries.h"
#include "ops/common/cuda_helpers.cuh"
#include "ops/rotary/backend_entries.h"
#include "ops/rotary/kernels.h"

#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace posenc {
namespace ops {
namespace cuda {
namespace {

void run_rotary(const at::Tensor& x, at::Tensor& out, const RotaryCall& call, bool interleaved,
                bool inverse) {
  const c10::cuda::CUDAGuard guard(x.device());
  kernels::run_rotary_grid(x, out, call, interleaved, inverse, Launch());
}

void run_rotary_qk(const RotaryOperand& q, const RotaryOperand& k, const RotaryQkCall& call,
                   bool interleaved, bool inverse) {
  const c10::cuda::CUDAGuard guard(q.in.device());
  kernels::run_rotary_qk_grid(q, k, call, interleaved, inverse, Launch());
}

} // namespace
} // namespace cuda

TORCH_LIBRARY_IMPL(posenc, CUDA, m) {
  m.impl("apply_rotary", TORCH_FN((apply_rotary_kernel<cuda::run_rotary, cuda::empty_cuda>)));
  m.impl("apply_rotary_",
         TORCH_FN((apply_rotary_inplace_kernel<cuda::run_rotary, cuda::empty_cuda>)));
  m.impl("apply_rotary_qk",
         TORCH_FN((apply_rotary_qk_kernel<cuda::run_rotary_qk, cuda::empty_cuda>)));
  m.impl("apply_rotary_qk_",
         TORCH_FN((apply_rotary_qk_inplace_kernel<cuda::run_rotary_qk, cuda::empty_cuda>)));
}

} // namespace ops
} // namespace posenc
