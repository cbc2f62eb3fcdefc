#pragma once

/// Rotary embedding options from a Hugging Face `config.json`, as transformers reads them
/// (`modeling_rope_utils.py`, transformers 4 and 5).
///
/// Part of the `posenc::io` library (JSON parsed with nlohmann-json), not included by
/// `<posenc/posenc.h>`: link `posenc::io` and include this header to use it.

#include <posenc/options/attention_bias.h>
#include <posenc/options/rotary_embedding.h>

#include <c10/util/Optional.h>

#include <cstdint>
#include <string>
#include <vector>

namespace posenc {
namespace io {

/// How `read_hf_rope_config` treated one key of a `config.json` that bears on positions: an entry
/// of the audit (`posenc rope --audit`).
struct HfConfigKey {
  /// What the reader did with the key.
  enum class Status {
    /// Read into the options (`reason`: what it set).
    kUsed,
    /// Absent or null: a default was taken (`value`: the default; `reason`: whose).
    kDefault,
    /// Present but not applied (`reason`: another key wins, the rope type does not read it, or a
    /// model's own rule that posenc does not apply).
    kIgnored,
    /// In the rope parameters, but neither posenc nor a rope type of transformers reads it.
    kUnknown,
  };
  /// The key as the file spells it, with its block: "rope_parameters.factor",
  /// "text_config.head_dim".
  std::string key;
  /// What the reader did with it.
  Status status = Status::kUsed;
  /// The value as JSON (for kDefault: the default taken; "" where there is none to show).
  std::string value;
  /// Why: what the key set, whose default was taken, or why it was not applied.
  std::string reason;
};

/// "used", "default", "ignored" or "unknown".
const char* to_string(HfConfigKey::Status status);

/// How read_hf_rope_config reads.
struct HfConfigReadOptions {
  /// Keys that change the rotation but that posenc does not apply (unknown rope parameters, a
  /// model's own rules such as `rope_local_base_freq` or `qk_rope_head_dim`) are a c10::Error
  /// instead of a warning (TORCH_WARN).
  bool strict = false;
  /// The layer whose rotary embedding is read (0-based; its type from the config's
  /// `layer_types`): needed where `rope_parameters` holds one set per layer type (Gemma 3/3n/4,
  /// OLMo 3, ModernBERT). Unset: the config must have one set for all layers.
  c10::optional<int64_t> layer;
  /// The layer type whose rope parameters are read ("full_attention", "sliding_attention"), as an
  /// alternative to `layer` (both: they must agree). Empty: from `layer`.
  std::string layer_type;
};

/// What a model's `config.json` says about its attention heads and rotary embedding.
struct HfRopeConfig {
  /// head_dim (`head_dim`, else hidden_size / num_attention_heads; MLA: `qk_rope_head_dim`),
  /// max_len = max_position_embeddings, base = rope_theta, rotary_dim = int(head_dim *
  /// partial_rotary_factor), and the scaling of `rope_parameters` / `rope_scaling`: the rotary
  /// embedding of the layers that rotate.
  RotaryEmbeddingOptions options{2, 1};
  /// Which layers rotate (`no_rope_layers`, 1 = rotary as in transformers, or one layer in
  /// `no_rope_layer_interval` without; SmolLM3, Llama 4, Mistral Large 3); empty: every layer.
  std::vector<bool> rotary_layers;
  /// false: the layer asked for (HfConfigReadOptions::layer) has no rotary; its attention takes
  /// no positions, and `options` are those of the layers that rotate.
  bool rotates = true;
  /// The query temperature (AttentionTemperature) of the layer read: Llama 4's
  /// `attn_temperature_tuning` (on by default for its model types; `floor_scale`, `attn_scale`),
  /// which its code applies in the layers without rotary, so set where the layer asked for has
  /// none or where no layer was asked for (`rotary_layers` says which layers take it); or
  /// Ministral 3's and Mistral 4's `rope_parameters.llama_4_scaling_beta`, applied in every
  /// layer after the rotation (`heads_first`: their code scales `[B, H, L, D]` queries). With a
  /// layer type only (HfConfigReadOptions::layer_type), Llama 4's is set where every layer of
  /// that type lacks rotary. Unset: the queries are not scaled by position.
  c10::optional<AttentionTemperatureOptions> attention_temperature;
  /// The config's `num_attention_heads`.
  int64_t num_attention_heads = 0;
  /// The config's `num_key_value_heads` (= num_attention_heads when absent).
  int64_t num_key_value_heads = 0;
  /// Every key that bears on positions, in the order read: used, defaulted, ignored or unknown,
  /// and why. Keys that change the rotation and are not applied are also warned about (or refused
  /// with HfConfigReadOptions::strict).
  std::vector<HfConfigKey> audit;
  /// The config's `layer_types` (the attention type of each layer; empty when absent).
  std::vector<std::string> layer_types;
  /// The layer type whose rope parameters were read (HfConfigReadOptions::layer or layer_type);
  /// empty when none was asked for.
  std::string layer_type;
};

/// Reads the rotary embedding of a `config.json` given as text. Both forms are understood:
/// transformers 4's `rope_theta` + `rope_scaling: {"type" | "rope_type": ..., ...}` and
/// transformers 5's `rope_parameters: {"rope_type": ..., "rope_theta": ..., ...}`; a
/// vision-language config's `text_config` (an omni model's `thinker_config.text_config`) is read
/// when the top level has no attention heads.
/// rope types: default, linear, dynamic, yarn, longrope, llama3, proportional, ntk_alpha (posenc's
/// table of rope types; for proportional the rotated width is the whole head and
/// partial_rotary_factor the share of its pairs that turn), with transformers' parameter names and
/// defaults (yarn: beta_fast 32, beta_slow 1, truncate true; longrope/yarn without a factor:
/// max_position_embeddings / original_max_position_embeddings). Settings given twice are read
/// with transformers 5.23's precedence: a non-empty `rope_scaling` wins over `rope_parameters`;
/// `rope_type` over `type`; `rope_theta` and `partial_rotary_factor` inside the block over those
/// beside it; a top-level `original_max_position_embeddings` over the block's (Phi-3's configs
/// need it); `head_dim` over hidden_size / num_attention_heads. Multimodal RoPE:
/// `mrope_section` (Qwen2-VL, Qwen2.5-VL; transformers 4's type "mrope" is the default
/// frequencies) and `mrope_interleaved` (Qwen3-VL) fill the options' mrope fields (ERNIE 4.5-VL's
/// (height, width, time) sections: mrope_hw_alternating). The pairing is
/// halves (i, i + D/2) except for the model types whose code turns (2i, 2i + 1) together and that
/// are tested against it (BLT, Cohere, ERNIE 4.5, GLM, GLM-4.1V, Helium, ...), and MLA models
/// (`qk_rope_head_dim`) rotate their rope parts, regrouped from pairs (2i, 2i + 1) into halves
/// where their code does it (RotaryEmbeddingOptions::deinterleave). DeepSeek-V4's heads turn
/// their last head_dim * partial_rotary_factor channels, pairs (2i, 2i + 1)
/// (RotaryEmbeddingOptions::rotate_last_channels). Hunyuan (hunyuan_v1_dense,
/// hunyuan_v1_moe, hunyuan_vl): rope type "dynamic" with an `alpha` is read as their code reads
/// it, the fixed NTK-alpha type (RopeType::kNtkAlpha). docs/rope_models.md lists every model type
/// of transformers 5.23.0 with a rotary embedding and what the reader does with it.
///
/// Query temperatures by position are read into `attention_temperature`: Llama 4's
/// `attn_temperature_tuning` (its layers without rotary) and Ministral 3's and Mistral 4's
/// `llama_4_scaling_beta` (every layer).
///
/// Per-layer-type rope parameters (transformers 5's `rope_parameters: {"full_attention": {...},
/// "sliding_attention": {...}}`) are read for the layer or layer type `read` names. Layers
/// without rotary (`no_rope_layers`) are listed in `rotary_layers`; a layer asked for that does
/// not rotate gives `rotates` false.
///
/// Throws a `c10::Error` that names the field for malformed JSON, missing or ill-typed fields,
/// unknown rope types, and per-layer-type rope parameters without a layer or layer type. Keys it
/// cannot apply that change the rotation (an unknown rope parameter; a model's own rule:
/// `rope_local_base_freq`, `rotary_pct`, ...) give one warning naming
/// them, or with `read.strict` an error; `HfRopeConfig::audit` lists every key that bears on
/// positions.
HfRopeConfig read_hf_rope_config(const std::string& json_text,
                                 const std::string& source = "config.json",
                                 const HfConfigReadOptions& read = {});

/// `read_hf_rope_config` of the file at `path`.
HfRopeConfig read_hf_rope_config_file(const std::string& path,
                                      const HfConfigReadOptions& read = {});

} // namespace io
} // namespace posenc
