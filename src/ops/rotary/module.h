#pragma once

// A RotaryEmbedding's call, defined once below every front end: which rows a call reads (the
// caches, rows computed past them, dynamic / longrope's frequencies of the call's length), the
// checks against max_len, multimodal positions, regrouping (deinterleave) and the rotation. The
// C++ module calls it directly; posenc.nn's module through the rotary_embedding_call operators,
// which read the module's options from JSON text.

#include <posenc/options/rotary_embedding.h>

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace posenc {
namespace ops {

/// What a rotary module's calls need besides its tensors, derived once from its options.
struct RotaryModuleCall {
  RotaryEmbeddingOptions options{2, 1};
  /// dynamic / longrope: the length past which a call's frequencies are its own (unset for the
  /// other variants).
  c10::optional<int64_t> switch_length;
  /// The factor cos/sin carry (the variant's attention factor, or 1 where it is left out).
  double attention_factor = 1.0;
  /// The float64 frequencies `[R/2]` of calls within the model's context.
  std::vector<double> inv_freq;
  /// The variant's attention factor (YaRN's mscale, LongRoPE's; 1 for the others), whether or not
  /// cos/sin carry it.
  double variant_attention_factor = 1.0;
  /// The advice on positions past max_len in the caller's language (C++ or Python; "" when the
  /// module extrapolates).
  const char* hint = "";
};

/// The call of a module with these options: checks every option (the C++ module's reset() and
/// posenc.nn's constructor, through rotary_embedding_frequencies; the messages name `name`, the
/// module's, in a CallerScope) and
/// resolves the switch length and the factor of the rows. `python`: the advice is spelt for
/// posenc.nn.
RotaryModuleCall rotary_module_call(const RotaryEmbeddingOptions& options, const char* name,
                                    bool python);

/// What a module with this call holds, computed on the CPU from `call`'s frequencies: its float64
/// frequencies `[R/2]`, longrope's long ones (undefined for the other variants) and, where
/// `caches_dtype` is given, its caches `[cached_len, R/2]` of that dtype (float64 angles rounded
/// once). The C++ module's reset() and posenc.nn's constructor (rotary_embedding_frequencies)
/// take their tensors from here.
struct RotaryModuleState {
  at::Tensor inv_freq;
  at::Tensor long_inv_freq;
  at::Tensor cos;
  at::Tensor sin;
};
RotaryModuleState rotary_module_state(const RotaryModuleCall& call,
                                      c10::optional<at::ScalarType> caches_dtype);

/// The module's tensors: its caches `[cached_len, R/2]`, its float64 frequencies `[R/2]` and
/// longrope's long ones (undefined for the other variants), all on the caches' device.
struct RotaryModuleTensors {
  const at::Tensor& cos;
  const at::Tensor& sin;
  const at::Tensor& inv_freq;
  const at::Tensor& long_inv_freq;
};

/// Rotates `x` (`[B, L, H, head_dim]`, heads first with the option) at positions
/// `offset .. offset + L - 1`, or at `positions` (`[L]`, `[B, L]`, fractional, or multimodal
/// `[3, B, L]`) where they are defined; errors name "RotaryEmbedding".
at::Tensor rotary_module_forward(const RotaryModuleCall& call, const RotaryModuleTensors& tensors,
                                 const at::Tensor& x, int64_t offset,
                                 const at::Tensor& positions);

/// Queries and keys (any head counts) in one call; `in_place` rotates them where they lie.
std::tuple<at::Tensor, at::Tensor> rotary_module_forward_qk(const RotaryModuleCall& call,
                                                            const RotaryModuleTensors& tensors,
                                                            const at::Tensor& q,
                                                            const at::Tensor& k, int64_t offset,
                                                            const at::Tensor& positions,
                                                            bool in_place);

/// Rotates the queries in place, the keys into `k_cache` and the values into `v_cache` in one pass
/// (ops/kv_cache): a contiguous cache at `index` = cache_seqlens `[B]` (rotation positions: the
/// slots, or `positions` `[B, L]` / `[L]` / multimodal `[3, B, L]` where defined; the caches in the
/// module's head layout), or a paged one (`paged`) at `index` = slot_mapping `[T]` with
/// `positions` `[T]` (or multimodal `[3, T]`). The rows are the module's: its caches, rows
/// computed past them, dynamic / longrope's frequencies of the call. A module that regroups
/// (deinterleave), rotates its last channels or inverts is refused.
void rotary_module_kv_cache(const RotaryModuleCall& call, const RotaryModuleTensors& tensors,
                            at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& index,
                            const at::Tensor& positions, bool paged, bool cache_heads_first);

} // namespace ops
} // namespace posenc
