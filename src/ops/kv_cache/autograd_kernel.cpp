// Autograd kernels of the KV-cache family. Writing a cache is inference only: no gradient flows
// into a cache slot, so a call that would need one (grad mode on and q, k, v or a cache
// requiring grad) is refused before anything is written, and every other call runs below
// autograd. The ADInplaceOrView kernels bump the versions of what the call writes (q in place,
// the caches), as ATen's in-place operators do.

#include "ops/common/autograd_helpers.h"

#include <posenc/ops/kv_cache.h>

#include <c10/core/GradMode.h>
#include <torch/library.h>

#include <initializer_list>

namespace posenc {
namespace ops {
namespace {

void check_no_grad(const char* op, std::initializer_list<const at::Tensor*> tensors) {
  if (!c10::GradMode::is_enabled()) {
    return;
  }
  for (const at::Tensor* tensor : tensors) {
    TORCH_CHECK(!tensor->requires_grad(), op,
                ": writing a KV cache is inference only (no gradient flows through a cache "
                "slot), but an argument requires grad; call it under torch::NoGradGuard or "
                "c10::InferenceMode (torch.no_grad() / torch.inference_mode() in Python), or "
                "pass detached tensors");
  }
}

void rotary_kv_cache_inplace_autograd(at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      at::Tensor& k_cache, at::Tensor& v_cache,
                                      const at::Tensor& cos, const at::Tensor& sin,
                                      const at::Tensor& cache_seqlens, OptionalTensor positions,
                                      bool interleaved, bool heads_first, bool cache_heads_first,
                                      OptionalTensor inv_freq, double attention_factor) {
  check_no_grad("posenc::rotary_kv_cache_", {&q, &k, &v, &k_cache, &v_cache, &cos, &sin});
  at::AutoDispatchBelowAutograd guard;
  rotary_kv_cache_(q, k, v, k_cache, v_cache, cos, sin, cache_seqlens, positions, interleaved,
                   heads_first, cache_heads_first, inv_freq, attention_factor);
}

at::Tensor rotary_kv_cache_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    at::Tensor& k_cache, at::Tensor& v_cache,
                                    const at::Tensor& cos, const at::Tensor& sin,
                                    const at::Tensor& cache_seqlens, OptionalTensor positions,
                                    bool interleaved, bool heads_first, bool cache_heads_first,
                                    OptionalTensor inv_freq, double attention_factor) {
  check_no_grad("posenc::rotary_kv_cache", {&q, &k, &v, &k_cache, &v_cache, &cos, &sin});
  at::AutoDispatchBelowAutograd guard;
  return rotary_kv_cache(q, k, v, k_cache, v_cache, cos, sin, cache_seqlens, positions,
                         interleaved, heads_first, cache_heads_first, inv_freq, attention_factor);
}

void rotary_paged_kv_cache_inplace_autograd(at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v, at::Tensor& k_cache,
                                            at::Tensor& v_cache, const at::Tensor& cos,
                                            const at::Tensor& sin, const at::Tensor& positions,
                                            const at::Tensor& slot_mapping, bool interleaved,
                                            bool cache_heads_first, OptionalTensor inv_freq,
                                            double attention_factor) {
  check_no_grad("posenc::rotary_paged_kv_cache_", {&q, &k, &v, &k_cache, &v_cache, &cos, &sin});
  at::AutoDispatchBelowAutograd guard;
  rotary_paged_kv_cache_(q, k, v, k_cache, v_cache, cos, sin, positions, slot_mapping,
                         interleaved, cache_heads_first, inv_freq, attention_factor);
}

at::Tensor rotary_paged_kv_cache_autograd(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, at::Tensor& k_cache,
                                          at::Tensor& v_cache, const at::Tensor& cos,
                                          const at::Tensor& sin, const at::Tensor& positions,
                                          const at::Tensor& slot_mapping, bool interleaved,
                                          bool cache_heads_first, OptionalTensor inv_freq,
                                          double attention_factor) {
  check_no_grad("posenc::rotary_paged_kv_cache", {&q, &k, &v, &k_cache, &v_cache, &cos, &sin});
  at::AutoDispatchBelowAutograd guard;
  return rotary_paged_kv_cache(q, k, v, k_cache, v_cache, cos, sin, positions, slot_mapping,
                               interleaved, cache_heads_first, inv_freq, attention_factor);
}

// Runs `run` below ADInplaceOrView with the caches checked before and bumped after (and q, when
// the call writes it in place), so that nothing is written when any of them is refused.
template <typename F>
void bump_written(at::Tensor* q, at::Tensor& k_cache, at::Tensor& v_cache, F&& run) {
  mutate_and_bump(v_cache, [&] {
    mutate_and_bump(k_cache, [&] {
      if (q != nullptr) {
        mutate_and_bump(*q, run);
      } else {
        run(); // (already below ADInplaceOrView)
      }
    });
  });
}

void rotary_kv_cache_inplace_view(at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                                  const at::Tensor& sin, const at::Tensor& cache_seqlens,
                                  OptionalTensor positions, bool interleaved, bool heads_first,
                                  bool cache_heads_first, OptionalTensor inv_freq,
                                  double attention_factor) {
  bump_written(&q, k_cache, v_cache, [&] {
    rotary_kv_cache_(q, k, v, k_cache, v_cache, cos, sin, cache_seqlens, positions, interleaved,
                     heads_first, cache_heads_first, inv_freq, attention_factor);
  });
}

at::Tensor rotary_kv_cache_view(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                                const at::Tensor& sin, const at::Tensor& cache_seqlens,
                                OptionalTensor positions, bool interleaved, bool heads_first,
                                bool cache_heads_first, OptionalTensor inv_freq,
                                double attention_factor) {
  at::Tensor out;
  bump_written(nullptr, k_cache, v_cache, [&] {
    out = rotary_kv_cache(q, k, v, k_cache, v_cache, cos, sin, cache_seqlens, positions,
                          interleaved, heads_first, cache_heads_first, inv_freq, attention_factor);
  });
  return out;
}

void rotary_paged_kv_cache_inplace_view(at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        at::Tensor& k_cache, at::Tensor& v_cache,
                                        const at::Tensor& cos, const at::Tensor& sin,
                                        const at::Tensor& positions,
                                        const at::Tensor& slot_mapping, bool interleaved,
                                        bool cache_heads_first, OptionalTensor inv_freq,
                                        double attention_factor) {
  bump_written(&q, k_cache, v_cache, [&] {
    rotary_paged_kv_cache_(q, k, v, k_cache, v_cache, cos, sin, positions, slot_mapping,
                           interleaved, cache_heads_first, inv_freq, attention_factor);
  });
}

at::Tensor rotary_paged_kv_cache_view(const at::Tensor& q, const at::Tensor& k,
                                      const at::Tensor& v, at::Tensor& k_cache,
                                      at::Tensor& v_cache, const at::Tensor& cos,
                                      const at::Tensor& sin, const at::Tensor& positions,
                                      const at::Tensor& slot_mapping, bool interleaved,
                                      bool cache_heads_first, OptionalTensor inv_freq,
                                      double attention_factor) {
  at::Tensor out;
  bump_written(nullptr, k_cache, v_cache, [&] {
    out = rotary_paged_kv_cache(q, k, v, k_cache, v_cache, cos, sin, positions, slot_mapping,
                                interleaved, cache_heads_first, inv_freq, attention_factor);
  });
  return out;
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, Autograd, m) {
  m.impl("rotary_kv_cache_", TORCH_FN(rotary_kv_cache_inplace_autograd));
  m.impl("rotary_kv_cache", TORCH_FN(rotary_kv_cache_autograd));
  m.impl("rotary_paged_kv_cache_", TORCH_FN(rotary_paged_kv_cache_inplace_autograd));
  m.impl("rotary_paged_kv_cache", TORCH_FN(rotary_paged_kv_cache_autograd));
}

TORCH_LIBRARY_IMPL(posenc, ADInplaceOrView, m) {
  m.impl("rotary_kv_cache_", TORCH_FN(rotary_kv_cache_inplace_view));
  m.impl("rotary_kv_cache", TORCH_FN(rotary_kv_cache_view));
  m.impl("rotary_paged_kv_cache_", TORCH_FN(rotary_paged_kv_cache_inplace_view));
  m.impl("rotary_paged_kv_cache", TORCH_FN(rotary_paged_kv_cache_view));
}

} // namespace ops
} // namespace posenc
