// The KV-cache family: rotary embedding fused with the write of the keys and values into a
// contiguous or a paged cache. Schemas and C++ entry points; kernels per backend beside them
// (*_kernel.*).

#include "ops/common/dispatch.h"

#include <posenc/ops/kv_cache.h>

#include <torch/library.h>

namespace posenc {

TORCH_LIBRARY_FRAGMENT(posenc, m) {
  // Contiguous caches [B, S, H_kv, D] (cache_heads_first: [B, H_kv, S, D]), token l of sequence
  // b at slot cache_seqlens[b] + l; positions: the rotation's, when not those slots.
  m.def(
      "rotary_kv_cache_(Tensor(a!) q, Tensor k, Tensor v, Tensor(b!) k_cache, "
      "Tensor(c!) v_cache, Tensor cos, Tensor sin, Tensor cache_seqlens, Tensor? positions=None, "
      "bool interleaved=False, bool heads_first=False, bool cache_heads_first=False, "
      "Tensor? inv_freq=None, float attention_factor=1.0) -> ()");
  m.def(
      "rotary_kv_cache(Tensor q, Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, "
      "Tensor cos, Tensor sin, Tensor cache_seqlens, Tensor? positions=None, "
      "bool interleaved=False, bool heads_first=False, bool cache_heads_first=False, "
      "Tensor? inv_freq=None, float attention_factor=1.0) -> Tensor");
  // Paged caches [num_blocks, block_size, H_kv, D] (cache_heads_first: [num_blocks, H_kv,
  // block_size, D]), token t at slot slot_mapping[t] (negative: not written).
  m.def(
      "rotary_paged_kv_cache_(Tensor(a!) q, Tensor k, Tensor v, Tensor(b!) k_cache, "
      "Tensor(c!) v_cache, Tensor cos, Tensor sin, Tensor positions, Tensor slot_mapping, "
      "bool interleaved=False, bool cache_heads_first=False, Tensor? inv_freq=None, "
      "float attention_factor=1.0) -> ()");
  m.def(
      "rotary_paged_kv_cache(Tensor q, Tensor k, Tensor v, Tensor(a!) k_cache, "
      "Tensor(b!) v_cache, Tensor cos, Tensor sin, Tensor positions, Tensor slot_mapping, "
      "bool interleaved=False, bool cache_heads_first=False, Tensor? inv_freq=None, "
      "float attention_factor=1.0) -> Tensor");
}

namespace ops {

using KvCacheInplaceSignature = void(at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     at::Tensor&, at::Tensor&, const at::Tensor&,
                                     const at::Tensor&, const at::Tensor&, OptionalTensor, bool,
                                     bool, bool, OptionalTensor, double);
using KvCacheSignature = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                    at::Tensor&, at::Tensor&, const at::Tensor&, const at::Tensor&,
                                    const at::Tensor&, OptionalTensor, bool, bool, bool,
                                    OptionalTensor, double);
using PagedKvCacheInplaceSignature = void(at::Tensor&, const at::Tensor&, const at::Tensor&,
                                          at::Tensor&, at::Tensor&, const at::Tensor&,
                                          const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                          bool, bool, OptionalTensor, double);
using PagedKvCacheSignature = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                         at::Tensor&, at::Tensor&, const at::Tensor&,
                                         const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                         bool, bool, OptionalTensor, double);

at::Tensor& rotary_kv_cache_(at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                             const at::Tensor& sin, const at::Tensor& cache_seqlens,
                             OptionalTensor positions, bool interleaved, bool heads_first,
                             bool cache_heads_first, OptionalTensor inv_freq,
                             double attention_factor) {
  static const auto op = typed_op<KvCacheInplaceSignature>("posenc::rotary_kv_cache_");
  op.call(q, k, v, k_cache, v_cache, cos, sin, cache_seqlens, positions, interleaved, heads_first,
          cache_heads_first, inv_freq, attention_factor);
  return q;
}

at::Tensor rotary_kv_cache(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                           const at::Tensor& sin, const at::Tensor& cache_seqlens,
                           OptionalTensor positions, bool interleaved, bool heads_first,
                           bool cache_heads_first, OptionalTensor inv_freq,
                           double attention_factor) {
  static const auto op = typed_op<KvCacheSignature>("posenc::rotary_kv_cache");
  return op.call(q, k, v, k_cache, v_cache, cos, sin, cache_seqlens, positions, interleaved,
                 heads_first, cache_heads_first, inv_freq, attention_factor);
}

at::Tensor& rotary_paged_kv_cache_(at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                                   const at::Tensor& sin, const at::Tensor& positions,
                                   const at::Tensor& slot_mapping, bool interleaved,
                                   bool cache_heads_first, OptionalTensor inv_freq,
                                   double attention_factor) {
  static const auto op = typed_op<PagedKvCacheInplaceSignature>("posenc::rotary_paged_kv_cache_");
  op.call(q, k, v, k_cache, v_cache, cos, sin, positions, slot_mapping, interleaved,
          cache_heads_first, inv_freq, attention_factor);
  return q;
}

at::Tensor rotary_paged_kv_cache(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                                 const at::Tensor& sin, const at::Tensor& positions,
                                 const at::Tensor& slot_mapping, bool interleaved,
                                 bool cache_heads_first, OptionalTensor inv_freq,
                                 double attention_factor) {
  static const auto op = typed_op<PagedKvCacheSignature>("posenc::rotary_paged_kv_cache");
  return op.call(q, k, v, k_cache, v_cache, cos, sin, positions, slot_mapping, interleaved,
                 cache_heads_first, inv_freq, attention_factor);
}

} // namespace ops
} // namespace posenc
