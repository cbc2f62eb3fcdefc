#pragma once

#include <posenc/enums.h>

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace posenc {

/// How a rotary embedding's frequencies are scaled for long contexts: the `rope_scaling` /
/// `rope_parameters` block of a Hugging Face `config.json`, with the parameters and defaults of
/// transformers' `modeling_rope_utils.py` (`posenc::io::rotary_options_from_hf_config` reads it).
///
/// Example (LLaMA 3.1):
/// ```
/// auto scaling = posenc::RopeScalingOptions(posenc::RopeType::kLlama3)
///                    .factor(8.0).low_freq_factor(1.0).high_freq_factor(4.0)
///                    .original_max_position_embeddings(8192);
/// posenc::RotaryEmbedding rope(
///     posenc::RotaryEmbeddingOptions(128, 131072).base(500000.0).scaling(scaling));
/// ```
struct RopeScalingOptions {
  /// Options of the variant `type`, its parameters at transformers' defaults (implicit).
  /* implicit */ RopeScalingOptions(RopeType type = RopeType::kDefault);

  /// The variant. Default: kDefault (no scaling).
  TORCH_ARG(RopeType, type);
  /// Scaling factor (linear, dynamic, yarn, llama3; longrope's attention factor). yarn and
  /// longrope without it use max_position_embeddings / original_max_position_embeddings.
  TORCH_ARG(c10::optional<double>, factor) = c10::nullopt;
  /// The model's context length (HF `max_position_embeddings`): dynamic's reference length and
  /// yarn's/longrope's default factor. Default: the module's `max_len`.
  TORCH_ARG(c10::optional<int64_t>, max_position_embeddings) = c10::nullopt;
  /// The pre-training context length (yarn, longrope, llama3). Default: max_position_embeddings.
  TORCH_ARG(c10::optional<int64_t>, original_max_position_embeddings) = c10::nullopt;
  /// yarn: the number of rotations that bounds extrapolation (fast): frequencies that turn more
  /// often over the original context keep their value. Default: 32.
  TORCH_ARG(double, beta_fast) = 32.0;
  /// yarn: the number of rotations that bounds interpolation (slow): frequencies that turn less
  /// often over the original context are divided by `factor`. Default: 1.
  TORCH_ARG(double, beta_slow) = 1.0;
  /// yarn: DeepSeek's mscale and mscale_all_dim (attention factor mscale(f, mscale) /
  /// mscale(f, mscale_all_dim) when both are given and non-zero). Default: unset.
  TORCH_ARG(c10::optional<double>, mscale) = c10::nullopt;
  /// yarn: DeepSeek's mscale_all_dim, the one in the divisor (see `mscale`). Default: unset.
  TORCH_ARG(c10::optional<double>, mscale_all_dim) = c10::nullopt;
  /// yarn: round the correction range outwards to whole dimensions (HF's default) or not
  /// (gpt-oss). Default: true.
  TORCH_ARG(bool, truncate) = true;
  /// yarn, longrope: the attention factor; if unset, the variant's formula.
  TORCH_ARG(c10::optional<double>, attention_factor) = c10::nullopt;
  /// longrope: one factor per frequency (R/2 each), used by calls that stay within
  /// original_max_position_embeddings (short) or go past it (long). The short factors. Default:
  /// empty.
  TORCH_ARG(std::vector<double>, short_factor);
  /// longrope: the long factors (R/2 values; see `short_factor`). Default: empty.
  TORCH_ARG(std::vector<double>, long_factor);
  /// llama3: wavelengths above original / low_freq_factor are divided by `factor`, those below
  /// original / high_freq_factor kept, and those between interpolated smoothly. Default: 1.
  TORCH_ARG(double, low_freq_factor) = 1.0;
  /// llama3: the divisor of the short-wavelength bound (see `low_freq_factor`), at least
  /// low_freq_factor; equal to it, one bound and no band between (Llama 4 Scout). Default: 4.
  TORCH_ARG(double, high_freq_factor) = 4.0;
  /// proportional: the share of the head's frequency pairs that turn (transformers'
  /// `rope_parameters.partial_rotary_factor`); the others get frequency 0. The rotated width
  /// stays the whole head. Ignored by the other types. Default: 1.
  TORCH_ARG(double, partial_rotary_factor) = 1.0;
  /// ntk_alpha's fixed NTK factor: base * alpha^(R / (R - 2)) (Hunyuan). Required by ntk_alpha.
  TORCH_ARG(c10::optional<double>, alpha) = c10::nullopt;
};

/// Options for the `RotaryEmbedding` module.
///
/// Example:
/// ```
/// posenc::RotaryEmbedding rope(
///     posenc::RotaryEmbeddingOptions(/*head_dim=*/128, /*max_len=*/4096).base(500000.0));
/// ```
struct RotaryEmbeddingOptions {
  /// Options for heads of width `head_dim` and caches of `max_len` positions, the others at their
  /// defaults.
  RotaryEmbeddingOptions(int64_t head_dim, int64_t max_len);

  /// Width `Dh` of each attention head of the queries and keys.
  TORCH_ARG(int64_t, head_dim);
  /// Number of positions the module rotates: positions `0 .. max_len - 1` (past them: an error, or
  /// computed on the fly with `beyond_max_len`). The first `cached_len` of them are cached.
  TORCH_ARG(int64_t, max_len);
  /// Number of positions whose cos/sin rows are cached (the buffers `cos`/`sin`), `1 <= cached_len
  /// <= max_len`; the rows of positions `cached_len .. max_len - 1` are computed for exactly the
  /// positions of each call that reaches them, from the float64 frequencies (angles in float64,
  /// rounded once: the values the cache would hold), on the CPU and on devices alike. Default:
  /// `max_len`. Contexts whose caches would exceed posenc's limit of 2^28 elements (millions of
  /// positions, e.g. Llama 4 Scout's 10,485,760) need it: `cached_len(8192)` holds 4 MiB of
  /// tables for head_dim 128 and computes the rows of calls past it (docs/rope.md gives the
  /// cost per call).
  TORCH_ARG(c10::optional<int64_t>, cached_len) = c10::nullopt;
  /// Base of the frequencies base^(-2i / rotary_dim). Must be finite and >= 5.2e-290 (every angle
  /// a finite number). Default: 10000 (LLaMA 3 uses 500000).
  TORCH_ARG(double, base) = 10000.0;
  /// Number of channels of each head that are rotated (partial rotary, GPT-NeoX's rotary_pct,
  /// GPT-J's rotary_dim): the leading ones, or the last with `rotate_last_channels`; the rest pass
  /// through. Even, 2 <= rotary_dim <= head_dim.
  /// Default: head_dim.
  TORCH_ARG(c10::optional<int64_t>, rotary_dim) = c10::nullopt;
  /// Which channels are paired: kHalfSplit (GPT-NeoX, HF LLaMA) or kInterleaved (GPT-J,
  /// torchtune). Default: kHalfSplit.
  TORCH_ARG(RotaryPairing, pairing) = RotaryPairing::kHalfSplit;
  /// DeepSeek-V3's `rope_interleave` (MLA models: DeepSeek-V3/V3.2, Kimi K2, GLM-4.7-Flash,
  /// Mistral Large 3, LongCat-Flash, ...): the rotated channels arrive paired (2i, 2i + 1) and
  /// leave as halves (i, i + R/2), i.e. they are regrouped into halves and then turned with
  /// kHalfSplit (transformers' `apply_rotary_pos_emb_interleave`). Attention scores equal
  /// kInterleaved's; the rotated tensors' channel order differs. Needs `pairing` kHalfSplit (the
  /// output's). Calls cost one copy of the rotated channels more (in-place calls rotate copies
  /// and write them back). Default: false.
  TORCH_ARG(bool, deinterleave) = false;
  /// Rotates the last `rotary_dim` channels of each head instead of the first (heads laid out as
  /// [pass-through | rotated]: DeepSeek-V4's `x[..., -rope_dim:]`); the leading `head_dim -
  /// rotary_dim` channels pass through. Pairing, deinterleave and inverse apply to the rotated
  /// channels as they would to leading ones. Default: false.
  TORCH_ARG(bool, rotate_last_channels) = false;
  /// Turns each pair by -theta instead of theta: NanoChat's rotation (its rotate_half is
  /// cat(x2, -x1)). Attention scores of the rotated queries and keys are those of theta at the
  /// negated relative distance. Default: false.
  TORCH_ARG(bool, inverse) = false;
  /// `false`: queries/keys are `[B, L, H, Dh]`; `true`: `[B, H, L, Dh]`. Default: `false`.
  TORCH_ARG(bool, heads_first) = false;
  /// Positions at or past `max_len`: an error (default) or cos/sin computed on the fly.
  TORCH_ARG(BeyondMaxLen, beyond_max_len) = BeyondMaxLen::kError;
  /// Long-context scaling of the frequencies (linear, dynamic NTK, YaRN, LongRoPE, LLaMA 3).
  /// Default: none.
  ///
  /// dynamic and longrope frequencies depend on the call: a call whose last position p_max has
  /// p_max + 1 > max_position_embeddings (dynamic) or > original_max_position_embeddings
  /// (longrope) rotates all of its positions with the frequencies of the length p_max + 1 (NTK
  /// base) or the long factors; other calls use the caches. The module keeps no state between
  /// calls: during KV-cache decoding, keys rotated by earlier calls keep the frequencies of their
  /// call (as in HF transformers, vLLM and llama.cpp), and a call's result depends only on its own
  /// arguments (HF's dynamic module keeps the largest length seen until a call falls back below
  /// max_position_embeddings; it matches posenc whenever the sequence only grows). With explicit
  /// positions, finding p_max costs these two variants one more device-to-host read per call.
  TORCH_ARG(RopeScalingOptions, scaling) = RopeScalingOptions();
  /// Per-frequency divisors applied after the scaling (llama.cpp's "freq factors", e.g. from a
  /// GGUF `rope_freqs` tensor): `inv_freq[i] / freq_factors[i]`; empty or R/2 positive values.
  TORCH_ARG(std::vector<double>, freq_factors);
  /// Whether the variant's attention factor (yarn, longrope) multiplies cos and sin (HF
  /// transformers, vLLM) or is left to the caller's softmax scale (DeepSeek's reference code:
  /// multiply the softmax scale by attention_factor^2). The factor is available as
  /// `RotaryEmbeddingImpl::attention_factor()` either way. Default: true.
  TORCH_ARG(bool, attention_factor_in_cos_sin) = true;
  /// Multimodal RoPE (Qwen2-VL's M-RoPE): how many of the rotary_dim / 2 frequencies follow the
  /// temporal, height and width position of a token (three sizes summing to rotary_dim / 2, e.g.
  /// {16, 24, 24}); `forward_positions` / `forward_qk_positions` then take positions
  /// `[3, B, L]` (or `[3, L]`). Positions `[B, L]` / offsets rotate as plain RoPE (all three
  /// axes equal). Default: empty (text-only RoPE).
  TORCH_ARG(std::vector<int64_t>, mrope_section);
  /// With `mrope_section`: Qwen3-VL's interleaved assignment (frequency i follows the height
  /// axis when i % 3 == 1 and i < 3 * section[1], the width axis when i % 3 == 2 and
  /// i < 3 * section[2], the temporal axis otherwise) instead of contiguous blocks. Default: false.
  TORCH_ARG(bool, mrope_interleaved) = false;
  /// With `mrope_section` {t, h, w} (h == w): ERNIE 4.5-VL's assignment (its recomposition of
  /// pre-permuted frequencies): the first h + w frequencies alternate between the height axis
  /// (even i) and the width axis (odd i), the last t follow the temporal axis. Not with
  /// `mrope_interleaved`. Default: false.
  TORCH_ARG(bool, mrope_hw_alternating) = false;

 public:
  /// The number of rotated channels: `rotary_dim` if set, else `head_dim`.
  int64_t rotated_width() const {
    return rotary_dim_.value_or(head_dim_);
  }
  /// The number of cached rows: `cached_len` if set, else `max_len`.
  int64_t cached_rows() const;
};

namespace functional {

/// Options for `posenc::functional::rotary_tables`.
struct RotaryTablesFuncOptions {
  /// Base of the frequencies. Default: 10000.
  TORCH_ARG(double, base) = 10000.0;
  /// Long-context scaling. Default: none.
  TORCH_ARG(RopeScalingOptions, scaling) = RopeScalingOptions();
  /// dynamic and longrope: the length of the call the frequencies serve (its last position + 1).
  /// Default: unset, the frequencies of calls within the model's context (HF's at
  /// initialisation: the plain base for dynamic, the short factors for longrope).
  TORCH_ARG(c10::optional<int64_t>, seq_len) = c10::nullopt;
  /// Per-frequency divisors applied after the scaling; empty or R/2 values. Default: none.
  TORCH_ARG(std::vector<double>, freq_factors);
  /// Whether cos and sin carry the variant's attention factor. Default: true.
  TORCH_ARG(bool, attention_factor_in_cos_sin) = true;
  /// dtype of the tables; values are computed in float64 and rounded once. Default: float32.
  TORCH_ARG(torch::Dtype, dtype) = torch::kFloat;
  /// Device of the tables. Default: CPU.
  TORCH_ARG(torch::Device, device) = torch::kCPU;
};

/// Options for `posenc::functional::rotary_embedding`.
struct RotaryEmbeddingFuncOptions {
  /// Position of the first element along the sequence dimension. Default: 0.
  TORCH_ARG(int64_t, offset) = 0;
  /// Explicit int64 positions, `[B, L]` or `[L]`; -1 marks padding (not rotated). When defined,
  /// `offset` must be 0. Default: undefined.
  TORCH_ARG(torch::Tensor, positions) = torch::Tensor();
  /// Channel pairing. Default: kHalfSplit.
  TORCH_ARG(RotaryPairing, pairing) = RotaryPairing::kHalfSplit;
  /// `false`: `[B, L, H, Dh]`; `true`: `[B, H, L, Dh]`. Default: `false`.
  TORCH_ARG(bool, heads_first) = false;
  /// Turns by -theta (RotaryEmbeddingOptions::inverse). Default: `false`.
  TORCH_ARG(bool, inverse) = false;
};

/// Options for the functional KV-cache writes (`posenc::functional::rotary_kv_cache_`,
/// `rotary_paged_kv_cache_` and their out-of-place forms).
struct KvCacheFuncOptions {
  /// The rotation's positions when they are not the cache slots (contiguous caches: `[B, L]` or
  /// `[L]`, HF's position_ids of a left-padded batch); the paged forms take theirs as an
  /// argument and ignore this. Default: undefined (the slots).
  TORCH_ARG(torch::Tensor, positions) = torch::Tensor();
  /// Channel pairing. Default: kHalfSplit.
  TORCH_ARG(RotaryPairing, pairing) = RotaryPairing::kHalfSplit;
  /// Contiguous caches: `true` takes q, k, v as `[B, H, L, D]`. Default: `false`.
  TORCH_ARG(bool, heads_first) = false;
  /// `true`: the caches are `[B, H_kv, S, D]` (paged: FlashInfer's HND `[num_blocks, H_kv,
  /// block_size, D]`). Default: `false`.
  TORCH_ARG(bool, cache_heads_first) = false;
  /// The float64 frequencies `[R/2]` that compute rows past the caches (ops::apply_rotary).
  /// Default: undefined (positions must lie in the caches).
  TORCH_ARG(torch::Tensor, inv_freq) = torch::Tensor();
  /// The factor cos/sin carry, for the rows computed from `inv_freq`. Default: 1.
  TORCH_ARG(double, attention_factor) = 1.0;
};

/// Options for `posenc::functional::mrope_position_ids`: a multimodal batch's grids and how its
/// model numbers them.
struct MRopePositionIdsFuncOptions {
  /// `[N, 3]` integers: each image's temporal, height and width patches before merging, in the
  /// order of the images' tokens. Default: undefined (no images).
  TORCH_ARG(torch::Tensor, image_grid_thw) = torch::Tensor();
  /// `[N, 3]` integers: each video's grid, as `image_grid_thw`. Default: undefined (no videos).
  TORCH_ARG(torch::Tensor, video_grid_thw) = torch::Tensor();
  /// `[B, L]`: tokens where it is 0 are left out of the numbering and get position 0. Default:
  /// undefined (every token).
  TORCH_ARG(torch::Tensor, attention_mask) = torch::Tensor();
  /// The vision encoder's merge of `m * m` patches into one token. Default: 2.
  TORCH_ARG(int64_t, spatial_merge_size) = 2;
  /// Each video's temporal spacing (Qwen2.5-VL: `tokens_per_second * second_per_grid_ts`).
  /// Default: unset (1, Qwen2-VL's).
  TORCH_ARG(c10::optional<std::vector<double>>, video_time_intervals) = c10::nullopt;
  /// Each frame of a video is a grid of its own (Qwen3-VL and Qwen3.5, whose frames are separated
  /// by timestamp tokens). Default: `false`.
  TORCH_ARG(bool, frames_apart) = false;
};

} // namespace functional
} // namespace posenc
