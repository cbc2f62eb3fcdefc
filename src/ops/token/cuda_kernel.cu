// CUDA kernels of the token-embedding family: the thread body of ../kernels (the one the tests run
// on the CPU through an emulated grid) launched on the current stream. Arguments are checked on
// the host by the shared prepare_* functions (arguments.h), without reading device data;
// token ids and positions are checked where the threads read them.
//
// Dropout draws as the CPU kernel draws (kernels::DropoutDraws), keyed by one 64-bit number per
// call made on the device from the default CUDA generator's Philox state (seed and offset, which
// a CUDA graph replays with a fresh offset): no host synchronisation, capturable.

#include "ops/common/backend_entries.h"
#include "ops/common/cuda_helpers.cuh"
#include "ops/token/backend_entries.h"
#include "ops/token/kernels.h"

#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <ATen/cuda/PhiloxUtils.cuh>

#include <mutex>

namespace posenc {
namespace ops {
namespace cuda {
namespace {

// The call's dropout key: the Philox seed and offset mixed into 64 bits (on the device).
__global__ void dropout_key_kernel(at::PhiloxCudaState philox, uint64_t* key) {
  const auto seeds = at::cuda::philox::unpack(philox);
  const uint64_t seed = std::get<0>(seeds);
  const uint64_t offset = std::get<1>(seeds);
  *key = seed ^ (offset * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull);
}

void run_token(const at::Tensor& tokens, const at::Tensor& weight, at::Tensor& out,
               at::Tensor& mask, const TableCall& call, double dropout, bool drop) {
  const c10::cuda::CUDAGuard guard(weight.device());
  if (!drop) { // no draws: no key (the threads read it only with dropout), no fill to launch
    kernels::run_token_grid(tokens, weight, out, mask, call, dropout, drop, nullptr, Launch());
    return;
  }
  at::PhiloxCudaState philox;
  {
    auto* generator = at::get_generator_or_default<at::CUDAGeneratorImpl>(
        c10::nullopt, at::cuda::detail::getDefaultCUDAGenerator());
    std::lock_guard<std::mutex> lock(generator->mutex_);
    philox = generator->philox_cuda_state(4);
  }
  // written by dropout_key_kernel on the stream, before the grid reads it
  at::Tensor key = at::empty({1}, weight.options().dtype(at::kLong));
  dropout_key_kernel<<<1, 1, 0, at::cuda::getCurrentCUDAStream()>>>(
      philox, reinterpret_cast<uint64_t*>(key.data_ptr<int64_t>()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  kernels::run_token_grid(tokens, weight, out, mask, call, dropout, drop,
                          reinterpret_cast<const uint64_t*>(key.data_ptr<int64_t>()), Launch());
}

} // namespace
} // namespace cuda

TORCH_LIBRARY_IMPL(posenc, CUDA, m) {
  m.impl("token_and_position_embedding",
         TORCH_FN((token_and_position_embedding_kernel<cuda::run_token, cuda::empty_cuda>)));
}

} // namespace ops
} // namespace posenc
