// CUDA kernels of the KV-cache family: the thread bodies of kernels.h (the ones the tests run on
// the CPU through an emulated grid) launched on the current stream. The host reads no device
// value: the threads check the slots, sequence lengths and positions they read. A paged call
// first runs the distinct-slots check, so that a call whose slots repeat or lie outside the cache
// stops (device-side assertion) before its write is launched.

#include "ops/common/cuda_helpers.cuh"
#include "ops/kv_cache/backend_entries.h"
#include "ops/kv_cache/kernels.h"

#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace posenc {
namespace ops {
namespace cuda {
namespace {

void run_kv_cache(const KvCacheCall& call, const at::Tensor& q_out, bool interleaved) {
  const c10::cuda::CUDAGuard guard(call.q.device());
  if (call.kind == CacheKind::kPaged && call.index.numel() > 0) {
    kernels::run_distinct_slots_check(call, Launch());
  }
  kernels::run_kv_cache_grid(call, q_out, interleaved, /*inverse=*/false, Launch());
}

} // namespace
} // namespace cuda

TORCH_LIBRARY_IMPL(posenc, CUDA, m) {
  m.impl("rotary_kv_cache_", TORCH_FN(rotary_kv_cache_inplace_kernel<cuda::run_kv_cache>));
  m.impl("rotary_kv_cache",
         TORCH_FN((rotary_kv_cache_kernel<cuda::run_kv_cache, cuda::empty_cuda>)));
  m.impl("rotary_paged_kv_cache_",
         TORCH_FN(rotary_paged_kv_cache_inplace_kernel<cuda::run_kv_cache>));
  m.impl("rotary_paged_kv_cache",
         TORCH_FN((rotary_paged_kv_cache_kernel<cuda::run_kv_cache, cuda::empty_cuda>)));
}

} // namespace ops
} // namespace posenc
