// Meta kernels of the KV-cache family: the layout checks every backend makes (arguments.h, sizes
// compared, not read) and the rotation's, for fake tensors (torch.compile, torch.export).

#include "ops/common/meta_checks.h"
#include "ops/common/sym_length.h"
#include "ops/kv_cache/arguments.h"
#include "ops/rotary/meta_checks.h"

#include <torch/library.h>

namespace posenc {
namespace ops {
namespace meta {
namespace {

void check_contiguous_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& k_cache, const at::Tensor& v_cache,
                           const at::Tensor& cos, const at::Tensor& sin,
                           const at::Tensor& cache_seqlens, OptionalTensor positions,
                           bool heads_first, bool cache_heads_first, OptionalTensor inv_freq) {
  check_kv_cache_layout(CacheKind::kContiguous, q, k, v, k_cache, v_cache, cache_seqlens,
                        heads_first, cache_heads_first);
  check_rotary_qk(q, k, cos, sin, 0, positions, inv_freq, heads_first);
}

void check_paged_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& cos,
                      const at::Tensor& sin, const at::Tensor& positions,
                      const at::Tensor& slot_mapping, bool cache_heads_first,
                      OptionalTensor inv_freq) {
  static constexpr detail::CallerName who{};
  check_kv_cache_layout(CacheKind::kPaged, q, k, v, k_cache, v_cache, slot_mapping, false,
                        cache_heads_first);
  TORCH_CHECK(positions.dim() == 1 && size_of(positions, 0) == size_of(q, 0), who,
              ": positions must be [T] = [", size_of(q, 0),
              "] (one per token of the packed batch), but got a tensor of shape ",
              shape_of(positions));
  check_rotary_qk(q.unsqueeze(0), k.unsqueeze(0), cos, sin, 0, positions, inv_freq, false);
}

void rotary_kv_cache_(at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                      const at::Tensor& sin, const at::Tensor& cache_seqlens,
                      OptionalTensor positions, bool, bool heads_first, bool cache_heads_first,
                      OptionalTensor inv_freq, double) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, "posenc::rotary_kv_cache_");
  check_contiguous_call(q, k, v, k_cache, v_cache, cos, sin, cache_seqlens, positions,
                        heads_first, cache_heads_first, inv_freq);
}

at::Tensor rotary_kv_cache(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                           const at::Tensor& sin, const at::Tensor& cache_seqlens,
                           OptionalTensor positions, bool, bool heads_first,
                           bool cache_heads_first, OptionalTensor inv_freq, double) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, "posenc::rotary_kv_cache");
  check_contiguous_call(q, k, v, k_cache, v_cache, cos, sin, cache_seqlens, positions,
                        heads_first, cache_heads_first, inv_freq);
  return empty_with_lengths(lengths_of(q), q.options()); // as the kernels allocate: contiguous
}

void rotary_paged_kv_cache_(at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                            const at::Tensor& sin, const at::Tensor& positions,
                            const at::Tensor& slot_mapping, bool, bool cache_heads_first,
                            OptionalTensor inv_freq, double) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{},
                                   "posenc::rotary_paged_kv_cache_");
  check_paged_call(q, k, v, k_cache, v_cache, cos, sin, positions, slot_mapping,
                   cache_heads_first, inv_freq);
}

at::Tensor rotary_paged_kv_cache(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                                 const at::Tensor& sin, const at::Tensor& positions,
                                 const at::Tensor& slot_mapping, bool, bool cache_heads_first,
                                 OptionalTensor inv_freq, double) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{},
                                   "posenc::rotary_paged_kv_cache");
  check_paged_call(q, k, v, k_cache, v_cache, cos, sin, positions, slot_mapping,
                   cache_heads_first, inv_freq);
  return empty_with_lengths(lengths_of(q), q.options());
}

} // namespace
} // namespace meta

TORCH_LIBRARY_IMPL(posenc, Meta, m) {
  m.impl("rotary_kv_cache_", TORCH_FN(meta::rotary_kv_cache_));
  m.impl("rotary_kv_cache", TORCH_FN(meta::rotary_kv_cache));
  m.impl("rotary_paged_kv_cache_", TORCH_FN(meta::rotary_paged_kv_cache_));
  m.impl("rotary_paged_kv_cache", TORCH_FN(meta::rotary_paged_kv_cache));
}

} // namespace ops
} // namespace posenc
