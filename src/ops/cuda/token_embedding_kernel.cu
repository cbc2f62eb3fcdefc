// CUDA kernels of the token-embedding family: the same operations as ../cpu, one pass over the
// data, float16/bfloat16 converted in registers. Arguments are checked on the host by the shared
// prepare_* functions (../op_arguments.h) before anything is launched.
//
// Dropout draws from Philox (curand) seeded by the default CUDA generator, as ATen's fused dropout
// does: the mask depends only on the seed and the output's shape, not on the arguments' layout.

#include "ops/backend_entries.h"
#include "ops/cuda/cuda_helpers.cuh"
#include "ops/kernel_helpers.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/cuda/PhiloxUtils.cuh>

#include <curand_kernel.h>

#include <mutex>

namespace posenc {
namespace ops {
namespace cuda {
namespace {

// Each thread handles 4 consecutive elements of a row (the 4 uniforms of one curand_uniform4 call).
template <typename scalar_t, typename table_t>
__global__ void token_kernel(const int64_t* tokens, const scalar_t* weight, const table_t* table,
                             scalar_t* out, bool* mask, int64_t width, int64_t groups,
                             SequenceRows where, double scale, float keep,
                             at::PhiloxCudaState philox) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const acc_t s = static_cast<acc_t>(scale);
  const bool unit = scale == 1.0;
  const acc_t inverse_keep =
      keep > 0.0f ? static_cast<acc_t>(1.0 / static_cast<double>(keep)) : acc_t(0);
  const int64_t per_row = (width + 3) / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t group = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; group < groups;
       group += stride) {
    const int64_t row = group / per_row;
    const int64_t first = (group - row * per_row) * 4;
    const scalar_t* w = weight + tokens[row] * width;
    const int64_t p = where.position(row);
    float4 uniform = make_float4(0.f, 0.f, 0.f, 0.f);
    if (mask != nullptr) {
      const auto seeds = at::cuda::philox::unpack(philox);
      curandStatePhilox4_32_10_t state;
      curand_init(std::get<0>(seeds), group, std::get<1>(seeds), &state);
      uniform = curand_uniform4(&state);
    }
    const float draws[4] = {uniform.x, uniform.y, uniform.z, uniform.w};
    for (int k = 0; k < 4 && first + k < width; ++k) {
      const int64_t c = first + k;
      const acc_t t = p < 0 ? acc_t(0) : static_cast<acc_t>(table[p * width + c]);
      const acc_t v = static_cast<acc_t>(w[c]);
      acc_t value = unit ? v + t : t + s * v;
      if (mask != nullptr) {
        // curand_uniform4 draws from (0, 1]: keep when the draw is <= keep, probability `keep`.
        const bool kept = draws[k] <= keep;
        mask[row * width + c] = kept;
        value = kept ? value * inverse_keep : acc_t(0);
      }
      out[row * width + c] = static_cast<scalar_t>(value);
    }
  }
}

void run_token(const at::Tensor& tokens, const at::Tensor& weight, at::Tensor& out,
               at::Tensor& mask, const TableCall& call, double dropout, bool drop) {
  const c10::cuda::CUDAGuard guard(weight.device());
  const int64_t width = call.width;
  const int64_t groups = tokens.numel() * ((width + 3) / 4);
  if (groups == 0) {
    return;
  }
  at::PhiloxCudaState philox;
  if (drop) {
    auto* generator = at::get_generator_or_default<at::CUDAGeneratorImpl>(
        c10::nullopt, at::cuda::detail::getDefaultCUDAGenerator());
    std::lock_guard<std::mutex> lock(generator->mutex_);
    philox =
        generator->philox_cuda_state(4); // each thread draws 4 numbers from its own subsequence
  }
  const SequenceRows where = SequenceRows::of(call);
  const at::Tensor table = call.kernel_table();
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, weight.scalar_type(), "posenc_token_and_position_cuda", [&] {
        bool* mask_data = drop ? mask.data_ptr<bool>() : nullptr;
        const float keep = static_cast<float>(1.0 - dropout);
        with_table_data(table, [&](const auto* t) {
          using table_t = std::remove_const_t<std::remove_pointer_t<decltype(t)>>;
          token_kernel<scalar_t, table_t><<<blocks_for(groups), kThreads, 0, stream>>>(
              tokens.data_ptr<int64_t>(), weight.data_ptr<scalar_t>(), t, out.data_ptr<scalar_t>(),
              mask_data, width, groups, where, call.scale, keep, philox);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        });
      });
}

} // namespace
} // namespace cuda

TORCH_LIBRARY_IMPL(posenc, CUDA, m) {
  m.impl("token_and_position_embedding",
         TORCH_FN((token_and_position_embedding_kernel<cuda::run_token, cuda::empty_cuda>)));
}

} // namespace ops
} // namespace posenc
