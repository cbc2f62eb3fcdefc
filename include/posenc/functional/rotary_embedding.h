#pragma once

#include <posenc/options/rotary_embedding.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

namespace posenc {
namespace functional {

namespace detail {
/// `rotary_embedding` with raw arguments, as RotaryEmbedding calls it: `inv_freq` (float64
/// `[R/2]`, on the CPU) and `attention_factor` let positions past the caches be computed.
at::Tensor rotary_embedding(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                            int64_t offset, const at::Tensor& positions, RotaryPairing pairing,
                            bool heads_first, const at::Tensor& inv_freq = at::Tensor(),
                            double attention_factor = 1.0);
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
                                  options.pairing(), options.heads_first());
}

} // namespace functional
} // namespace posenc
