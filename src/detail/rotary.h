#pragma once

// Rotary position embedding (RoPE): its frequencies (the one definition every cache builder,
// extrapolation path and the TorchScript export use), the cos/sin rows and the rotation itself.

#include <posenc/options/rotary_embedding.h>

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace posenc {
namespace detail {

/// Everything that defines a rotary embedding's angles besides the positions.
struct RopeSpec {
  /// Number of rotated channels R (even): R / 2 frequencies.
  int64_t rotary_dim = 2;
  /// Base of the frequencies base^(-2i / R).
  double base = 10000.0;
  /// The scaling variant, with max_position_embeddings and original_max_position_embeddings
  /// resolved (rope_spec fills them).
  RopeScalingOptions scaling;
  /// Per-frequency divisors (empty: none).
  std::vector<double> freq_factors;
  /// Whether cos/sin carry the variant's attention factor.
  bool attention_factor_in_cos_sin = true;
};

/// A rotary embedding's frequencies, in double precision: the angle of pair i at position p is
/// p * inv_freq[i]; cos and sin are multiplied by `attention_factor` (1 for the plain RoPE, and
/// when the variant's factor is left to the softmax scale).
struct RopeFrequencies {
  std::vector<double> inv_freq;
  double attention_factor = 1.0;
  /// The variant's attention factor (yarn, longrope; 1 for the others), whether or not cos/sin
  /// carry it.
  double variant_attention_factor = 1.0;
};

/// The frequencies of `spec` for a call whose last position is `seq_len - 1` (only dynamic and
/// longrope depend on it; unset: a call within the model's context). A new RoPE variant is a
/// change here and in its options. Checks `spec` (check_rope_spec) with the caller's name in the
/// messages.
RopeFrequencies rope_frequencies(const RopeSpec& spec,
                                 c10::optional<int64_t> seq_len = c10::nullopt);

/// Checks every parameter of `spec` (messages name the caller).
void check_rope_spec(const RopeSpec& spec);

/// The length past which a call's frequencies differ from those of shorter calls (dynamic:
/// max_position_embeddings, longrope: original_max_position_embeddings), or unset when they never
/// do.
c10::optional<int64_t> rope_switch_length(const RopeSpec& spec);

/// The frequencies every call past rope_switch_length uses whatever its end (LongRoPE's long
/// factors: rope_frequencies(spec, original_max_position_embeddings + 1)), float64 `[R/2]` on the
/// host; undefined for the variants whose frequencies past the switch depend on the call's length
/// (dynamic NTK) and for those that never switch.
at::Tensor rope_long_inv_freq(const RopeSpec& spec);

/// The spec a RotaryEmbedding's options define (the module, its caches and its export all use
/// it): max_position_embeddings defaults to max_len, original_max_position_embeddings to
/// max_position_embeddings.
RopeSpec rope_spec(const RotaryEmbeddingOptions& options);

/// The spec of the functional forms (max_position_embeddings defaults to `max_len`).
RopeSpec rope_spec(int64_t rotary_dim, const functional::RotaryTablesFuncOptions& options,
                   int64_t max_len);

/// The spec of the table-less forms (frequencies without caches: functional::rotary_inv_freq, the
/// rope_frequencies operator): `scaling.max_position_embeddings` must be given where the variant
/// reads the model's context length.
RopeSpec rope_spec_without_table(int64_t rotary_dim,
                                 const functional::RotaryTablesFuncOptions& options);

/// Checks the arguments that define rotary caches.
void check_rotary_arguments(int64_t max_len, int64_t rotary_dim, double base);

/// cos and sin of `position * inv_freq[i]` (times the attention factor) for the integer
/// `positions` (flattened; -1 gives cos 1, sin 0: no rotation) or the floating-point ones (read as
/// float64; checked finite by the caller): two `[N, R/2]` tensors in `dtype`
/// on the device of `positions`, computed in double precision and rounded once. CPU positions
/// are computed with detail::sincos (within an ulp of float64, as libm); positions on another
/// device where they lie (rotary_rows_from: nothing is read back).
std::pair<at::Tensor, at::Tensor> rotary_rows(const at::Tensor& positions,
                                              const RopeFrequencies& frequencies,
                                              c10::ScalarType dtype);

/// rotary_rows of the `count` positions `first .. first + count - 1`, on the CPU (no positions
/// tensor: a call's rows past the caches in the offset form).
std::pair<at::Tensor, at::Tensor> rotary_rows_range(int64_t first, int64_t count,
                                                    const RopeFrequencies& frequencies,
                                                    c10::ScalarType dtype);

/// rotary_rows computed with tensor operations on the device of `positions` (which `inv_freq`,
/// float64 `[R/2]`, shares): angle = position * inv_freq in float64, its cos and sin times
/// `attention_factor`, rounded once to `dtype`; -1 (integer padding) gives cos 1, sin 0. Within an
/// ulp or two of float64 of rotary_rows' CPU values, so equal after rounding to float32 but for
/// values that close to a rounding boundary.
std::pair<at::Tensor, at::Tensor> rotary_rows_from(const at::Tensor& positions,
                                                   const at::Tensor& inv_freq,
                                                   double attention_factor, c10::ScalarType dtype);

/// The frequencies of a call at `positions` that lie on a device (CUDA, meta), computed there
/// from `frequencies` (float64, on the positions' device: the variant's frequencies,
/// rope_frequencies(spec); for LongRoPE `[2, R/2]`, the short ones and the long ones,
/// rope_frequencies(spec, original + 1)), without reading the positions back and without a copy
/// from the host (no synchronisation): float64 `[R/2]`. The variants that switch by the call's
/// length (rope_switch_length) switch by its end, the largest position + 1 (the first integer past
/// it for floating-point positions): LongRoPE selects the long row past its original context
/// (exact), dynamic NTK rescales the frequencies to the base of that length:
/// inv_freq[i] * s^(-2i / (R - 2)) with s = factor * L / max - (factor - 1), L = max(end, max), the
/// same value as rope_frequencies(spec, end) (base * s^(R / (R - 2)), then base'^(-2i / R)) within
/// a few ulp of float64. Other variants (and empty positions) return `frequencies`.
at::Tensor rope_frequencies_at(const RopeSpec& spec, const at::Tensor& frequencies,
                               const at::Tensor& positions);

/// Multimodal RoPE: which of the three position axes (0 temporal, 1 height, 2 width) turns each
/// of the `half` = R/2 frequencies. Qwen2-VL's M-RoPE: contiguous blocks of section[0],
/// section[1], section[2] frequencies; Qwen3-VL's interleaved form (`interleaved`): frequency i
/// goes to axis a in {1, 2} when i % 3 == a and i < 3 * section[a], to the temporal axis
/// otherwise. Checks that `section` holds three non-negative sizes summing to `half`.
std::vector<int64_t> mrope_axes(const std::vector<int64_t>& section, bool interleaved,
                                int64_t half);

/// ERNIE 4.5-VL's multimodal assignment (RotaryEmbeddingOptions::mrope_hw_alternating) of the
/// `half` frequencies: i < section[1] + section[2] to the height axis (even i) or the width axis
/// (odd i), the others to the temporal axis. Checks that `section` holds three non-negative sizes
/// summing to `half`, with section[1] == section[2].
std::vector<int64_t> mrope_hw_alternating_axes(const std::vector<int64_t>& section, int64_t half);

/// Checks an input of apply_rotary: 4-D, floating, on `device`, at least `rotary_dim` channels.
void check_rotary_input(const at::Tensor& x, int64_t rotary_dim, bool heads_first,
                        const c10::Device& device);

/// Rotates the first `2 * cos.size(-1)` channels of `x` by the angles of the broadcastable
/// `cos`/`sin` (`[.., R/2]`), pairs (i, i + R/2) or, `interleaved`, (2i, 2i + 1); `inverse` uses
/// -angle. Computed in at least float32, returned in the dtype of `x`.
at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                  bool interleaved, bool inverse);

/// Rows `[batch * length, R/2]` (batch 1: shared by the whole batch) shaped to broadcast against
/// `x` (`[B, L, H, R/2]`, or `[B, H, L, R/2]` with `heads_first`).
at::Tensor rotary_broadcast(const at::Tensor& rows, int64_t batch, int64_t length,
                            bool heads_first);

} // namespace detail
} // namespace posenc
