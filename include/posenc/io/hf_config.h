#pragma once

/// Rotary embedding options from a Hugging Face `config.json`, as transformers reads them
/// (`modeling_rope_utils.py`, transformers 4 and 5).
///
/// Part of the `posenc::io` library (JSON parsed with nlohmann-json), not included by
/// `<posenc/posenc.h>`: link `posenc::io` and include this header to use it.

#include <posenc/options/rotary_embedding.h>

#include <cstdint>
#include <string>

namespace posenc {
namespace io {

/// What a model's `config.json` says about its attention heads and rotary embedding.
struct HfRopeConfig {
  /// head_dim (`head_dim`, else hidden_size / num_attention_heads), max_len =
  /// max_position_embeddings, base = rope_theta, rotary_dim = int(head_dim *
  /// partial_rotary_factor), and the scaling of `rope_parameters` / `rope_scaling`.
  RotaryEmbeddingOptions options{2, 1};
  /// The config's `num_attention_heads`.
  int64_t num_attention_heads = 0;
  /// The config's `num_key_value_heads` (= num_attention_heads when absent).
  int64_t num_key_value_heads = 0;
};

/// Reads the rotary embedding of a `config.json` given as text. Both forms are understood:
/// transformers 4's `rope_theta` + `rope_scaling: {"type" | "rope_type": ..., ...}` and
/// transformers 5's `rope_parameters: {"rope_type": ..., "rope_theta": ..., ...}`; a
/// vision-language config's `text_config` is read when the top level has no attention heads.
/// rope types: default, linear, dynamic, yarn, longrope, llama3, proportional (posenc's table of
/// rope types; for proportional the rotated width is the whole head and partial_rotary_factor
/// the share of its pairs that turn), with transformers' parameter names and defaults (yarn:
/// beta_fast 32, beta_slow 1, truncate true; longrope/yarn without a factor:
/// max_position_embeddings / original_max_position_embeddings). Settings given twice are read
/// with transformers 5.23's precedence: a non-empty `rope_scaling` wins over `rope_parameters`;
/// `rope_type` over `type`; `rope_theta` and `partial_rotary_factor` inside the block over those
/// beside it; a top-level `original_max_position_embeddings` over the block's (Phi-3's configs
/// need it); `head_dim` over hidden_size / num_attention_heads. Multimodal RoPE:
/// `mrope_section` (Qwen2-VL, Qwen2.5-VL; transformers 4's type "mrope" is the default
/// frequencies) and `mrope_interleaved` (Qwen3-VL) fill the options' mrope fields.
///
/// Throws a `c10::Error` that names the field for malformed JSON, missing or ill-typed fields,
/// unknown rope types and per-layer rope parameters.
HfRopeConfig read_hf_rope_config(const std::string& json_text,
                                 const std::string& source = "config.json");

/// `read_hf_rope_config` of the file at `path`.
HfRopeConfig read_hf_rope_config_file(const std::string& path);

} // namespace io
} // namespace posenc
