#pragma once

// The KV-cache operators' kernels for a backend with hand-written loops (CPU, CUDA), written
// once: each checks its call (arguments.h) and runs the backend's loop over it.

#include "detail/checks.h"
#include "ops/common/backend_entries.h"
#include "ops/kv_cache/arguments.h"
#include "ops/rotary/backend_entries.h"

#include <ATen/core/Tensor.h>

namespace posenc {
namespace ops {

/// Rotates the queries of a checked call into `q_out` (its q, or a tensor of its layout), the
/// keys into their cache slots, and copies the values into theirs.
using KvCacheLoop = void (*)(const KvCacheCall& call, const at::Tensor& q_out, bool interleaved);

/// Runs `loop` over a checked call whose q (in place: q_out is q) may have strided channels: the
/// loops read q, k and v with contiguous channels (views of a fused projection are read where
/// they lie; other layouts are copied), and q is written back when it was copied.
template <KvCacheLoop loop>
void run_kv_cache_call(KvCacheCall& call, at::Tensor& q, const at::Tensor& q_out,
                       bool interleaved) {
  call.k = with_contiguous_channels(call.k);
  call.v = with_contiguous_channels(call.v);
  const bool in_place = q_out.is_same(q);
  at::Tensor q_view = call.q; // q, as the loops index it (a paged call's [1, T, H, D])
  call.q = with_contiguous_channels(q_view);
  if (!in_place) {
    loop(call, q_out, interleaved);
    return;
  }
  loop(call, call.q, interleaved);
  if (!call.q.is_same(q_view)) {
    q_view.copy_(call.q);
  }
}

template <KvCacheLoop loop>
void rotary_kv_cache_inplace_kernel(at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    at::Tensor& k_cache, at::Tensor& v_cache,
                                    const at::Tensor& cos, const at::Tensor& sin,
                                    const at::Tensor& cache_seqlens, OptionalTensor positions,
                                    bool interleaved, bool heads_first, bool cache_heads_first,
                                    OptionalTensor inv_freq, double attention_factor) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, "posenc::rotary_kv_cache_");
  KvCacheCall call =
      prepare_kv_cache_call(q, q, k, v, k_cache, v_cache, cos, sin, cache_seqlens, positions,
                            heads_first, cache_heads_first, inv_freq, attention_factor);
  run_kv_cache_call<loop>(call, q, q, interleaved);
}

template <KvCacheLoop loop, EmptyFn empty>
at::Tensor rotary_kv_cache_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                                  const at::Tensor& sin, const at::Tensor& cache_seqlens,
                                  OptionalTensor positions, bool interleaved, bool heads_first,
                                  bool cache_heads_first, OptionalTensor inv_freq,
                                  double attention_factor) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, "posenc::rotary_kv_cache");
  at::Tensor q_out = empty(q.sizes(), q.options());
  KvCacheCall call =
      prepare_kv_cache_call(q, q_out, k, v, k_cache, v_cache, cos, sin, cache_seqlens, positions,
                            heads_first, cache_heads_first, inv_freq, attention_factor);
  at::Tensor source = q;
  run_kv_cache_call<loop>(call, source, q_out, interleaved);
  return q_out;
}

template <KvCacheLoop loop>
void rotary_paged_kv_cache_inplace_kernel(at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          at::Tensor& k_cache, at::Tensor& v_cache,
                                          const at::Tensor& cos, const at::Tensor& sin,
                                          const at::Tensor& positions,
                                          const at::Tensor& slot_mapping, bool interleaved,
                                          bool cache_heads_first, OptionalTensor inv_freq,
                                          double attention_factor) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{},
                                   "posenc::rotary_paged_kv_cache_");
  KvCacheCall call =
      prepare_paged_kv_cache_call(q, q, k, v, k_cache, v_cache, cos, sin, positions, slot_mapping,
                                  cache_heads_first, inv_freq, attention_factor);
  at::Tensor q_view = call.q;
  run_kv_cache_call<loop>(call, q_view, q_view, interleaved);
}

template <KvCacheLoop loop, EmptyFn empty>
at::Tensor rotary_paged_kv_cache_kernel(const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, at::Tensor& k_cache,
                                        at::Tensor& v_cache, const at::Tensor& cos,
                                        const at::Tensor& sin, const at::Tensor& positions,
                                        const at::Tensor& slot_mapping, bool interleaved,
                                        bool cache_heads_first, OptionalTensor inv_freq,
                                        double attention_factor) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{},
                                   "posenc::rotary_paged_kv_cache");
  at::Tensor q_out = empty(q.sizes(), q.options());
  KvCacheCall call =
      prepare_paged_kv_cache_call(q, q_out, k, v, k_cache, v_cache, cos, sin, positions,
                                  slot_mapping, cache_heads_first, inv_freq, attention_factor);
  at::Tensor source = call.q;
  run_kv_cache_call<loop>(call, source, q_out.unsqueeze(0), interleaved);
  return q_out;
}

} // namespace ops
} // namespace posenc
