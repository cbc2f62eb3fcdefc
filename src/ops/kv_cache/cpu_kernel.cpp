// CPU kernels of the KV-cache family: the thread bodies of kernels.h run over at::parallel_for's
// threads, every value checked on the host before anything is written (arguments.cpp). Compiled
// with -ffp-contract=off, as the rotary kernels, so a key rotated into the cache is the key
// apply_rotary_qk gives, bit for bit.

#include "ops/common/cpu_helpers.h"
#include "ops/kv_cache/backend_entries.h"
#include "ops/kv_cache/kernels.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstdint>

namespace posenc {
namespace ops {
namespace cpu {
namespace {

// Items per task: enough that a decoding step of one token runs on one thread.
constexpr int64_t kGrainItems = 4096;

// The executor the CPU hands run_kv_cache_grid: the items spread over at::parallel_for's
// threads (each item writes its own elements, so any split gives one result).
struct ParallelItems {
  template <typename Body>
  void operator()(const Body& body, int64_t work) const {
    at::parallel_for(0, work, kGrainItems, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        body(item);
      }
    });
  }
};

void run_kv_cache(const KvCacheCall& call, const at::Tensor& q_out, bool interleaved) {
  kernels::run_kv_cache_grid(call, q_out, interleaved, /*inverse=*/false, ParallelItems());
}

} // namespace
} // namespace cpu

TORCH_LIBRARY_IMPL(posenc, CPU, m) {
  m.impl("rotary_kv_cache_", TORCH_FN(rotary_kv_cache_inplace_kernel<cpu::run_kv_cache>));
  m.impl("rotary_kv_cache",
         TORCH_FN((rotary_kv_cache_kernel<cpu::run_kv_cache, cpu::empty_cpu>)));
  m.impl("rotary_paged_kv_cache_",
         TORCH_FN(rotary_paged_kv_cache_inplace_kernel<cpu::run_kv_cache>));
  m.impl("rotary_paged_kv_cache",
         TORCH_FN((rotary_paged_kv_cache_kernel<cpu::run_kv_cache, cpu::empty_cpu>)));
}

} // namespace ops
} // namespace posenc
