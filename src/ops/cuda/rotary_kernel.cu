// CUDA kernels of the rotary family: the same operations as ../cpu, one pass over the data,
// float16/bfloat16 converted in registers. Arguments are checked on the host by the shared
// prepare_* functions (../op_arguments.h) before anything is launched.

#include "ops/backend_entries.h"
#include "ops/cuda/cuda_helpers.cuh"
#include "ops/kernel_helpers.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace posenc {
namespace ops {
namespace cuda {
namespace {

// One thread per rotated pair; a second grid-stride pass copies the channels past the rotated
// ones (out-of-place only).
template <typename scalar_t, typename table_t>
__global__ void rotary_kernel(const scalar_t* x, scalar_t* out, const table_t* cos,
                              const table_t* sin, int64_t rows, int64_t head_dim, int64_t half,
                              RotaryRows where, bool interleaved, bool inverse, bool copy_rest) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const int64_t pairs = rows * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; index < pairs;
       index += stride) {
    const int64_t row = index / half;
    const int64_t k = index - row * half;
    const int64_t ia = row * head_dim + (interleaved ? 2 * k : k);
    const int64_t ib = row * head_dim + (interleaved ? 2 * k + 1 : k + half);
    const int64_t p = where.position(row);
    const acc_t a = static_cast<acc_t>(x[ia]);
    const acc_t b = static_cast<acc_t>(x[ib]);
    if (p < 0) { // padding: not rotated
      out[ia] = x[ia];
      out[ib] = x[ib];
      continue;
    }
    const acc_t c = static_cast<acc_t>(cos[p * half + k]);
    const acc_t s =
        inverse ? -static_cast<acc_t>(sin[p * half + k]) : static_cast<acc_t>(sin[p * half + k]);
    out[ia] = static_cast<scalar_t>(a * c - b * s);
    out[ib] = static_cast<scalar_t>(a * s + b * c);
  }
  if (copy_rest) {
    const int64_t rest = head_dim - 2 * half;
    for (int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
         index < rows * rest; index += stride) {
      const int64_t row = index / rest;
      const int64_t c = 2 * half + (index - row * rest);
      out[row * head_dim + c] = x[row * head_dim + c];
    }
  }
}

void run_rotary(const at::Tensor& x, at::Tensor& out, const RotaryCall& call, bool interleaved,
                bool inverse) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t rows = call.batch * call.length * call.heads;
  if (rows == 0) {
    return;
  }
  const RotaryRows where = RotaryRows::of(call);
  const bool copy_rest = !x.is_same(out) && 2 * call.half < call.head_dim;
  const at::Tensor cos = call.kernel_cos();
  const at::Tensor sin = call.kernel_sin();
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "posenc_apply_rotary_cuda", [&] {
        with_table_data(cos, [&](const auto* c) {
          using table_t = std::remove_const_t<std::remove_pointer_t<decltype(c)>>;
          rotary_kernel<scalar_t, table_t><<<blocks_for(rows * call.half), kThreads, 0, stream>>>(
              x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), c, sin.data_ptr<table_t>(), rows,
              call.head_dim, call.half, where, interleaved, inverse, copy_rest);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        });
      });
}

} // namespace
} // namespace cuda

TORCH_LIBRARY_IMPL(posenc, CUDA, m) {
  m.impl("apply_rotary", TORCH_FN((apply_rotary_kernel<cuda::run_rotary, cuda::empty_cuda>)));
  m.impl("apply_rotary_",
         TORCH_FN((apply_rotary_inplace_kernel<cuda::run_rotary, cuda::empty_cuda>)));
}

} // namespace ops
} // namespace posenc
