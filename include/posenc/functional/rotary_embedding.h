#pragma once

#include <posenc/options/rotary_embedding.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

namespace posenc {
namespace functional {

namespace detail {
/// `rotary_embedding` with raw arguments, as RotaryEmbedding calls it: `inv_freq` (float64
/// `[R/2]`, on the CPU) and `attention_factor` let positions past the caches be computed.
/// `inverse`: turns by -theta.
at::Tensor rotary_embedding(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                            int64_t offset, const at::Tensor& positions, RotaryPairing pairing,
                            bool heads_first, const at::Tensor& inv_freq = at::Tensor(),
                            double attention_factor = 1.0, bool inverse = false);

/// Multimodal tables with positions past the caches computed from `inv_freq` (when defined).
std::pair<at::Tensor, at::Tensor> multimodal_rotary_tables(
    const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& positions,
    const std::vector<int64_t>& mrope_section, bool interleaved, const at::Tensor& inv_freq,
    double attention_factor);

/// Rotates queries and keys in one call (ops::apply_rotary_qk, or apply_rotary_qk_ `in_place`).
std::tuple<at::Tensor, at::Tensor> rotary_embedding_qk(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
    int64_t offset, const at::Tensor& positions, RotaryPairing pairing, bool heads_first,
    const at::Tensor& inv_freq, double attention_factor, bool in_place, bool inverse = false);
} // namespace detail

/// The rotary caches: `cos` and `sin` of `position * inv_freq[i]` for positions
/// `0 .. max_len - 1` and `i < rotary_dim / 2` (`inv_freq` as `rotary_inv_freq` with
/// max_position_embeddings defaulting to `max_len`; times the attention factor where the variant
/// has one and `attention_factor_in_cos_sin`), two `[max_len, rotary_dim / 2]` tensors computed
/// in float64 and rounded once to `options.dtype()`.
std::pair<at::Tensor, at::Tensor> rotary_tables(int64_t max_len, int64_t rotary_dim,
                                                const RotaryTablesFuncOptions& options = {});

/// The frequencies of the rotary caches, `base^(-2i / rotary_dim)` for `i < rotary_dim / 2`
/// scaled by `options.scaling()` and divided by `options.freq_factors()`: a float64 CPU tensor
/// `[rotary_dim / 2]`, what `rotary_tables` computes its angles from (and what the
/// posenc::apply_rotary operator takes as `inv_freq` for positions past the caches). Variants
/// that read the context length need `scaling.max_position_embeddings`.
at::Tensor rotary_inv_freq(int64_t rotary_dim, const RotaryTablesFuncOptions& options = {});

/// The attention factor of `options.scaling()` (yarn, longrope; 1 for the others): what cos/sin
/// carry, or what the softmax scale must be multiplied by (squared) when they do not.
double rotary_attention_factor(int64_t rotary_dim, const RotaryTablesFuncOptions& options = {});

/// Rotates queries or keys `x` (`[B, L, H, Dh]`, or `[B, H, L, Dh]` with `heads_first`) by the
/// positions' angles: the functional form of `RotaryEmbedding::forward`. `cos`/`sin` come from
/// `rotary_tables`; the first `2 * cos.size(1)` channels are rotated, the rest pass through. The
/// result has the dtype of `x` (computed in at least float32).
///
/// Example:
/// ```
/// namespace F = posenc::functional;
/// auto [cos, sin] = F::rotary_tables(4096, 64);
/// auto q_rot = F::rotary_embedding(q, cos, sin, F::RotaryEmbeddingFuncOptions().offset(past));
/// ```
inline at::Tensor rotary_embedding(const at::Tensor& x, const at::Tensor& cos,
                                   const at::Tensor& sin,
                                   const RotaryEmbeddingFuncOptions& options = {}) {
  return detail::rotary_embedding(x, cos, sin, options.offset(), options.positions(),
                                  options.pairing(), options.heads_first(), at::Tensor(), 1.0,
                                  options.inverse());
}

/// Multimodal RoPE (Qwen2-VL, Qwen3-VL): the per-token cos/sin `[B, L, R/2]` (or `[L, R/2]`) of
/// positions `[3, B, L]` (or `[3, L]`), each frequency from the axis `mrope_section` assigns it
/// (`interleaved`: Qwen3-VL's assignment); see `ops::multimodal_rotary_tables`.
std::pair<at::Tensor, at::Tensor> multimodal_rotary_tables(
    const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& positions,
    const std::vector<int64_t>& mrope_section, bool interleaved = false);

/// Rotates the queries `q` and keys `k` of one attention call, in one pass over both (see
/// `ops::apply_rotary_qk`): `k` may have fewer heads (GQA, MQA). Returns the rotated `(q, k)`.
///
/// Example:
/// ```
/// namespace F = posenc::functional;
/// auto [q_rot, k_rot] = F::rotary_embedding_qk(q, k, rope->cos, rope->sin,
///                                              F::RotaryEmbeddingFuncOptions().offset(past));
/// ```
inline std::tuple<at::Tensor, at::Tensor> rotary_embedding_qk(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
    const RotaryEmbeddingFuncOptions& options = {}) {
  return detail::rotary_embedding_qk(q, k, cos, sin, options.offset(), options.positions(),
                                     options.pairing(), options.heads_first(), at::Tensor(), 1.0,
                                     /*in_place=*/false, options.inverse());
}

/// `rotary_embedding_qk` in place: q and k (views of one fused qkv tensor welcome) are rotated
/// where they lie.
inline void rotary_embedding_qk_(at::Tensor& q, at::Tensor& k, const at::Tensor& cos,
                                 const at::Tensor& sin,
                                 const RotaryEmbeddingFuncOptions& options = {}) {
  detail::rotary_embedding_qk(q, k, cos, sin, options.offset(), options.positions(),
                              options.pairing(), options.heads_first(), at::Tensor(), 1.0,
                              /*in_place=*/true, options.inverse());
}

/// Rotary embedding fused with the write of a contiguous KV cache, in one pass over the data
/// (see `ops::rotary_kv_cache_`): rotates `q` in place, rotates `k` into `k_cache` and copies `v`
/// into `v_cache`, token l of sequence b at slot `cache_seqlens[b] + l`. Returns `q`.
///
/// Example:
/// ```
/// namespace F = posenc::functional;
/// F::rotary_kv_cache_(q, k, v, k_cache, v_cache, rope->cos, rope->sin, cache_seqlens);
/// ```
at::Tensor& rotary_kv_cache_(at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                             const at::Tensor& sin, const at::Tensor& cache_seqlens,
                             const KvCacheFuncOptions& options = {});

/// `rotary_kv_cache_` returning the rotated queries in a new tensor.
at::Tensor rotary_kv_cache(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                           const at::Tensor& sin, const at::Tensor& cache_seqlens,
                           const KvCacheFuncOptions& options = {});

/// Rotary embedding fused with the write of a paged KV cache, for a packed batch of T tokens (see
/// `ops::rotary_paged_kv_cache_`): token t's key and value go to slot `slot_mapping[t]` (negative:
/// not written). Returns `q`.
at::Tensor& rotary_paged_kv_cache_(at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                                   const at::Tensor& sin, const at::Tensor& positions,
                                   const at::Tensor& slot_mapping,
                                   const KvCacheFuncOptions& options = {});

/// `rotary_paged_kv_cache_` returning the rotated queries in a new tensor.
at::Tensor rotary_paged_kv_cache(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& cos,
                                 const at::Tensor& sin, const at::Tensor& positions,
                                 const at::Tensor& slot_mapping,
                                 const KvCacheFuncOptions& options = {});

/// The `[3, B, L]` (temporal, height, width) positions of multimodal RoPE for a batch of text,
/// image and video tokens (`token_types` `[B, L]`: 0 text, 1 image, 2 video), as Qwen2-VL,
/// Qwen2.5-VL and Qwen3-VL number them (transformers' `get_rope_index`), and each row's delta
/// `[B, 1]`: decoding continues at `token index + delta` on all axes. Pass the positions to
/// `RotaryEmbedding::forward_positions` of a module with `mrope_section`. The functional form of
/// the posenc::mrope_position_ids operator (`ops::mrope_position_ids` says how it numbers).
///
/// Example:
/// ```
/// namespace F = posenc::functional;
/// // two text tokens, an image of 1 x 4 x 4 patches (4 tokens after a 2 x 2 merge), a text token
/// auto types = torch::tensor({{0, 0, 1, 1, 1, 1, 0}});
/// auto [positions, deltas] = F::mrope_position_ids(
///     types, F::MRopePositionIdsFuncOptions().image_grid_thw(torch::tensor({{1, 4, 4}})));
/// // temporal [[0, 1, 2, 2, 2, 2, 4]], height [[0, 1, 2, 2, 3, 3, 4]], deltas [[-2]]
/// ```
std::tuple<at::Tensor, at::Tensor> mrope_position_ids(
    const at::Tensor& token_types, const MRopePositionIdsFuncOptions& options = {});

} // namespace functional
} // namespace posenc
