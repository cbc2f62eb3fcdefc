#pragma once

// The checked calls of the KV-cache operators (rotary_kv_cache(_), rotary_paged_kv_cache(_)):
// every backend starts with them, so all accept and reject the same calls with the same messages.
// The layout checks compare sizes without reading them (symbolic under torch.compile), so the
// Meta kernels make them too.

#include "ops/rotary/arguments.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace posenc {
namespace ops {

/// Which cache an operator writes, and the tensor that places its tokens there.
enum class CacheKind {
  kContiguous, // [B, S, H_kv, D], token (b, l) at slot cache_seqlens[b] + l
  kPaged,      // [num_blocks, block_size, H_kv, D], token t at slot slot_mapping[t]
};

/// The layout of a call, checked: ranks, dtypes, devices and sizes of q, k, v, the caches and
/// the index tensor (cache_seqlens `[B]` or slot_mapping `[T]`), nothing read. Refuses, before
/// anything is written, a grad-requiring argument while grad mode is on (the write has no
/// gradient).
void check_kv_cache_layout(CacheKind kind, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, const at::Tensor& k_cache,
                           const at::Tensor& v_cache, const at::Tensor& index, bool heads_first,
                           bool cache_heads_first);

/// A checked call of a KV-cache operator.
struct KvCacheCall {
  /// The rotation of q and k as apply_rotary_qk's (B = 1 and L = T for a paged call): tables,
  /// positions, heads; with `seqlens_positions`, the positions of its offset form are added to
  /// each sequence's cache_seqlens.
  RotaryQkCall rotary;
  /// q, k, v as `[B, L, H, D]` (or heads-first) views of the arguments, channels contiguous.
  at::Tensor q;
  at::Tensor k;
  at::Tensor v;
  int64_t v_head_dim = 0;
  /// The caches as `[blocks, slots, H_kv, D]` (or `[blocks, H_kv, slots, D]`), as given.
  at::Tensor k_cache;
  at::Tensor v_cache;
  int64_t blocks = 0;
  int64_t block_size = 0;
  bool cache_heads_first = false;
  /// The contiguous int32/int64 cache_seqlens `[B]` or slot_mapping `[T]`.
  at::Tensor index;
  CacheKind kind = CacheKind::kContiguous;
  bool seqlens_positions = false;
};

/// Checks a call of rotary_kv_cache(_) (q_out: the tensor the queries are written to, q itself
/// in place). On the CPU every value is checked too (positions, cache_seqlens + L <= S); on a
/// device, the kernels check what they read.
KvCacheCall prepare_kv_cache_call(const at::Tensor& q, const at::Tensor& q_out,
                                  const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& k_cache, const at::Tensor& v_cache,
                                  const at::Tensor& cos, const at::Tensor& sin,
                                  const at::Tensor& cache_seqlens, OptionalTensor positions,
                                  bool heads_first, bool cache_heads_first,
                                  OptionalTensor inv_freq, double attention_factor);

/// Checks a call of rotary_paged_kv_cache(_). On the CPU the slots are checked too (in range,
/// no two tokens in one slot).
KvCacheCall prepare_paged_kv_cache_call(const at::Tensor& q, const at::Tensor& q_out,
                                        const at::Tensor& k, const at::Tensor& v,
                                        const at::Tensor& k_cache, const at::Tensor& v_cache,
                                        const at::Tensor& cos, const at::Tensor& sin,
                                        const at::Tensor& positions,
                                        const at::Tensor& slot_mapping, bool cache_heads_first,
                                        OptionalTensor inv_freq, double attention_factor);

} // namespace ops
} // namespace posenc
