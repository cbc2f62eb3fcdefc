#pragma once

#include <posenc/enums.h>
#include <posenc/options/fields.h>

#include <torch/arg.h>

#include <c10/util/Optional.h>

#include <cstddef>
#include <cstdint>
#include <tuple>

namespace posenc {

/// Options for the `ALiBi` module (attention with linear biases: BLOOM, MPT, Baichuan).
///
/// Example:
/// ```
/// // heads 8 .. 15 of a 32-head model (tensor parallelism over 4 ranks, this is rank 1)
/// posenc::ALiBi alibi(posenc::ALiBiOptions(32).first_head(8).heads(8));
/// ```
struct ALiBiOptions {
  /// Options for a model of `num_heads` heads, the others at their defaults (implicit, so
  /// `posenc::ALiBi alibi(8)` works).
  /* implicit */ ALiBiOptions(int64_t num_heads);

  /// The model's number of attention heads `H` (>= 1): the slopes depend on it.
  TORCH_ARG(int64_t, num_heads);
  /// Largest bias exponent: the first 2^floor(log2 H) slopes are 2^(-max_bias k / n). Default: 8.
  TORCH_ARG(double, max_bias) = 8.0;
  /// First head of this module's shard of the heads. Default: 0.
  TORCH_ARG(int64_t, first_head) = 0;
  /// Number of heads of the shard. Default: all heads from `first_head`.
  TORCH_ARG(c10::optional<int64_t>, heads) = c10::nullopt;
};

/// The field table of ALiBiOptions (<posenc/options/fields.h>).
template <>
struct OptionTable<ALiBiOptions> {
  /// The constructor's arguments: num_heads.
  static constexpr std::size_t kConstructorArguments = 1;
  /// The options, in the order pretty_print shows them and posenc.nn's keywords are read.
  static auto fields() {
    using O = ALiBiOptions;
    return std::make_tuple(POSENC_OPTION_FIELD(O, num_heads, kShowAlways),
                           POSENC_OPTION_FIELD(O, max_bias, kShowIfChanged),
                           POSENC_OPTION_FIELD(O, first_head, kShowNever),
                           POSENC_OPTION_FIELD(O, heads, kShowNever | kNullable));
  }
};

/// Options for the `AttentionTemperature` module: a query temperature that grows with the
/// position, Llama 4's (`attn_temperature_tuning`, `floor_scale`, `attn_scale`: its layers
/// without rotary) or Ministral 3's and Mistral 4's (`rope_parameters.llama_4_scaling_beta` and
/// `original_max_position_embeddings`: every layer).
///
/// Example:
/// ```
/// posenc::AttentionTemperature temperature(
///     posenc::AttentionTemperatureOptions().floor_scale(8192).attn_scale(0.1));
/// ```
struct AttentionTemperatureOptions {
  /// Positions are counted in steps of `floor_scale` (finite, >= 2^-62 so that the float32
  /// quotient of every int64 position stays finite; Ministral 3:
  /// `original_max_position_embeddings`). Default: 8192 (Llama 4's).
  TORCH_ARG(double, floor_scale) = 8192.0;
  /// The weight of the logarithm (|attn_scale| <= float32's largest value / 128, so that the
  /// float32 scales stay finite; Ministral 3: `llama_4_scaling_beta`). Default: 0.1 (Llama 4's).
  TORCH_ARG(double, attn_scale) = 0.1;
  /// The formula: Llama 4's `log1p(floor((p + 1) / floor_scale)) * attn_scale + 1` or Ministral
  /// 3's `1 + attn_scale * log(1 + floor(p / floor_scale))` (AttentionTemperatureForm).
  /// Default: Llama 4's.
  TORCH_ARG(AttentionTemperatureForm, form) = AttentionTemperatureForm::kLlama4;
  /// `true`: queries are `[B, H, L, head_dim]` (Ministral 3's layout where it scales them);
  /// `false`: `[B, L, H, head_dim]` (Llama 4's, before the heads are moved forward). Default:
  /// `false`.
  TORCH_ARG(bool, heads_first) = false;
};

/// The field table of AttentionTemperatureOptions (<posenc/options/fields.h>).
template <>
struct OptionTable<AttentionTemperatureOptions> {
  /// The constructor takes no argument.
  static constexpr std::size_t kConstructorArguments = 0;
  /// The options, in the order pretty_print shows them and posenc.nn's keywords are read.
  static auto fields() {
    using O = AttentionTemperatureOptions;
    return std::make_tuple(POSENC_OPTION_FIELD(O, form, kTorchScript),
                           POSENC_OPTION_FIELD(O, floor_scale, kTorchScript),
                           POSENC_OPTION_FIELD(O, attn_scale, kTorchScript),
                           POSENC_OPTION_FIELD(O, heads_first, kTorchScript));
  }
};

/// Options for the `RelativePositionBias` module (T5, mT5, Flan-T5, UL2, LongT5).
///
/// Example:
/// ```
/// posenc::RelativePositionBias bias(posenc::RelativePositionBiasOptions(/*num_heads=*/12));
/// ```
struct RelativePositionBiasOptions {
  /// Options for `num_heads` heads, the others at their defaults (implicit).
  /* implicit */ RelativePositionBiasOptions(int64_t num_heads);

  /// Number of attention heads `H` (>= 1): one learned bias per bucket and head.
  TORCH_ARG(int64_t, num_heads);
  /// Number of relative-position buckets (T5's `relative_attention_num_buckets`). Default: 32.
  TORCH_ARG(int64_t, num_buckets) = 32;
  /// Distance from which every relative position shares the last bucket (T5's
  /// `relative_attention_max_distance`, >= num_buckets). Default: 128.
  TORCH_ARG(int64_t, max_distance) = 128;
  /// `true`: keys before and after a query have their own buckets (encoder); `false`: keys after
  /// the query share bucket 0 (decoder self-attention, T5's `is_decoder`). Default: `true`.
  TORCH_ARG(bool, bidirectional) = true;
};

/// The field table of RelativePositionBiasOptions (<posenc/options/fields.h>).
template <>
struct OptionTable<RelativePositionBiasOptions> {
  /// The constructor's arguments: num_heads.
  static constexpr std::size_t kConstructorArguments = 1;
  /// The options, in the order pretty_print shows them and posenc.nn's keywords are read.
  static auto fields() {
    using O = RelativePositionBiasOptions;
    return std::make_tuple(POSENC_OPTION_FIELD(O, num_heads, kShowAlways),
                           POSENC_OPTION_FIELD(O, num_buckets, kShowAlways),
                           POSENC_OPTION_FIELD(O, max_distance, kTorchScript),
                           POSENC_OPTION_FIELD(O, bidirectional, kShowAlways));
  }
};

/// Options for the `RelPositionalEncoding` module (Transformer-XL / Conformer relative
/// sinusoidal encoding, ESPnet's `RelPositionalEncoding` and WeNet's / ESPnet's legacy variant).
///
/// Example:
/// ```
/// posenc::RelPositionalEncoding pos(posenc::RelPositionalEncodingOptions(256).dropout(0.1));
/// auto [x_scaled, pos_emb] = pos(x);   // pos_emb: [1, 2L - 1, 256]
/// ```
struct RelPositionalEncodingOptions {
  /// Options for width `d_model`, the others at their defaults (implicit).
  /* implicit */ RelPositionalEncodingOptions(int64_t d_model);

  /// Width `D` of the inputs and of the encoding (>= 1).
  TORCH_ARG(int64_t, d_model);
  /// Longest sequence (queries + cached keys) the table covers. Default: 5000 (ESPnet's).
  TORCH_ARG(int64_t, max_len) = 5000;
  /// Probability of zeroing an element of both outputs in training mode, in [0, 1]. Default: 0.
  TORCH_ARG(double, dropout) = 0.0;
  /// Multiply the input by sqrt(d_model) (ESPnet's `xscale`). Default: `true`.
  TORCH_ARG(bool, scale_input) = true;
  /// `true`: the legacy variant (ESPnet's `LegacyRelPositionalEncoding`, WeNet's
  /// `RelPositionalEncoding`): the encoding of the absolute positions `offset .. offset + L - 1`,
  /// `[1, L, D]`. `false`: the table of relative positions `offset + L - 1 .. -(L - 1)`,
  /// `[1, offset + 2L - 1, D]`. Default: `false`.
  TORCH_ARG(bool, legacy) = false;
  /// Base of the geometric frequencies. Default: 10000.
  TORCH_ARG(double, base) = 10000.0;
};

/// The field table of RelPositionalEncodingOptions (<posenc/options/fields.h>).
template <>
struct OptionTable<RelPositionalEncodingOptions> {
  /// The constructor's arguments: d_model.
  static constexpr std::size_t kConstructorArguments = 1;
  /// The options, in the order pretty_print shows them and posenc.nn's keywords are read.
  static auto fields() {
    using O = RelPositionalEncodingOptions;
    return std::make_tuple(POSENC_OPTION_FIELD(O, d_model, kTorchScript),
                           POSENC_OPTION_FIELD(O, max_len, kTorchScript),
                           POSENC_OPTION_FIELD(O, dropout, kShowIfChanged),
                           POSENC_OPTION_FIELD(O, scale_input, kShowIfChanged),
                           POSENC_OPTION_FIELD(O, legacy, kShowIfChanged | kTorchScript),
                           POSENC_OPTION_FIELD(O, base, kShowIfChanged));
  }
};

/// Options for the `RelPositionMultiheadAttention` module (ESPnet's
/// `RelPositionMultiHeadedAttention`, `Wav2Vec2ConformerSelfAttention` with relative positions).
///
/// Example:
/// ```
/// posenc::RelPositionMultiheadAttention attn(
///     posenc::RelPositionMultiheadAttentionOptions(/*embed_dim=*/256, /*num_heads=*/4));
/// ```
struct RelPositionMultiheadAttentionOptions {
  /// Options for width `embed_dim` split over `num_heads` heads; dropout at its default.
  RelPositionMultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads);

  /// Model width `D` (a multiple of `num_heads`).
  TORCH_ARG(int64_t, embed_dim);
  /// Number of heads `H` (>= 1).
  TORCH_ARG(int64_t, num_heads);
  /// Dropout on the attention weights in training mode, in [0, 1]. Default: 0.
  TORCH_ARG(double, dropout) = 0.0;
};

/// The field table of RelPositionMultiheadAttentionOptions (<posenc/options/fields.h>).
template <>
struct OptionTable<RelPositionMultiheadAttentionOptions> {
  /// The constructor's arguments: embed_dim and num_heads.
  static constexpr std::size_t kConstructorArguments = 2;
  /// The options, in the order pretty_print shows them and posenc.nn's keywords are read.
  static auto fields() {
    using O = RelPositionMultiheadAttentionOptions;
    return std::make_tuple(POSENC_OPTION_FIELD(O, embed_dim, kTorchScript),
                           POSENC_OPTION_FIELD(O, num_heads, kTorchScript),
                           POSENC_OPTION_FIELD(O, dropout, kShowAlways));
  }
};

} // namespace posenc
