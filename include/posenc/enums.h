#pragma once

/// Enumerations shared by posenc's options.

#include <array>
#include <ostream>

namespace posenc {

/// How the sine and cosine columns of a sinusoidal encoding are arranged.
enum class ChannelLayout {
  /// sin, cos, sin, cos, ... (the paper, and the usual PyTorch module): column 2i is a sine and
  /// column 2i + 1 a cosine of frequency i. For an odd width the last column is a sine.
  kInterleaved,
  /// [sin ... | cos ...] (tensor2tensor, fairseq, HF Marian/BART): the first ceil(D/2) columns are
  /// sines, the rest cosines of the same frequencies.
  kConcatenated,
};

/// How the frequencies of a sinusoidal encoding are spaced.
enum class FrequencySpacing {
  /// The paper's base^(-2i / d_model), i = 0 .. ceil(d_model / 2) - 1.
  kPaper,
  /// tensor2tensor's get_timing_signal_1d and fairseq's SinusoidalPositionalEmbedding:
  /// base^(-i / max(h - 1, 1)) with h = floor(d_model / 2) frequencies; for an odd width the last
  /// column is zero.
  kTensor2Tensor,
};

/// What a module does with positions at or past `max_len`.
enum class BeyondMaxLen {
  /// Raise a c10::Error that names the positions and max_len (the default).
  kError,
  /// Compute the encodings of those positions on the fly, in double precision, with the same
  /// formula and rounding as the table (so the values are identical to a larger table). The
  /// buffer never changes shape, so state dicts stay stable. Sinusoidal and rotary modules only.
  kExtrapolate,
};

/// How rotary embeddings pair the channels they rotate.
enum class RotaryPairing {
  /// Channel i pairs with channel i + R/2 of the rotated part (GPT-NeoX, HF LLaMA's rotate_half).
  kHalfSplit,
  /// Channel 2i pairs with 2i + 1 (GPT-J, torchtune, the RoFormer paper).
  kInterleaved,
};

/// The 2-D interpolation of a resampled position table (PyTorch's interpolate modes).
enum class Interpolation {
  /// Bicubic (timm's default for ViT position tables).
  kBicubic,
  kBilinear,
  kNearest,
};

/// Which coordinate comes first for each token of a 2-D grid (timm's `grid_indexing`, as in
/// torch.meshgrid).
enum class GridIndexing {
  /// (row, column): the first axis of the grid shape first (timm's default; EVA-02).
  kIJ,
  /// (column, row): the second axis first.
  kXY,
};

/// How a rotary embedding's frequencies are derived from `base` (the `rope_type` of Hugging Face
/// transformers' `rope_parameters`; every variant's parameters are in RopeScalingOptions).
enum class RopeType {
  /// base^(-2i / R): the RoFormer paper, LLaMA 1/2, Mistral, Qwen 2.5 without scaling.
  kDefault,
  /// Position interpolation (Chen et al., "kaiokendev"): every frequency divided by `factor`.
  kLinear,
  /// Dynamic NTK-aware scaling: the base grows with the length of the call past
  /// `max_position_embeddings` (frequencies then depend on the call, see RotaryEmbeddingOptions).
  kDynamic,
  /// YaRN (Peng et al.): interpolation for long wavelengths, extrapolation for short ones, a
  /// linear ramp between, and an attention factor (Qwen 2.5/3 long context, DeepSeek V2/V3).
  kYarn,
  /// LongRoPE (Phi-3/3.5/4): per-frequency factors, short below `original_max_position_embeddings`,
  /// long past it, and an attention factor.
  kLongRope,
  /// LLaMA 3.1's smooth interpolation between the long (divided by `factor`) and short
  /// (unchanged) wavelengths.
  kLlama3,
  /// Gemma 4's proportional RoPE: the whole head is the rotated width, its first
  /// int(partial_rotary_factor * R // 2) pairs turn with base^(-2i / R) / factor, the others not
  /// at all (frequency 0).
  kProportional,
  /// NTK-aware scaling with a fixed `alpha` (Tencent Hunyuan: configs that say "dynamic" with an
  /// `alpha`, which transformers' Hunyuan models read as this type): the base becomes
  /// base * alpha^(R / (R - 2)) for every call, whatever its length; no attention factor.
  kNtkAlpha,
};

/// Which positions TokenAndPositionEmbedding adds.
enum class PositionKind {
  /// The fixed sinusoidal encoding (PositionalEncoding).
  kSinusoidal,
  /// A trainable table (LearnedPositionalEmbedding).
  kLearned,
};

/// Which model's query temperature AttentionTemperature computes (p: a token's position, f:
/// `floor_scale`, a: `attn_scale`).
enum class AttentionTemperatureForm {
  /// Llama 4's `attn_temperature_tuning`, in its layers without rotary:
  /// `log1p(floor((p + 1) / f)) * a + 1`, multiplied in float32 (at least) and rounded once to the
  /// query's dtype.
  kLlama4,
  /// Ministral 3's and Mistral 4's `llama_4_scaling_beta` (a), in every layer, after the rotation:
  /// `1 + a * log(1 + floor(p / f))` with f their `original_max_position_embeddings`, rounded to
  /// the query's dtype before the product.
  kMinistral3,
};

/// A value of an enumeration and its name.
template <typename E>
struct EnumName {
  /// The name, as posenc.nn, the JSON options and the program spell it.
  const char* name;
  /// The value it names.
  E value;
};

/// The names of an enumeration's values, once: posenc.nn's keyword values, the JSON options of
/// the operators, the program's flags, `pretty_print` and `operator<<` all read this table
/// (specialised below for each enumeration; RopeType's names are its rope types' table).
template <typename E>
struct EnumNames;

/// The names of ChannelLayout's values.
template <>
struct EnumNames<ChannelLayout> {
  /// Every value with its name, in declaration order.
  static constexpr std::array<EnumName<ChannelLayout>, 2> values{
      {{"interleaved", ChannelLayout::kInterleaved},
       {"concatenated", ChannelLayout::kConcatenated}}};
};
/// The names of FrequencySpacing's values.
template <>
struct EnumNames<FrequencySpacing> {
  /// Every value with its name, in declaration order.
  static constexpr std::array<EnumName<FrequencySpacing>, 2> values{
      {{"paper", FrequencySpacing::kPaper}, {"tensor2tensor", FrequencySpacing::kTensor2Tensor}}};
};
/// The names of BeyondMaxLen's values.
template <>
struct EnumNames<BeyondMaxLen> {
  /// Every value with its name, in declaration order.
  static constexpr std::array<EnumName<BeyondMaxLen>, 2> values{
      {{"error", BeyondMaxLen::kError}, {"extrapolate", BeyondMaxLen::kExtrapolate}}};
};
/// The names of RotaryPairing's values.
template <>
struct EnumNames<RotaryPairing> {
  /// Every value with its name, in declaration order.
  static constexpr std::array<EnumName<RotaryPairing>, 2> values{
      {{"half_split", RotaryPairing::kHalfSplit}, {"interleaved", RotaryPairing::kInterleaved}}};
};
/// The names of Interpolation's values.
template <>
struct EnumNames<Interpolation> {
  /// Every value with its name, in declaration order.
  static constexpr std::array<EnumName<Interpolation>, 3> values{
      {{"bicubic", Interpolation::kBicubic},
       {"bilinear", Interpolation::kBilinear},
       {"nearest", Interpolation::kNearest}}};
};
/// The names of GridIndexing's values.
template <>
struct EnumNames<GridIndexing> {
  /// Every value with its name, in declaration order.
  static constexpr std::array<EnumName<GridIndexing>, 2> values{
      {{"ij", GridIndexing::kIJ}, {"xy", GridIndexing::kXY}}};
};
/// The names of PositionKind's values.
template <>
struct EnumNames<PositionKind> {
  /// Every value with its name, in declaration order.
  static constexpr std::array<EnumName<PositionKind>, 2> values{
      {{"sinusoidal", PositionKind::kSinusoidal}, {"learned", PositionKind::kLearned}}};
};
/// The names of AttentionTemperatureForm's values.
template <>
struct EnumNames<AttentionTemperatureForm> {
  /// Every value with its name, in declaration order.
  static constexpr std::array<EnumName<AttentionTemperatureForm>, 2> values{
      {{"llama4", AttentionTemperatureForm::kLlama4},
       {"ministral3", AttentionTemperatureForm::kMinistral3}}};
};

/// The name of `value` in its enumeration's table (EnumNames), e.g. "interleaved".
template <typename E>
const char* enum_name(E value) {
  for (const EnumName<E>& entry : EnumNames<E>::values) {
    if (entry.value == value) {
      return entry.name;
    }
  }
  return "unknown";
}

/// Writes the name of `layout`, "interleaved" or "concatenated", to `stream`; returns `stream`.
inline std::ostream& operator<<(std::ostream& stream, ChannelLayout layout) {
  return stream << enum_name(layout);
}
/// Writes the name of `spacing`, "paper" or "tensor2tensor", to `stream`; returns `stream`.
inline std::ostream& operator<<(std::ostream& stream, FrequencySpacing spacing) {
  return stream << enum_name(spacing);
}
/// Writes the name of `policy`, "error" or "extrapolate", to `stream`; returns `stream`.
inline std::ostream& operator<<(std::ostream& stream, BeyondMaxLen policy) {
  return stream << enum_name(policy);
}
/// Writes the name of `kind`, "sinusoidal" or "learned", to `stream`; returns `stream`.
inline std::ostream& operator<<(std::ostream& stream, PositionKind kind) {
  return stream << enum_name(kind);
}
/// transformers' name of `type` (`rope_parameters.rope_type`), from posenc's table of rope types.
const char* rope_type_name(RopeType type);
/// Writes `rope_type_name(type)` (e.g. "llama3") to `stream`; returns `stream`.
inline std::ostream& operator<<(std::ostream& stream, RopeType type) {
  return stream << rope_type_name(type);
}
/// The operator's name of a temperature form: "llama4" or "ministral3".
inline const char* attention_temperature_form_name(AttentionTemperatureForm form) {
  return enum_name(form);
}
/// Writes `attention_temperature_form_name(form)` to `stream`; returns `stream`.
inline std::ostream& operator<<(std::ostream& stream, AttentionTemperatureForm form) {
  return stream << enum_name(form);
}
/// Writes the name of `pairing`, "half_split" or "interleaved", to `stream`; returns `stream`.
inline std::ostream& operator<<(std::ostream& stream, RotaryPairing pairing) {
  return stream << enum_name(pairing);
}
/// The operators' name of an interpolation: "bicubic", "bilinear", "nearest".
inline const char* interpolation_name(Interpolation mode) {
  return enum_name(mode);
}
/// Writes `interpolation_name(mode)` to `stream`; returns `stream`.
inline std::ostream& operator<<(std::ostream& stream, Interpolation mode) {
  return stream << enum_name(mode);
}
/// The operators' name of a grid indexing: "ij" or "xy".
inline const char* grid_indexing_name(GridIndexing indexing) {
  return enum_name(indexing);
}
/// Writes `grid_indexing_name(indexing)` to `stream`; returns `stream`.
inline std::ostream& operator<<(std::ostream& stream, GridIndexing indexing) {
  return stream << enum_name(indexing);
}

} // namespace posenc
