#pragma once

/// @file
/// posenc's operators: rotary embedding fused with the KV-cache write, the step a serving decoder
/// runs once per layer and token. Each function calls its operator `posenc::<name>` through the
/// dispatcher (`torch.ops.posenc.<name>` from Python and TorchScript); its schema is the `m.def`
/// beside its entry point in `src/ops/kv_cache/kv_cache.cpp`. One pass over the data: the queries
/// are rotated (in place, or into a new tensor), the keys rotated straight into `k_cache` and the
/// values copied into `v_cache`; `k` and `v` are only read.
///
/// What they share:
/// - `cos` and `sin` are a rotary embedding's `[max_len, R/2]` caches (any rope type's: the
///   module's `cos()` / `sin()`), `interleaved` the pairing, `inv_freq` (float64 `[R/2]`) and
///   `attention_factor` the definition that computes rows past the caches, as for apply_rotary.
///   Partial rotary: channels past R are copied. GQA / MQA: k and v have any number of heads
///   H_kv, the caches the same.
/// - q, k and v may be views of one fused projection output (their channels contiguous, other
///   strides free): nothing is copied. v may be narrower or wider than k (D_v).
/// - The caches have the dtype and device of q, k and v, and contiguous channels; they are
///   written where they lie (views of a larger cache too).
/// - Inference only: the cache write has no gradient. A call where grad mode is on and q, k, v or
///   a cache requires grad is refused before anything is written.
/// - CUDA: nothing is read back to the host and nothing is allocated for int64 positions and
///   float32/float64 caches, so a call can be captured in a CUDA graph. Slots, sequence lengths
///   and positions are checked by the threads that read them: a bad one stops the kernel with a
///   device-side assertion, raised at the next synchronisation, and no thread addresses a slot
///   outside the cache (rows of other tokens, or of the same token's other heads, may be written
///   before the kernel stops; a paged call's distinct-slots check runs before its write is
///   launched). On the CPU every value is checked before anything is written.

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>

namespace posenc {
namespace ops {

/// Rotary embedding and the write of a contiguous KV cache, in one pass (flash-attn's
/// `flash_attn_with_kvcache` convention). q `[B, L, H_q, D]`, k `[B, L, H_kv, D]`, v
/// `[B, L, H_kv, D_v]` (with `heads_first`: `[B, H, L, D]`); k_cache `[B, S, H_kv, D]` and
/// v_cache `[B, S, H_kv, D_v]` (with `cache_heads_first`: `[B, H_kv, S, D]`). `cache_seqlens`
/// (int32 or int64 `[B]`): the tokens each sequence already holds; token l of sequence b is
/// written at slot `cache_seqlens[b] + l`, which must be < S. The rotation's positions are those
/// slots, or `positions` (`[B, L]` or `[L]`, as for apply_rotary: HF's position_ids of a
/// left-padded batch). Rotates q in place and returns it.
at::Tensor& rotary_kv_cache_(at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                             const at::Tensor& sin, const at::Tensor& cache_seqlens,
                             const c10::optional<at::Tensor>& positions = c10::nullopt,
                             bool interleaved = false, bool heads_first = false,
                             bool cache_heads_first = false,
                             const c10::optional<at::Tensor>& inv_freq = c10::nullopt,
                             double attention_factor = 1.0);

/// `rotary_kv_cache_` with the rotated queries returned in a new tensor (q is only read).
at::Tensor rotary_kv_cache(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                           const at::Tensor& sin, const at::Tensor& cache_seqlens,
                           const c10::optional<at::Tensor>& positions = c10::nullopt,
                           bool interleaved = false, bool heads_first = false,
                           bool cache_heads_first = false,
                           const c10::optional<at::Tensor>& inv_freq = c10::nullopt,
                           double attention_factor = 1.0);

/// Rotary embedding and the write of a paged KV cache, in one pass (vLLM's
/// `reshape_and_cache_flash` convention), for a packed batch of T tokens (prefill and decode
/// tokens of many sequences together). q `[T, H_q, D]`, k `[T, H_kv, D]`, v `[T, H_kv, D_v]`;
/// k_cache `[num_blocks, block_size, H_kv, D]` and v_cache `[num_blocks, block_size, H_kv, D_v]`
/// (with `cache_heads_first`, FlashInfer's HND: `[num_blocks, H_kv, block_size, D]`).
/// `positions` `[T]`: each token's position; `slot_mapping` (int32 or int64 `[T]`): where each
/// token's key and value go, slot `s` being row `s % block_size` of block `s / block_size`; a
/// negative slot writes nothing (a padding token; its query is still rotated). Two tokens of one
/// call must not share a slot. Rotates q in place and returns it.
at::Tensor& rotary_paged_kv_cache_(at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                                   const at::Tensor& sin, const at::Tensor& positions,
                                   const at::Tensor& slot_mapping, bool interleaved = false,
                                   bool cache_heads_first = false,
                                   const c10::optional<at::Tensor>& inv_freq = c10::nullopt,
                                   double attention_factor = 1.0);

/// `rotary_paged_kv_cache_` with the rotated queries returned in a new tensor.
at::Tensor rotary_paged_kv_cache(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                                 const at::Tensor& sin, const at::Tensor& positions,
                                 const at::Tensor& slot_mapping, bool interleaved = false,
                                 bool cache_heads_first = false,
                                 const c10::optional<at::Tensor>& inv_freq = c10::nullopt,
                                 double attention_factor = 1.0);

} // namespace ops
} // namespace posenc
