#include <posenc/io/hf_config.h>

#include "detail/attention_bias.h"
#include "detail/checks.h"
#include "detail/json_text.h"
#include "detail/rope_parameters.h"
#include "detail/rope_types.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace posenc {
namespace io {
namespace {

using nlohmann::json;

// The JSON value of `key` in `object`, or null when absent (HF treats both alike).
const json& field(const json& object, const char* key) {
  static const json null_value;
  const auto found = object.find(key);
  return found == object.end() ? null_value : *found;
}

const char* type_name(const json& value) {
  return value.type_name();
}

// A field that is a number, or unset when absent or null.
c10::optional<double> number(const std::string& source, const json& object, const char* key,
                             const char* where) {
  const json& value = field(object, key);
  if (value.is_null()) {
    return c10::nullopt;
  }
  TORCH_CHECK(value.is_number(), source, ": ", where, key, " must be a number, but is a ",
              type_name(value));
  const double result = value.get<double>();
  TORCH_CHECK(std::isfinite(result), source, ": ", where, key, " must be finite, but is ", result);
  return result;
}

// A field that is a whole number, or unset when absent or null.
c10::optional<int64_t> integer(const std::string& source, const json& object, const char* key,
                               const char* where) {
  const c10::optional<double> value = number(source, object, key, where);
  if (!value) {
    return c10::nullopt;
  }
  TORCH_CHECK(std::floor(*value) == *value, source, ": ", where, key,
              " must be a whole number, but is ", *value);
  TORCH_CHECK(std::abs(*value) < 9.0e15, source, ": ", where, key,
              " must be a whole number within posenc's limit of 9e15 in magnitude, but is ",
              *value);
  return static_cast<int64_t>(*value);
}

std::vector<double> numbers(const std::string& source, const json& object, const char* key,
                            const char* where) {
  const json& value = field(object, key);
  TORCH_CHECK(value.is_array(), source, ": ", where, key,
              " must be a list of numbers (one per frequency), but is ",
              value.is_null() ? "missing" : type_name(value));
  std::vector<double> result;
  result.reserve(value.size());
  for (const json& element : value) {
    TORCH_CHECK(element.is_number(), source, ": ", where, key,
                " must hold numbers only, but holds a ", type_name(element));
    result.push_back(element.get<double>());
  }
  return result;
}

using Status = HfConfigKey::Status;

bool contains(const std::vector<const char*>& keys, const std::string& key) {
  for (const char* candidate : keys) {
    if (key == candidate) {
      return true;
    }
  }
  return false;
}

// The audit's reason for a partial_rotary_factor beside qk_rope_head_dim.
constexpr const char* kMlaPartial =
    "qk_rope_head_dim is the rotated width (transformers' rotary class reaches it as head_dim * "
    "partial_rotary_factor)";

// Keys of a config.json through which transformers' model code changes the rotation beyond the
// generic rope parameters, and that posenc's reader does not apply (yet): each is reported as
// ignored, with a warning (an error when strict).
struct ModelRule {
  const char* key;
  const char* reason;
};
const std::vector<ModelRule>& model_rules() {
  static const std::vector<ModelRule> rules = {
      {"rope_local_base_freq",
       "Gemma 3's base of its sliding-window layers; posenc reads one base (rope_theta, the "
       "full-attention layers')"},
      {"rope_interleave",
       "DeepSeek's regrouping of channels (2i, 2i + 1) into halves, which posenc applies for the "
       "model types whose code reads it (docs/rope_models.md), not for this one"},
      {"rotary_dim", "the rotated width of GPT-J-style models; posenc reads partial_rotary_factor"},
      {"rotary_pct",
       "GPT-NeoX's share of rotated channels (transformers' config turns it into "
       "partial_rotary_factor); posenc reads partial_rotary_factor only"},
      {"rope_pct",
       "the share of rotated channels (older StableLM); posenc reads partial_rotary_factor"},
      {"rotary_emb_base", "an older name of the base (GPT-NeoX); posenc reads rope_theta"},
      {"global_rope_theta",
       "ModernBERT's base of its global-attention layers (transformers 4's form); posenc reads "
       "rope_theta or per-layer-type rope_parameters"},
      {"local_rope_theta",
       "ModernBERT's base of its sliding-window layers (transformers 4's form); posenc reads "
       "rope_theta or per-layer-type rope_parameters"},
  };
  return rules;
}

// What the model code of a model type in transformers 5.23.0 does to the rotation beyond what its
// config.json says (found by reading each modeling file's rotary class, rotate_half and
// apply_rotary_pos_emb), one entry per rule: the reader applies kInterleavedPairs,
// kInterleavedLastChannels, kNtkAlpha, the deinterleave rules and kInverse, and reports kNotApplied
// (a warning; an error when strict). test_rope_model_types.py compares every model type with a
// rotary embedding against its own code, and docs/rope_models.md lists them. Adding a model type is
// one entry here and its row there.
enum class CodeRule {
  /// Channels (2i, 2i + 1) turn together (an interleaved rotate_half, complex multiplication).
  kInterleavedPairs,
  /// kInterleavedPairs on the last R channels of each head, the leading ones passed through
  /// (DeepSeek-V4's [nope | rope] heads): RotaryEmbeddingOptions::rotate_last_channels.
  kInterleavedLastChannels,
  /// Rope type "dynamic" with a non-zero `alpha` is NTK-alpha (compute_ntk_alpha_rope_parameters).
  kNtkAlpha,
  /// Channels (2i, 2i + 1) regrouped into halves before turning (DeepSeek-V3's
  /// apply_rotary_pos_emb_interleave): RotaryEmbeddingOptions::deinterleave.
  kDeinterleave,
  /// kDeinterleave where the config's `rope_interleave` (default true) says so.
  kDeinterleaveIfRopeInterleave,
  /// Turned by -theta (rotate_half is cat(x2, -x1)): RotaryEmbeddingOptions::inverse.
  kInverse,
  /// A rule posenc does not apply; `what` says which.
  kNotApplied,
};
struct ModelTypeRule {
  std::vector<const char*> types;
  CodeRule rule;
  const char* what;
};
const std::vector<ModelTypeRule>& model_type_rules() {
  static const std::vector<ModelTypeRule> rules = {
      {{"blt", "blt_global_transformer", "blt_local_decoder", "blt_local_encoder", "blt_patcher",
        "cohere", "cohere2", "cohere2_moe", "ernie4_5", "ernie4_5_moe",
        // ERNIE 4.5-VL: rotate_half_text (its M-RoPE: mrope_rule)
        "ernie4_5_vl_moe", "ernie4_5_vl_moe_text", "glm", "glm4", "glm4v", "glm4v_text", "glm_ocr",
        "glm_ocr_text", "helium",
        // Moonshine: cos/sin as halves, their first half repeated per pair (repeat_interleave)
        "moonshine", "moonshine_streaming", "openai_privacy_filter",
        // PE audio/video encoders: their stack_freqs turns (2i, 2i + 1) by [[cos, -sin], [sin,
        // cos]]
        "pe_audio_encoder", "pe_audio_video_encoder", "pe_video_encoder", "deepseek_v2", "llama4",
        "llama4_text"},
       CodeRule::kInterleavedPairs,
       "the model's code turns channels (2i, 2i + 1) together: the interleaved pairing"},
      {{"axk2", "bailing_hybrid", "deepseek_v32", "dots3_note", "dots3_note_text", "glm_moe_dsa",
        "longcat_flash", "mistral_large4", "mistral_large4_text"},
       CodeRule::kDeinterleave,
       "the model's code regroups the rotated channels from pairs (2i, 2i + 1) into halves before "
       "turning them (apply_rotary_pos_emb_interleave): deinterleave"},
      {{"axk1", "deepseek_v3", "glm4_moe_lite", "kimi_k2", "mistral4", "youtu"},
       CodeRule::kDeinterleaveIfRopeInterleave,
       "the model's code regroups the rotated channels from pairs (2i, 2i + 1) into halves before "
       "turning them (apply_rotary_pos_emb_interleave) where rope_interleave is true"},
      {{"hunyuan_v1_dense", "hunyuan_v1_moe", "hunyuan_vl", "hunyuan_vl_text"},
       CodeRule::kNtkAlpha,
       "the model's code reads rope type 'dynamic' with an alpha as 'ntk_alpha' (a fixed base * "
       "alpha^(R / (R - 2)))"},
      {{"deepseek_v4"},
       CodeRule::kInterleavedLastChannels,
       "the model's code turns the last R channels of each head ([nope | rope]), channels "
       "(2i, 2i + 1) together: the interleaved pairing with rotate_last_channels"},
      // Configs of encoders and sub-models that the comparison classes as not a text rotary (their
      // rotary turns frames or patches, or their attention has none) and that the reader would
      // otherwise read as a text model's: never silently (test_rope_model_types.py).
      // (Those whose rotary class runs on their default config are compared with it instead:
      // test_sub_models_rotate_as_their_code.)
      {{"clip_text_model", "esm", "inkling2_text", "moonshine_streaming_encoder", "moshi_depth",
        "nemotron_h"},
       CodeRule::kNotApplied,
       "posenc has not compared its reading of this model type with the model's code: its "
       "attention takes no rotary (CLIP's text encoder, Nemotron-H; ESM unless "
       "position_embedding_type is 'rotary'), or its rotary class does not run on its default "
       "config; the options read may not be its rotation"},
      {{"nanochat"},
       CodeRule::kInverse,
       "the model's code turns by -theta (its rotate_half is cat(x2, -x1)): inverse"},
  };
  return rules;
}
const ModelTypeRule* model_type_rule(const std::string& model_type) {
  for (const ModelTypeRule& rule : model_type_rules()) {
    if (contains(rule.types, model_type)) {
      return &rule;
    }
  }
  return nullptr;
}

// MLA model types (qk_rope_head_dim) whose code turns the rope parts as halves (i, i + D/2), with
// no rule of model_type_rules(); the others' rope parts are read with a warning.
bool mla_halves(const std::string& model_type) {
  static const std::vector<const char*> types = {"hy_v4", "minicpm3"};
  return contains(types, model_type);
}

// Model types whose text model turns by M-RoPE with rules of its code in transformers 5.23.0: the
// sections it takes when the config gives none (`rope_parameters.get("mrope_section", [...])`), and
// whether the sections interleave (Qwen3-VL's recomposition_frequencies) or stay contiguous
// (Qwen2-VL's split), which the code decides whatever mrope_interleaved says. ERNIE 4.5-VL's
// config and code give the sections as (height, width, time), its recomposition alternating height
// and width over the first pairs, time last (RotaryEmbeddingOptions::mrope_hw_alternating, whose
// sections are posenc's (time, height, width)).
struct MropeRule {
  std::vector<const char*> types;
  std::vector<int64_t> section; // as the config gives them
  bool interleaved;
  bool hw_alternating = false;
};
const MropeRule* mrope_rule(const std::string& model_type) {
  static const std::vector<MropeRule> rules = {
      {{"qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text", "qwen2_5_omni",
        "qwen2_5_omni_text", "qwen2_5_omni_thinker", "qwen2_5_omni_talker"},
       {16, 24, 24},
       false},
      {{"qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe", "qwen3_vl_moe_text", "qwen3_omni_moe",
        "qwen3_omni_moe_text", "qwen3_omni_moe_thinker", "qwen3_omni_moe_talker_text"},
       {24, 20, 20},
       true},
      {{"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"}, {11, 11, 10}, true},
      {{"glm4v", "glm4v_text", "glm4v_moe", "glm4v_moe_text", "glm_ocr", "glm_ocr_text",
        "glm_image", "glm_image_text"},
       {8, 12, 12},
       false},
      {{"paddleocr_vl", "paddleocr_vl_text"}, {16, 24, 24}, false},
      {{"cosmos3_edge", "cosmos3_edge_text", "cohere_compass", "cohere_compass_text"},
       {24, 20, 20},
       true},
      {{"qwen4_exp", "qwen4_exp_text"}, {11, 11, 10}, true},
      {{"ernie4_5_vl_moe", "ernie4_5_vl_moe_text"}, {22, 22, 20}, false, true},
  };
  for (const MropeRule& rule : rules) {
    if (contains(rule.types, model_type)) {
      return &rule;
    }
  }
  return nullptr;
}

// transformers' own defaults of a model type for a config.json that does not give them (its
// configuration class's `default_theta`, the `partial_rotary_factor` its __init__ sets by default,
// its `head_dim` default), where they are not 10000, 1 and hidden_size / num_attention_heads:
// what `AutoConfig.for_model(model_type, ...)` of transformers 5.23.0 holds, and the classes'
// `default_theta` attributes. test_rope_hf.py compares every model type such a config.json can
// describe with what posenc reads.
struct ModelDefaults {
  double theta = 10000.0;
  double partial = 1.0;
  /// GPT-NeoX's older keys: `rotary_pct` for the share, `rotary_emb_base` for the base.
  bool neox_keys = false;
  /// MiniMax-M2: the share is `rotary_dim` / the head width.
  bool rotary_dim_key = false;
  /// The head width when `head_dim` is absent: the class's own default (0: hidden_size /
  /// num_attention_heads; Zamba2: twice that, its attention_head_dim).
  int64_t head_dim = 0;
  bool twice_hidden_per_head = false;
};
// Model types' default_theta where it is not 10000.
const std::vector<std::pair<const char*, double>>& default_thetas() {
  static const std::vector<std::pair<const char*, double>> table = {
      {"EvollaModel", 500000.0},
      {"apertus", 12000000.0},
      {"bailing_hybrid", 6000000.0},
      {"bitnet", 500000.0},
      {"blt", 500000.0},
      {"blt_global_transformer", 500000.0},
      {"blt_local_decoder", 500000.0},
      {"blt_local_encoder", 500000.0},
      {"cohere", 500000.0},
      {"cosmos3_edge_text", 100000000.0},
      {"csm", 500000.0},
      {"csm_depth_decoder_model", 500000.0},
      {"cwm", 1000000.0},
      {"dots3_note_text", 80000000.0},
      {"emu3_text_model", 1000000.0},
      {"eomt_dinov3", 100.0},
      {"ernie4_5", 500000.0},
      {"ernie4_5_moe", 500000.0},
      {"ernie4_5_vl_moe_text", 500000.0},
      {"evolla", 500000.0},
      {"flex_olmo", 500000.0},
      {"fuyu", 25000.0},
      {"gemma4_vision", 100.0},
      {"gpt_oss", 150000.0},
      {"gte", 160000.0},
      {"helium", 100000.0},
      {"higgs_audio_v2", 500000.0},
      {"hy_v3", 11158840.0},
      {"jina_embeddings_v3", 20000.0},
      {"lfm2", 1000000.0},
      {"lfm2_moe", 1000000.0},
      {"lfm3", 1000000.0},
      {"lfm3_vl_vision", 1000000.0},
      {"llama4_text", 500000.0},
      {"longcat_flash", 10000000.0},
      {"minimax", 1000000.0},
      {"minimax_m2", 5000000.0},
      {"minimax_m3_vl_text", 5000000.0},
      {"ministral3", 1000000.0},
      {"mixtral", 1000000.0},
      {"mllama_text_model", 500000.0},
      {"muse_glimmer_assistant", 500000.0},
      {"muse_spark_text", 500000.0},
      {"musicflamingo", 1200.0},
      {"nomic_bert", 1000.0},
      {"olmo3", 500000.0},
      {"openai_privacy_filter", 150000.0},
      {"paddleocr_vl_text", 500000.0},
      {"pe_audio_encoder", 20000.0},
      {"pe_audio_video_encoder", 20000.0},
      {"pe_video_encoder", 20000.0},
      {"phimoe", 1000000.0},
      {"qwen2_5_omni_talker", 1000000.0},
      {"qwen2_5_omni_text", 1000000.0},
      {"qwen2_5_vl_text", 1000000.0},
      {"qwen2_vl_text", 1000000.0},
      {"qwen3_omni_moe_text", 1000000.0},
      {"qwen3_vl_moe_text", 500000.0},
      {"qwen3_vl_text", 500000.0},
      {"smollm3", 2000000.0},
      {"solar_open", 1000000.0}};
  return table;
}

// Model types' default partial_rotary_factor where it is not 1.
const std::vector<std::pair<const char*, double>>& default_partials() {
  static const std::vector<std::pair<const char*, double>> table = {
      {"bamba", 0.5},
      {"dots3_note_audio_encoder", 0.5},
      {"glm", 0.5},
      {"glm4", 0.5},
      {"glm4_moe", 0.5},
      {"glm4v_moe_text", 0.5},
      {"glmasr_encoder", 0.5},
      {"gpt_neox", 0.25},
      {"mistral4", 0.5},
      {"moonshine", 0.9},
      {"moonshine_streaming", 0.8},
      {"musicflamingo", 0.2},
      {"nemotron", 0.5},
      {"nemotron3_5_transcribe_asr_audio", 0.5},
      {"nemotron3_5_transcribe_word_timestamp", 0.5},
      {"persimmon", 0.5},
      {"phi", 0.5},
      {"qwen3_5_moe_text", 0.25},
      {"qwen3_5_text", 0.25},
      {"qwen3_next", 0.25},
      {"recurrent_gemma", 0.5},
      {"stablelm", 0.25}};
  return table;
}

// Model types' default head_dim where it is not hidden_size / num_attention_heads.
const std::vector<std::pair<const char*, int64_t>>& default_head_dims() {
  static const std::vector<std::pair<const char*, int64_t>> table = {
      {"afmoe", 128},
      {"axk1", 64},
      {"bailing_hybrid", 64},
      {"cohere2_moe", 128},
      {"cosmos3_edge_text", 128},
      {"cwm", 128},
      {"deepseek_v2", 64},
      {"deepseek_v3", 64},
      {"kimi_k2", 64},
      {"deepseek_v32", 64},
      {"dia_decoder", 128},
      {"dia_encoder", 128},
      {"ernie4_5", 128},
      {"flint", 128},
      {"gemma", 256},
      {"gemma2", 256},
      {"gemma4_vision", 64},
      {"glm", 128},
      {"glm4", 128},
      {"glm4_moe_lite", 64},
      {"glm_moe_dsa", 64},
      {"gpt_oss", 64},
      {"helium", 128},
      {"higgs_audio_v2", 128},
      {"hrm_text", 128},
      {"hy_v3", 128},
      {"hy_v4", 64},
      {"internlm3", 128},
      {"iquestcoder", 128},
      {"jetmoe", 128},
      {"kolibri1", 128},
      {"llama4_text", 128},
      {"longcat_flash", 64},
      {"minimax_m2", 128},
      {"minimax_m3_vl_text", 128},
      {"ministral3", 128},
      {"mistral4", 128},
      {"mistral_large4_text", 64},
      {"molmo2_text", 128},
      {"muse_glimmer_assistant", 128},
      {"muse_glimmer_text", 128},
      {"muse_spark_text", 64},
      {"neucodec", 64},
      {"openai_privacy_filter", 64},
      {"paddleocr_vl_text", 128},
      {"pe_audio_encoder", 128},
      {"pe_audio_video_encoder", 128},
      {"pe_video_encoder", 128},
      {"qwen2_5_omni_dit", 64},
      {"qwen2_5_omni_talker", 128},
      {"qwen3", 128},
      {"qwen3_5_moe_text", 256},
      {"qwen3_5_text", 256},
      {"qwen3_next", 256},
      {"qwen3_omni_moe_talker_code_predictor", 128},
      {"qwen3_vl_text", 128},
      {"qwen4_exp_text", 256},
      {"seed_oss", 128},
      {"solar_open", 128},
      {"t5_gemma_module", 256},
      {"timesfm2_5", 80},
      {"vaultgemma", 256},
      {"voxtral_realtime_encoder", 64},
      {"xcodec2", 64},
      {"youtu", 64}};
  return table;
}

ModelDefaults model_defaults(const std::string& model_type) {
  // (the value a table gives `model_type`, else `fallback`)
  const auto lookup = [&](const auto& table, auto fallback) {
    for (const auto& entry : table) {
      if (model_type == entry.first) {
        return entry.second;
      }
    }
    return fallback;
  };
  ModelDefaults defaults;
  defaults.theta = lookup(default_thetas(), 10000.0);
  defaults.partial = lookup(default_partials(), 1.0);
  defaults.head_dim = lookup(default_head_dims(), int64_t{0});
  defaults.twice_hidden_per_head = model_type == "zamba2";
  defaults.neox_keys = model_type == "gpt_neox" || model_type == "gpt_neox_japanese";
  defaults.rotary_dim_key = model_type == "minimax_m2";
  return defaults;
}

// The audit being written, and the keys that change the rotation but are not applied.
class Audit {
 public:
  void add(std::string key, Status status, std::string value, std::string reason) {
    if (status == Status::kUnknown) {
      unapplied_.push_back(key);
    }
    entries_.push_back({std::move(key), status, std::move(value), std::move(reason)});
  }
  /// A key through which the model's own code changes the rotation, not applied by posenc:
  /// ignored, and named by the warning (or the strict error).
  void add_rule(std::string key, std::string value, std::string reason) {
    unapplied_.push_back(key);
    entries_.push_back({std::move(key), Status::kIgnored, std::move(value), std::move(reason)});
  }
  const std::vector<std::string>& unapplied() const {
    return unapplied_;
  }
  std::vector<HfConfigKey> take() {
    return std::move(entries_);
  }

 private:
  std::vector<HfConfigKey> entries_;
  std::vector<std::string> unapplied_;
};

// A value for the audit: JSON text, objects and long lists shortened.
std::string shown(const json& value) {
  if (value.is_object()) {
    return "{...}";
  }
  std::string text = value.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

// Layer indices as a reader scans them: "0 .. 4, 6, 8 .. 10" (ascending input).
std::string index_ranges(const std::vector<int64_t>& indices) {
  std::string text;
  for (size_t i = 0; i < indices.size();) {
    size_t last = i;
    while (last + 1 < indices.size() && indices[last + 1] == indices[last] + 1) {
      ++last;
    }
    text += (text.empty() ? "" : ", ") + std::to_string(indices[i]);
    if (last > i) {
      text += (last == i + 1 ? ", " : " .. ") + std::to_string(indices[last]);
    }
    i = last + 1;
  }
  return text;
}

// Which layers to choose from when per_layer_config makes a layer type ambiguous: the layers
// per_layer_config gives fields of their own, and those of each type (layer_types), the type asked
// for first.
std::string per_layer_choice(const json& per_layer_config, const json& layer_types,
                             const std::string& layer_type) {
  std::vector<int64_t> own;
  for (const auto& item : per_layer_config.items()) {
    const std::string& key = item.key();
    if (!key.empty() && key.size() < 10 &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      own.push_back(std::stoll(key));
    }
  }
  std::sort(own.begin(), own.end());
  std::string text = "per_layer_config gives layers " + index_ranges(own) + " fields of their own";
  if (layer_types.is_array()) {
    // Every type's layers, the one asked for first: a user picks a layer index from these.
    std::vector<std::string> types = {layer_type};
    for (const json& type : layer_types) {
      if (type.is_string() &&
          std::find(types.begin(), types.end(), type.get<std::string>()) == types.end()) {
        types.push_back(type.get<std::string>());
      }
    }
    for (const std::string& type : types) {
      std::vector<int64_t> of_type;
      for (size_t i = 0; i < layer_types.size(); ++i) {
        if (layer_types[i] == type) {
          of_type.push_back(static_cast<int64_t>(i));
        }
      }
      if (of_type.empty()) {
        text += "; layer_types has no " + type + " layer";
      } else {
        text += "; the " + type + " layers are " + index_ranges(of_type);
      }
    }
  }
  return text;
}

json parse(const std::string& text, const std::string& source) {
  detail::check_json_limits(text, detail::kMaxConfigFileBytes, source);
  try {
    return json::parse(text);
  } catch (const json::exception& error) {
    TORCH_CHECK(false, source, ": not valid JSON (", error.what(), ")");
  }
}

// DeepSeek-V4's configuration class (transformers 5.23.0) builds two rope sets from a config.json:
// "main" (its sliding-window layers: rope_theta, the default type) and "compress" (its compressed
// layers: compress_rope_theta, default 160000, with the file's rope scaling, and an attention
// factor of 1 for YaRN), both of head_dim * partial_rotary_factor channels (partial_rotary_factor,
// else qk_rope_head_dim / head_dim, else 64 / 512; head_dim 512 by default). Its layer_types name
// kinds of attention, each reading one set. A copy of `config` in that form: rope_parameters
// {main, compress} as the class makes them, and layer_types the set each layer reads.
json deepseek_v4_rope_sets(const json& config) {
  json out = config;
  const json& head_field = field(config, "head_dim");
  const double head_dim = head_field.is_number() ? head_field.get<double>() : 512.0;
  if (head_field.is_null()) {
    out["head_dim"] = 512;
  }
  const json& partial_field = field(config, "partial_rotary_factor");
  const json& legacy_width = field(config, "qk_rope_head_dim");
  const double partial = partial_field.is_number()  ? partial_field.get<double>()
                         : legacy_width.is_number() ? legacy_width.get<double>() / head_dim
                                                    : 64.0 / 512.0;
  const json& scaling = field(config, "rope_scaling");
  const json& rope =
      scaling.is_object() && !scaling.empty() ? scaling : field(config, "rope_parameters");
  if (rope.is_object() && field(rope, "main").is_object() && field(rope, "compress").is_object()) {
    out["rope_parameters"] = {{"main", rope["main"]}, {"compress", rope["compress"]}};
  } else if (rope.is_null() || rope.is_object()) {
    json flat = rope.is_object() ? rope : json::object();
    flat.erase("main");
    flat.erase("compress");
    const json& theta = field(config, "rope_theta");
    const json& compress_theta = field(config, "compress_rope_theta");
    json main = {
        {"rope_type", "default"},
        {"rope_theta",
         theta.is_null() ? field(flat, "rope_theta").is_null() ? json(10000.0) : flat["rope_theta"]
                         : theta},
        {"partial_rotary_factor", partial}};
    json compress = flat;
    compress["rope_theta"] = compress_theta.is_null() ? json(160000.0) : compress_theta;
    compress["partial_rotary_factor"] = partial;
    if (!compress.contains("rope_type")) {
      compress["rope_type"] = compress.contains("type") ? compress["type"] : json("default");
    }
    compress.erase("type");
    if (compress["rope_type"] == "yarn" && !compress.contains("attention_factor")) {
      compress["attention_factor"] = 1.0;
    }
    out["rope_parameters"] = {{"main", main}, {"compress", compress}};
  } // (else: the reader's message for a malformed block)
  out.erase("rope_scaling");
  const json& kinds = field(config, "layer_types");
  if (kinds.is_array()) {
    json sets = json::array();
    for (const json& kind : kinds) {
      sets.push_back(kind == "sliding_attention" ? "main" : "compress");
    }
    out["layer_types"] = sets;
  }
  return out;
}

// One reading of a config.json, in named steps that read_hf_rope_config runs in order: each reads
// what the steps before it found, adds the keys it reads to the audit and fills in its part of the
// result. The members are grouped by the step that sets them.
class ConfigReader {
 public:
  ConfigReader(const std::string& file, const HfConfigReadOptions& options)
      : source(file), read(options) {}
  ConfigReader(const ConfigReader&) = delete;
  ConfigReader& operator=(const ConfigReader&) = delete;

  HfRopeConfig run(const std::string& json_text);

 private:
  void read_text_config();
  void read_layer_overrides();
  void read_model_type();
  void read_rope_set();
  void audit_rope_set();
  void read_heads();
  void read_rope_values();
  void audit_rope_parameters();
  void audit_model_type();
  void read_rotary_layers();
  void read_attention_temperature();
  void read_pairing();
  void check_unapplied();
  void read_mrope();
  RotaryEmbeddingOptions options() const;

  const std::string& source;
  const HfConfigReadOptions& read;
  Audit audit;
  HfRopeConfig result;
  json document;
  // read_text_config: where the language model's fields are.
  bool in_text = false;
  bool in_thinker = false;
  bool nested = false;
  json base_config;
  const char* top = "";
  std::string prefix;
  // read_layer_overrides: the fields of the layer asked for.
  bool has_overrides = false;
  bool has_layer_override = false;
  json layer_override;
  json early_type;
  bool global_head_dim = false;
  json chosen;
  // read_model_type: the fields read from here on, and the rules of the model type.
  json config;
  json own_type;
  json model_type_field;
  std::string model_type;
  ModelDefaults defaults;
  const MropeRule* mrope = nullptr;
  const ModelTypeRule* code_rule = nullptr;
  // read_rope_set: the rope parameters of the layer (type) asked for.
  bool v5 = false;
  json rope;
  json all_parameters;
  bool per_layer = false;
  std::string layer_type;
  std::string set_read;
  json parameters;
  std::string where_string;
  std::string read_form;
  // read_heads
  c10::optional<int64_t> mla_width;
  int64_t head_dim = 0;
  // read_rope_values
  c10::optional<int64_t> max_positions;
  detail::RopeBlock block;
  bool ntk_alpha_rule = false;
  const detail::RopeTypeEntry* rope_type = nullptr;
  std::string type_reason;
  RopeScalingOptions scaling;
  c10::optional<double> legacy_base;
  double base = 0.0;
  c10::optional<double> legacy_partial;
  int64_t rotary_dim = 0;
  // audit_rope_parameters: model types whose code reads llama_4_scaling_beta.
  bool beta_types = false;
  // audit_model_type
  bool interleaved_pairs = false;
  // read_pairing
  bool deinterleave = false;
  // read_mrope
  std::vector<int64_t> mrope_section;
  bool mrope_interleaved = false;
};

HfRopeConfig ConfigReader::run(const std::string& json_text) {
  document = parse(json_text, source);
  TORCH_CHECK(document.is_object(), source,
              ": expected a JSON object (a model's config.json), but "
              "got a ",
              type_name(document));
  read_text_config();
  read_layer_overrides();
  read_model_type();
  read_rope_set();
  audit_rope_set();
  read_heads();
  read_rope_values();
  audit_rope_parameters();
  audit_model_type();
  read_rotary_layers();
  read_attention_temperature();
  read_pairing();
  check_unapplied();
  read_mrope();
  result.options = options();
  result.audit = audit.take();
  return std::move(result);
}

// The text config: the top level, or the language model nested in it.
void ConfigReader::read_text_config() {
  // Vision-language models (Qwen2-VL, LLaVA, ...) keep the language model's fields in text_config,
  // omni models (Qwen2.5-Omni, Qwen3-Omni) in thinker_config.text_config (their talker and
  // token2wav models have rotary embeddings of their own, which this does not read).
  const bool top_has_heads = !field(document, "num_attention_heads").is_null();
  const json& thinker = field(document, "thinker_config");
  in_text = !top_has_heads && field(document, "text_config").is_object();
  in_thinker = !top_has_heads && !in_text && thinker.is_object() &&
               field(thinker, "text_config").is_object();
  base_config = in_text      ? field(document, "text_config")
                : in_thinker ? field(thinker, "text_config")
                             : document;
  top = in_text ? "text_config." : in_thinker ? "thinker_config.text_config." : "";
  nested = in_text || in_thinker;
  prefix = top;
}

// The fields of the layer asked for: per_layer_config's, and Gemma 4's global head width.
void ConfigReader::read_layer_overrides() {
  // per_layer_config (Gemma 4: {"5": {"head_dim": 512}}): a layer's own values of the config's
  // fields, which replace them for that layer (transformers' per-layer config).
  const json& per_layer_config = field(base_config, "per_layer_config");
  TORCH_CHECK(per_layer_config.is_null() || per_layer_config.is_object(), source, ": ", top,
              "per_layer_config must be an object (layer index -> fields), but is a ",
              type_name(per_layer_config));
  has_overrides = per_layer_config.is_object() && !per_layer_config.empty();
  TORCH_CHECK(
      !has_overrides || read.layer || read.layer_type.empty(), source, ": ", top,
      "per_layer_config gives some layers fields of their own, so a layer type does not "
      "say which; choose the layer by its index (layer) (",
      per_layer_choice(per_layer_config, field(base_config, "layer_types"), read.layer_type), ")");
  if (has_overrides && read.layer) {
    // (keys are layer indices as transformers writes them: "5", or zero-padded "05")
    for (const auto& item : per_layer_config.items()) {
      const std::string& key = item.key();
      TORCH_CHECK(
          !key.empty() && key.size() < 10 &&
              std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; }),
          source, ": ", top, "per_layer_config's keys must be layer indices, but one is '", key,
          "'");
      if (std::stoll(key) == *read.layer) {
        TORCH_CHECK(item.value().is_object(), source, ": ", top, "per_layer_config.", key,
                    " must be an object of fields, but is a ", type_name(item.value()));
        layer_override = item.value();
        has_layer_override = true;
      }
    }
  }
  // Gemma 4's configuration class gives its full-attention layers a head_dim of their own,
  // global_head_dim (default 512), where per_layer_config does not say it.
  const json& own_model_type = field(base_config, "model_type");
  early_type = own_model_type.is_string() ? own_model_type : field(document, "model_type");
  const bool gemma4 = early_type.is_string() && (early_type.get<std::string>() == "gemma4" ||
                                                 early_type.get<std::string>() == "gemma4_text");
  const json& early_layer_types = field(base_config, "layer_types");
  const bool full_layer = read.layer_type == "full_attention" ||
                          (read.layer && early_layer_types.is_array() && *read.layer >= 0 &&
                           *read.layer < static_cast<int64_t>(early_layer_types.size()) &&
                           early_layer_types[static_cast<size_t>(*read.layer)] == "full_attention");
  global_head_dim = gemma4 && !has_overrides && full_layer;
  chosen = base_config;
  if (has_layer_override || global_head_dim) {
    chosen.erase("per_layer_config");
    if (has_layer_override) {
      chosen.update(layer_override);
    } else {
      const json& global = field(base_config, "global_head_dim");
      chosen["head_dim"] = global.is_null() ? json(512) : global;
    }
  }
}

// The fields read from here on (DeepSeek-V4's as its configuration class rebuilds them), the
// model type and its rules.
void ConfigReader::read_model_type() {
  const bool deepseek_v4 = early_type == "deepseek_v4";
  config = deepseek_v4 ? deepseek_v4_rope_sets(chosen) : chosen;
  if (deepseek_v4) {
    audit.add(prefix + "layer_types", Status::kUsed, "[...]",
              "DeepSeek-V4: each kind of attention reads a rope set of its configuration class "
              "(sliding_attention: main; the compressed kinds: compress), built from rope_theta, "
              "compress_rope_theta and the rope scaling as that class builds them");
  }
  if (nested) {
    audit.add(in_text ? "text_config" : "thinker_config.text_config", Status::kUsed, "{...}",
              in_text ? "the language model's fields (the top level has no num_attention_heads)"
                      : "the thinker's language model (the top level has no num_attention_heads "
                        "and no text_config)");
  }
  // The model type (text_config's, else the top level's): its own defaults (model_defaults).
  own_type = field(config, "model_type");
  model_type_field = own_type.is_string() ? own_type : field(document, "model_type");
  model_type = model_type_field.is_string() ? model_type_field.get<std::string>() : std::string();
  defaults = model_defaults(model_type);
  mrope = mrope_rule(model_type);
  code_rule = model_type_rule(model_type);
}

// The rope parameters (transformers 5's or 4's form) and, per layer type, the set of the layer
// (type) asked for.
void ConfigReader::read_rope_set() {
  // rope_parameters (transformers 5) or rope_scaling (transformers 4); either may be null. A config
  // that holds both is read as transformers 5.23 reads it: `rope_scaling or rope_parameters`
  // (convert_rope_params_to_dict), so a non-empty rope_scaling wins.
  const json& scaling_form = field(config, "rope_scaling");
  // (Python's truth: null, false, 0, "", [] and {} are not given)
  const bool scaling_given =
      !(scaling_form.is_null() || (scaling_form.is_boolean() && !scaling_form.get<bool>()) ||
        (scaling_form.is_number() && scaling_form.get<double>() == 0.0) ||
        ((scaling_form.is_string() || scaling_form.is_array() || scaling_form.is_object()) &&
         scaling_form.empty()));
  v5 = !scaling_given && !field(config, "rope_parameters").is_null();
  rope = v5 ? field(config, "rope_parameters") : scaling_form;
  static const json empty_object = json::object();
  TORCH_CHECK(rope.is_null() || rope.is_object(), source, ": ", top,
              v5 ? "rope_parameters" : "rope_scaling", " must be an object, but is a ",
              type_name(rope));
  all_parameters = rope.is_null() ? empty_object : rope;
  // Per-layer-type rope parameters (transformers 5: {"full_attention": {...},
  // "sliding_attention": {...}}; Gemma 3/3n/4, OLMo 3, ModernBERT): the set of the layer type
  // asked for, by layer (its entry of `layer_types`) or by name; never a silent pick.
  // (a layer type whose set is null has no rotary: Beam's full-attention layers)
  per_layer = v5 && !all_parameters.empty() &&
              std::all_of(all_parameters.begin(), all_parameters.end(),
                          [](const json& value) { return value.is_object() || value.is_null(); }) &&
              std::any_of(all_parameters.begin(), all_parameters.end(),
                          [](const json& value) { return value.is_object(); });
  const json& layer_types = field(config, "layer_types");
  if (layer_types.is_array()) {
    for (const json& type : layer_types) {
      TORCH_CHECK(type.is_string(), source, ": ", top,
                  "layer_types must be a list of strings, but holds a ", type_name(type));
      result.layer_types.push_back(type.get<std::string>());
    }
  }
  layer_type = read.layer_type;
  if (read.layer) {
    const int64_t layers = static_cast<int64_t>(result.layer_types.size());
    TORCH_CHECK(layers > 0 || !per_layer, source, ": ", top,
                "layer_types is needed to find the type of layer ", *read.layer,
                ", but the config has none; choose the layer type by name instead");
    TORCH_CHECK(layers == 0 || (*read.layer >= 0 && *read.layer < layers), source, ": layer ",
                *read.layer, " is not a layer of this model (", top, "layer_types has ", layers,
                " layers: 0 .. ", layers - 1, ")");
    const std::string of_layer =
        layers > 0 ? result.layer_types[static_cast<size_t>(*read.layer)] : std::string();
    TORCH_CHECK(layer_type.empty() || of_layer.empty() || layer_type == of_layer, source,
                ": layer ", *read.layer, " is a ", of_layer, " layer, but layer type ", layer_type,
                " was asked for; give one of the two");
    if (layer_type.empty()) {
      layer_type = of_layer;
    }
  }
  if (per_layer) {
    std::string types;
    for (const auto& item : all_parameters.items()) {
      types += (types.empty() ? "" : ", ") + item.key();
    }
    TORCH_CHECK(!layer_type.empty(), source, ": ", top,
                "rope_parameters holds one set per layer type (", types,
                "); choose a layer (C++: HfConfigReadOptions::layer; posenc rope/export --layer N; "
                "Python: layer=N) or a layer type (layer_type)");
    TORCH_CHECK(all_parameters.contains(layer_type), source, ": ", top,
                "rope_parameters has no set for layer type '", layer_type, "' (it has ", types,
                ")");
  }
  if (!per_layer && (read.layer || !layer_type.empty())) {
    // One set for all layers: the layer type must be one of the model's, and the config must not
    // give layer types different rotations in transformers 4's form (which posenc does not read).
    TORCH_CHECK(layer_type.empty() || result.layer_types.empty() ||
                    std::find(result.layer_types.begin(), result.layer_types.end(), layer_type) !=
                        result.layer_types.end(),
                source, ": layer type '", layer_type, "' is not in ", top, "layer_types");
    for (const char* key : {"rope_local_base_freq", "global_rope_theta", "local_rope_theta"}) {
      TORCH_CHECK(field(config, key).is_null(), source, ": ", top, key,
                  " gives this model's layer types different rotary bases in transformers 4's "
                  "form, which posenc does not read per layer; save the config with transformers "
                  "5 (per-layer-type rope_parameters) to read one layer's");
    }
  }
  result.layer_type = layer_type;
  // A layer type without rotary (its set is null): the options are those of the layers that
  // rotate (the first set), and `rotates` is false.
  set_read = layer_type;
  if (per_layer && all_parameters.at(layer_type).is_null()) {
    result.rotates = false;
    for (const auto& item : all_parameters.items()) {
      if (item.value().is_object()) {
        set_read = item.key();
        break;
      }
    }
  }
  parameters = per_layer ? all_parameters.at(set_read) : all_parameters;
  where_string = std::string(top) + (v5 ? "rope_parameters." : "rope_scaling.") +
                 (per_layer ? set_read + "." : std::string());
  read_form = prefix + (v5 ? "rope_parameters" : "rope_scaling") +
              (per_layer ? "." + set_read : std::string());
}

// The audit of which rope parameters and layer fields were read.
void ConfigReader::audit_rope_set() {
  const char* where = where_string.c_str();
  if (rope.is_null()) {
    audit.add(prefix + "rope_parameters", Status::kDefault, R"({"rope_type": "default"})",
              "neither rope_parameters nor rope_scaling is given: the default rope");
  } else {
    audit.add(read_form, Status::kUsed, "{...}",
              per_layer ? "the rope parameters of this layer type"
              : v5      ? "transformers 5's rope parameters"
                        : "transformers 4's rope scaling");
  }
  if (per_layer) {
    for (const auto& item : all_parameters.items()) {
      if (item.key() == layer_type && item.value().is_null()) {
        audit.add(prefix + "rope_parameters." + item.key(), Status::kUsed, "null",
                  "layers of type " + layer_type +
                      " have no rotary: their attention takes no positions (the options are "
                      "those of " +
                      set_read + " layers)");
      } else if (item.key() != set_read) {
        audit.add(prefix + "rope_parameters." + item.key(), Status::kIgnored,
                  item.value().is_null() ? "null" : "{...}",
                  "the rope parameters of another layer type (read: " + layer_type + ")");
      }
    }
  }
  if (global_head_dim) {
    const json& global = field(base_config, "global_head_dim");
    audit.add(prefix + "global_head_dim", global.is_null() ? Status::kDefault : Status::kUsed,
              global.is_null() ? "512" : shown(global),
              "the head width of Gemma 4's full-attention layers (its configuration class)");
  }
  if (has_overrides && !read.layer) {
    // (the layers it names may rotate otherwise: a rule not applied)
    audit.add_rule(prefix + "per_layer_config", "{...}",
                   "some layers have fields of their own (e.g. head_dim); read a layer's rotary "
                   "embedding with layer = its index");
  } else if (has_overrides) {
    audit.add(prefix + "per_layer_config", has_layer_override ? Status::kUsed : Status::kIgnored,
              has_layer_override ? shown(layer_override) : "{...}",
              has_layer_override ? "layer " + std::to_string(*read.layer) + "'s own fields"
                                 : "no fields of layer " + std::to_string(*read.layer));
  }
  if (!result.layer_types.empty() && (per_layer || read.layer)) { // (else it bears on no rotation)
    audit.add(prefix + "layer_types", read.layer ? Status::kUsed : Status::kIgnored,
              "[" + std::to_string(result.layer_types.size()) + " layers]",
              read.layer ? "layer " + std::to_string(*read.layer) + " is a " + layer_type + " layer"
              : layer_type.empty() ? std::string("no layer was asked for")
                                   : "layer type " + layer_type + " was asked for by name");
  }
  if (!v5 && !field(config, "rope_parameters").is_null()) {
    audit.add(prefix + "rope_parameters", Status::kIgnored, shown(field(config, "rope_parameters")),
              "a non-empty rope_scaling wins (transformers 5.23 reads `rope_scaling or "
              "rope_parameters`)");
  }
  for (const auto& item : parameters.items()) {
    TORCH_CHECK(!item.value().is_object(), source, ": ", where, item.key(),
                " is an object, but a rope parameter must be a number, a flag or a list of numbers "
                "(one set per layer type is rope_parameters: {\"<layer type>\": {...}}, in "
                "transformers 5's form)");
  }
}

// The heads: their number, width and grouping.
void ConfigReader::read_heads() {
  const c10::optional<int64_t> heads = integer(source, config, "num_attention_heads", top);
  const c10::optional<int64_t> head_dim_field = integer(source, config, "head_dim", top);
  const c10::optional<int64_t> hidden = integer(source, config, "hidden_size", top);
  TORCH_CHECK(heads && *heads >= 1, source, ": ", top,
              "num_attention_heads must be a whole number >= 1, but is ",
              heads ? std::to_string(*heads) : std::string("missing"));
  TORCH_CHECK(head_dim_field || hidden, source, ": ", top,
              "head_dim or hidden_size is needed to know the width of a head, but neither is "
              "given");
  // MLA (DeepSeek-V2/V3 and their kin): only qk_rope_head_dim channels of each head turn, held in
  // a part of the head of their own (q_pe, k_pe): the module's heads are those parts.
  // DeepSeek-V4's heads hold their rotated channels at their end (head_dim * partial_rotary_factor
  // of them, its rotary class's width): whole heads, not MLA's parts.
  const bool last_channels =
      code_rule != nullptr && code_rule->rule == CodeRule::kInterleavedLastChannels;
  mla_width = last_channels ? c10::nullopt : integer(source, config, "qk_rope_head_dim", top);
  if (last_channels && !field(config, "qk_rope_head_dim").is_null()) {
    const bool gives_partial = field(chosen, "partial_rotary_factor").is_null();
    audit.add(prefix + "qk_rope_head_dim", gives_partial ? Status::kUsed : Status::kIgnored,
              shown(field(config, "qk_rope_head_dim")),
              gives_partial ? "the rotated width at the end of each head: partial_rotary_factor = "
                              "qk_rope_head_dim / head_dim, as the configuration class sets it"
                            : "partial_rotary_factor gives the rotated width at the end of each "
                              "head (head_dim * partial_rotary_factor)");
  }
  // (absent: the model type's own default, else hidden_size / num_attention_heads, as transformers)
  head_dim = mla_width               ? *mla_width
             : head_dim_field        ? *head_dim_field
             : defaults.head_dim > 0 ? defaults.head_dim
                                     : (defaults.twice_hidden_per_head ? 2 : 1) * *hidden / *heads;
  TORCH_CHECK(!mla_width || *mla_width != 0, source, ": ", top,
              "qk_rope_head_dim is 0: this model's attention has no rotary, so there is no rotary "
              "embedding to read");
  TORCH_CHECK(head_dim >= 2, source, ": the head width must be >= 2, but is ", head_dim,
              mla_width        ? " (qk_rope_head_dim)"
              : head_dim_field ? " (head_dim)"
                               : " (hidden_size / num_attention_heads)");
  result.num_attention_heads = *heads;
  result.num_key_value_heads = integer(source, config, "num_key_value_heads", top).value_or(*heads);
  audit.add(prefix + "num_attention_heads", Status::kUsed, std::to_string(*heads), "query heads");
  if (field(config, "num_key_value_heads").is_null()) {
    audit.add(prefix + "num_key_value_heads", Status::kDefault, std::to_string(*heads),
              "absent: num_attention_heads (no grouped keys)");
  } else {
    audit.add(prefix + "num_key_value_heads", Status::kUsed,
              std::to_string(result.num_key_value_heads), "key/value heads");
  }
  if (mla_width && (code_rule != nullptr || mla_halves(model_type))) {
    audit.add(prefix + "qk_rope_head_dim", Status::kUsed, std::to_string(head_dim),
              "MLA: only these channels of a head turn, held apart from the others (q_pe, k_pe): "
              "the module's heads are those parts");
  } else if (mla_width) {
    audit.add_rule(prefix + "qk_rope_head_dim", std::to_string(head_dim),
                   "MLA: the rope parts (q_pe, k_pe) are read as the heads, but posenc does not "
                   "know whether this model type's code regroups their pairs (2i, 2i + 1) "
                   "(DeepSeek-V3's rope_interleave) or pairs them otherwise");
    if (head_dim_field) {
      audit.add(prefix + "head_dim", Status::kIgnored, std::to_string(*head_dim_field),
                "qk_rope_head_dim gives the head width (of the rotated parts)");
    }
  } else if (head_dim_field) {
    audit.add(prefix + "head_dim", Status::kUsed, std::to_string(head_dim), "the head width");
    if (hidden) {
      audit.add(prefix + "hidden_size", Status::kIgnored, std::to_string(*hidden),
                "head_dim gives the head width");
    }
  } else if (defaults.head_dim > 0) {
    audit.add(prefix + "head_dim", Status::kDefault, std::to_string(head_dim),
              "absent: the default of model type '" + model_type + "'");
  } else {
    audit.add(prefix + "head_dim", Status::kDefault, std::to_string(head_dim),
              defaults.twice_hidden_per_head
                  ? "absent: 2 * hidden_size / num_attention_heads (Zamba2's attention_head_dim)"
                  : "absent: hidden_size / num_attention_heads");
    audit.add(prefix + "hidden_size", Status::kUsed, std::to_string(*hidden),
              "the head width, divided by num_attention_heads");
  }
  TORCH_CHECK(result.num_key_value_heads >= 1 && *heads % result.num_key_value_heads == 0, source,
              ": ", top, "num_key_value_heads must divide num_attention_heads (", *heads,
              "), but is ", result.num_key_value_heads);
}

// The positions, the rope type and its parameters, the base and the rotated width.
void ConfigReader::read_rope_values() {
  const char* where = where_string.c_str();
  max_positions = integer(source, config, "max_position_embeddings", top);
  TORCH_CHECK(max_positions && *max_positions >= 1, source, ": ", top,
              "max_position_embeddings must be a whole number >= 1 (the cos/sin caches hold that "
              "many positions), but is ",
              max_positions ? std::to_string(*max_positions) : std::string("missing"));

  audit.add(prefix + "max_position_embeddings", Status::kUsed, std::to_string(*max_positions),
            "max_len, the positions the caches hold");

  // The rope type and its parameters (detail/rope_types.cpp: the one reader of rope parameters).
  block = detail::read_rope_block(parameters, source, where, detail::RopeBlockKind::kConfig);
  // Hunyuan's checkpoints say "dynamic" with a fixed alpha, which their model code reads as
  // NTK-alpha (base * alpha^(R / (R - 2)) at every length) instead of transformers' dynamic.
  const json& alpha = field(parameters, "alpha");
  ntk_alpha_rule = code_rule != nullptr && code_rule->rule == CodeRule::kNtkAlpha &&
                   block.scaling.type() == RopeType::kDynamic && alpha.is_number() &&
                   alpha.get<double>() != 0.0;
  if (ntk_alpha_rule) {
    block.scaling.type(RopeType::kNtkAlpha);
  }
  rope_type = &detail::rope_type_entry(block.scaling.type());
  type_reason = std::string("rope type '") + rope_type->name + "' does not read it";
  scaling = block.scaling;
  scaling.max_position_embeddings(*max_positions);
  if (rope_type->reads_original) {
    // A top-level original_max_position_embeddings wins (Phi-3), then the rope parameters', then
    // max_position_embeddings (transformers' standardize_rope_params).
    const c10::optional<int64_t> original =
        integer(source, config, "original_max_position_embeddings", top);
    scaling.original_max_position_embeddings(
        original ? original : scaling.original_max_position_embeddings().value_or(*max_positions));
  } else {
    scaling.original_max_position_embeddings(c10::nullopt);
  }

  // rope_theta and partial_rotary_factor: inside the rope parameters first, then beside them.
  // (then GPT-NeoX's rotary_emb_base, then the model type's default_theta)
  legacy_base = defaults.neox_keys ? number(source, config, "rotary_emb_base", top) : c10::nullopt;
  base = number(source, parameters, "rope_theta", where)
             .value_or(number(source, config, "rope_theta", top)
                           .value_or(legacy_base.value_or(defaults.theta)));
  TORCH_CHECK(base >= 1.0 / detail::kMaxFrequency, source,
              ": rope_theta must be >= 5.2e-290 (so that every angle is a finite number), but is ",
              base, "; LLaMA 3 uses 500000");
  // (then GPT-NeoX's rotary_pct, MiniMax-M2's rotary_dim / head_dim, the model type's default)
  legacy_partial = defaults.neox_keys ? number(source, config, "rotary_pct", top) : c10::nullopt;
  if (defaults.rotary_dim_key) {
    if (const auto rotary = number(source, config, "rotary_dim", top)) {
      legacy_partial = *rotary / static_cast<double>(head_dim);
    }
  }
  const double partial = number(source, parameters, "partial_rotary_factor", where)
                             .value_or(number(source, config, "partial_rotary_factor", top)
                                           .value_or(legacy_partial.value_or(defaults.partial)));
  TORCH_CHECK(partial > 0.0 && partial <= 1.0, source,
              ": partial_rotary_factor must lie in (0, 1], but is ", partial);
  // A type that rotates the whole head (proportional) turns only a share of its pairs instead.
  scaling.partial_rotary_factor(rope_type->rotates_whole_head ? partial : 1.0);
  // (MLA: all of the rotated part, which transformers' rotary class finds as head_dim * partial)
  rotary_dim = rope_type->rotates_whole_head || mla_width
                   ? head_dim
                   : static_cast<int64_t>(static_cast<double>(head_dim) * partial);
  TORCH_CHECK(rotary_dim >= 2 && rotary_dim % 2 == 0, source,
              ": the rotated width int(head_dim * partial_rotary_factor) = int(", head_dim, " * ",
              partial, ") = ", rotary_dim, " must be even and >= 2");
}

void ConfigReader::audit_rope_parameters() {
  // The audit of the rope parameters, of the keys beside them, and of the models' own rules.
  // (Ministral 3's and Mistral 4's code reads llama_4_scaling_beta from the rope parameters)
  beta_types = model_type == "ministral3" || model_type == "mistral4";
  const json given_defaults = json::parse(detail::rope_scaling_to_json(scaling));
  for (const auto& item : parameters.items()) {
    const std::string& key = item.key();
    const std::string name = where_string + key;
    if (item.value().is_null()) {
      audit.add(name, Status::kDefault, "null", "null: read as absent");
    } else if (key == "rope_type" || key == "type") {
      const bool both = key == "type" && parameters.contains("rope_type");
      audit.add(name, both ? Status::kIgnored : Status::kUsed, shown(item.value()),
                both ? "rope_type wins" : "the rope type");
    } else if (key == "partial_rotary_factor" && mla_width) {
      audit.add(name, Status::kIgnored, shown(item.value()), kMlaPartial);
    } else if (key == "rope_theta" || key == "partial_rotary_factor") {
      audit.add(name, Status::kUsed, shown(item.value()),
                key == "rope_theta" ? "the base" : "the share of each head that rotates");
    } else if (key == "mrope_interleaved" && mrope != nullptr &&
               !(item.value().is_boolean() && item.value().get<bool>() == mrope->interleaved)) {
      audit.add(name, Status::kIgnored, shown(item.value()),
                model_type + "'s code " +
                    (mrope->interleaved      ? "always interleaves the sections"
                     : mrope->hw_alternating ? "alternates the height and width sections itself "
                                               "(mrope_hw_alternating), whatever this says"
                                             : "never interleaves the sections"));
    } else if (key == "mrope_section" && mrope != nullptr && mrope->hw_alternating) {
      audit.add(name, Status::kUsed, shown(item.value()),
                "multimodal RoPE, sizes (height, width, time) as " + model_type +
                    "'s code orders them (mrope_hw_alternating)");
    } else if (key == "mrope_section" || key == "mrope_interleaved") {
      audit.add(name, Status::kUsed, shown(item.value()), "multimodal RoPE");
    } else if (key == "max_position_embeddings") {
      audit.add(name, Status::kIgnored, shown(item.value()),
                "the max_position_embeddings beside the rope parameters is read");
    } else if (key == "original_max_position_embeddings" && beta_types &&
               !rope_type->reads_original && !field(parameters, "llama_4_scaling_beta").is_null()) {
      audit.add(name, Status::kUsed, shown(item.value()),
                "the step of positions of the query temperature (llama_4_scaling_beta)");
    } else if (key == "original_max_position_embeddings") {
      const bool top_wins = !field(config, key.c_str()).is_null();
      audit.add(name, rope_type->reads_original && !top_wins ? Status::kUsed : Status::kIgnored,
                shown(item.value()),
                !rope_type->reads_original ? type_reason
                : top_wins ? "a top-level original_max_position_embeddings wins (Phi-3)"
                           : "the original context");
    } else if (key == "llama_4_scaling_beta" && beta_types) {
      audit.add(name, Status::kUsed, shown(item.value()),
                model_type +
                    "'s query temperature, in every layer after the rotation: 1 + beta * "
                    "log(1 + floor(p / original_max_position_embeddings)) "
                    "(HfRopeConfig::attention_temperature)");
    } else if (contains(rope_type->parameters, key)) {
      audit.add(name, Status::kUsed, shown(item.value()), "a parameter of the rope type");
    } else if (contains(detail::rope_parameter_keys(), key)) {
      audit.add(name, Status::kIgnored, shown(item.value()), type_reason);
    } else {
      audit.add(name, Status::kUnknown, shown(item.value()),
                "no rope type of posenc or transformers 5.23 reads it");
    }
  }
  for (const char* key : rope_type->parameters) {
    const std::string name = key;
    if (name == "original_max_position_embeddings" || parameters.contains(name)) {
      continue;
    }
    const auto value = given_defaults.find(name);
    audit.add(where_string + name, Status::kDefault,
              value == given_defaults.end() ? "" : value->dump(),
              value == given_defaults.end()
                  ? "absent: derived from the other parameters, as transformers does"
                  : "absent: transformers' default");
  }
  const auto beside = [&](const char* key, bool block_has, const std::string& default_value,
                          const char* use) {
    const json& value = field(config, key);
    if (!value.is_null()) {
      audit.add(prefix + key, block_has ? Status::kIgnored : Status::kUsed, shown(value),
                block_has ? "the rope parameters' own value wins" : use);
    } else if (!block_has) {
      audit.add(prefix + key, Status::kDefault, default_value, "absent: transformers' default");
    }
  };
  const auto text = [](double value) { return json(value).dump(); }; // (shortest round trip)
  const bool block_theta = !field(parameters, "rope_theta").is_null();
  const bool block_partial = !field(parameters, "partial_rotary_factor").is_null();
  const bool top_theta = !field(config, "rope_theta").is_null();
  const bool top_partial = !field(config, "partial_rotary_factor").is_null();
  const std::string whose = model_type.empty() ? std::string("transformers' default")
                                               : "the default of model type '" + model_type + "'";
  if (top_theta || block_theta) {
    beside("rope_theta", block_theta, "", "the base");
  } else if (!legacy_base) {
    audit.add(prefix + "rope_theta", Status::kDefault, text(defaults.theta), "absent: " + whose);
  }
  if (mla_width && top_partial) {
    audit.add(prefix + "partial_rotary_factor", Status::kIgnored,
              shown(field(config, "partial_rotary_factor")), kMlaPartial);
  } else if (top_partial || block_partial) {
    beside("partial_rotary_factor", block_partial, "", "the share of each head that rotates");
  } else if (mla_width) {
    // (absent: nothing to say; the rope parts rotate whole)
  } else if (!legacy_partial) {
    audit.add(prefix + "partial_rotary_factor", Status::kDefault, text(defaults.partial),
              "absent: " + whose);
  }
  if (legacy_base) {
    audit.add(prefix + "rotary_emb_base",
              block_theta || top_theta ? Status::kIgnored : Status::kUsed, text(*legacy_base),
              block_theta || top_theta ? "rope_theta wins" : "GPT-NeoX's name of the base");
  }
  if (legacy_partial) {
    const char* key = defaults.neox_keys ? "rotary_pct" : "rotary_dim";
    audit.add(prefix + key, block_partial || top_partial ? Status::kIgnored : Status::kUsed,
              shown(field(config, key)),
              block_partial || top_partial ? "partial_rotary_factor wins"
              : defaults.neox_keys         ? "GPT-NeoX's share of rotated channels"
                                           : "MiniMax-M2's rotated width: partial_rotary_factor = "
                                             "rotary_dim / head_dim");
  }
  if (rope_type->reads_original) {
    const json& original = field(config, "original_max_position_embeddings");
    if (!original.is_null()) {
      audit.add(prefix + "original_max_position_embeddings", Status::kUsed, shown(original),
                "the original context (a top-level value wins, as for Phi-3)");
    } else if (field(parameters, "original_max_position_embeddings").is_null()) {
      audit.add(prefix + "original_max_position_embeddings", Status::kDefault,
                std::to_string(*max_positions), "absent: max_position_embeddings");
    }
  } else if (!field(config, "original_max_position_embeddings").is_null()) {
    audit.add(prefix + "original_max_position_embeddings", Status::kIgnored,
              shown(field(config, "original_max_position_embeddings")), type_reason);
  }
}

void ConfigReader::audit_model_type() {
  // model_type (the one model_defaults read): the rules of its code.
  interleaved_pairs =
      code_rule != nullptr && (code_rule->rule == CodeRule::kInterleavedPairs ||
                               code_rule->rule == CodeRule::kInterleavedLastChannels);
  if (!model_type.empty()) {
    const std::string name = std::string(own_type.is_string() ? top : "") + "model_type";
    if (code_rule == nullptr) {
      audit.add(name, Status::kUsed, shown(model_type_field),
                "no rule of its own that posenc knows of");
    } else if (code_rule->rule == CodeRule::kNotApplied) {
      audit.add_rule(name, shown(model_type_field), code_rule->what);
    } else if (interleaved_pairs || ntk_alpha_rule || code_rule->rule == CodeRule::kDeinterleave ||
               code_rule->rule == CodeRule::kDeinterleaveIfRopeInterleave ||
               code_rule->rule == CodeRule::kInverse) {
      audit.add(name, Status::kUsed, shown(model_type_field), code_rule->what);
    } else {
      audit.add(name, Status::kUsed, shown(model_type_field),
                "its rule (" + std::string(code_rule->what) + ") does not bear on this config");
    }
  }
}

void ConfigReader::read_rotary_layers() {
  // Layers without rotary (SmolLM3, Llama 4, Mistral Large 3): no_rope_layers[i] = 1 where layer
  // i rotates (transformers' convention), else (absent or empty) one layer in
  // no_rope_layer_interval without, as their configuration classes make it (default 4 for these
  // model types).
  const json& no_rope = field(config, "no_rope_layers");
  const json& interval_field = field(config, "no_rope_layer_interval");
  const bool interval_types = model_type == "smollm3" || model_type == "llama4" ||
                              model_type == "llama4_text" || model_type == "mistral_large4" ||
                              model_type == "mistral_large4_text";
  TORCH_CHECK(no_rope.is_null() || no_rope.is_array(), source, ": ", top,
              "no_rope_layers must be a list of 0 or 1 per layer (1: the layer rotates), but is a ",
              type_name(no_rope));
  if (no_rope.is_array() && !no_rope.empty()) {
    for (const json& entry : no_rope) {
      TORCH_CHECK(entry.is_boolean() || (entry.is_number_integer() &&
                                         (entry.get<int64_t>() == 0 || entry.get<int64_t>() == 1)),
                  source, ": ", top,
                  "no_rope_layers must hold 0 or 1 per layer (1: the layer rotates), but holds ",
                  entry.dump());
      result.rotary_layers.push_back(entry.is_boolean() ? entry.get<bool>()
                                                        : entry.get<int64_t>() == 1);
    }
    if (!interval_field.is_null()) {
      audit.add(prefix + "no_rope_layer_interval", Status::kIgnored, shown(interval_field),
                "no_rope_layers wins: it lists the layers");
    }
  } else if (!interval_field.is_null() || interval_types) {
    const c10::optional<int64_t> interval = integer(source, config, "no_rope_layer_interval", top);
    const c10::optional<int64_t> layers = integer(source, config, "num_hidden_layers", top);
    TORCH_CHECK(!interval || *interval >= 1, source, ": ", top,
                "no_rope_layer_interval must be >= 1, but is ", *interval);
    if (layers) {
      const int64_t every = interval.value_or(4);
      for (int64_t i = 0; i < *layers; ++i) {
        result.rotary_layers.push_back((i + 1) % every != 0);
      }
      audit.add(prefix + "no_rope_layer_interval", interval ? Status::kUsed : Status::kDefault,
                std::to_string(every),
                std::string(interval ? "" : "absent: " + model_type + "'s default; ") +
                    "layers i with (i + 1) % " + std::to_string(every) +
                    " == 0 have no rotary (no_rope_layers absent)");
    } else {
      TORCH_CHECK(!interval, source, ": ", top,
                  "no_rope_layer_interval needs num_hidden_layers to know which layers have no "
                  "rotary, but it is missing");
    }
  }
  if (!result.rotary_layers.empty()) {
    const auto rotating =
        std::count(result.rotary_layers.begin(), result.rotary_layers.end(), true);
    if (no_rope.is_array() && !no_rope.empty()) {
      audit.add(prefix + "no_rope_layers", Status::kUsed, "[...]",
                std::to_string(rotating) + " of " + std::to_string(result.rotary_layers.size()) +
                    " layers rotate (1); the others take no positions (HfRopeConfig::"
                    "rotary_layers)");
    }
    if (read.layer) {
      const int64_t count = static_cast<int64_t>(result.rotary_layers.size());
      TORCH_CHECK(*read.layer >= 0 && *read.layer < count, source, ": layer ", *read.layer,
                  " is not a layer of this model (", top, "no_rope_layers has ", count,
                  " layers: 0 .. ", count - 1, ")");
      result.rotates = result.rotary_layers[static_cast<size_t>(*read.layer)];
      audit.add(prefix + "no_rope_layers[" + std::to_string(*read.layer) + "]", Status::kUsed,
                result.rotates ? "1" : "0",
                result.rotates ? "layer " + std::to_string(*read.layer) + " rotates"
                               : "layer " + std::to_string(*read.layer) +
                                     " has no rotary: its attention takes no positions");
    }
  }
}

void ConfigReader::read_attention_temperature() {
  const char* where = where_string.c_str();
  // Query temperatures by position (AttentionTemperature), as the models' attention code applies
  // them: Llama 4's attn_temperature_tuning in its layers without rotary (its configuration
  // class's defaults: on, floor_scale 8192, attn_scale 0.1), and Ministral 3's and Mistral 4's
  // rope_parameters.llama_4_scaling_beta in every layer.
  const json& tuning = field(config, "attn_temperature_tuning");
  if (model_type == "llama4" || model_type == "llama4_text") {
    TORCH_CHECK(tuning.is_null() || tuning.is_boolean() || tuning.is_number(), source, ": ", top,
                "attn_temperature_tuning must be true or false, but is a ", type_name(tuning));
    // (a number, as early Llama 4 configs write it, is Python's truth of it: transformers 4 read
    // it so; 5.23's configuration class wants a bool)
    const bool on = tuning.is_null() ||
                    (tuning.is_boolean() ? tuning.get<bool>() : tuning.get<double>() != 0.0);
    // Llama4TextAttention: `if self.attn_temperature_tuning and not self.use_rope`. The layers
    // read: the one asked for; every layer of the type asked for (all must lack rotary); or, with
    // neither, the model (some layer lacks rotary).
    bool without_rotary = false;
    std::string which;
    if (read.layer) {
      without_rotary = !result.rotates;
      which = "layer " + std::to_string(*read.layer) + (without_rotary ? " has none" : " rotates");
    } else {
      bool all = true;
      bool any = false;
      for (size_t i = 0; i < result.rotary_layers.size(); ++i) {
        if (!read.layer_type.empty() &&
            (i >= result.layer_types.size() || result.layer_types[i] != read.layer_type)) {
          continue;
        }
        all = all && !result.rotary_layers[i];
        any = any || !result.rotary_layers[i];
      }
      without_rotary = read.layer_type.empty() ? any : any && all;
      which = read.layer_type.empty()
                  ? std::string(any ? "some layers have none" : "every layer rotates")
                  : "the " + read.layer_type + " layers " +
                        (without_rotary ? "have none"
                         : any          ? "are of both kinds: read a layer"
                                        : "rotate");
    }
    const bool applies = on && without_rotary;
    const std::string not_applied = !on ? "off: no layer scales its queries"
                                        : which +
                                              ": only the layers without rotary scale their "
                                              "queries";
    audit.add(
        prefix + "attn_temperature_tuning", tuning.is_null() ? Status::kDefault : Status::kUsed,
        tuning.is_null() ? "true" : shown(tuning),
        std::string(tuning.is_null() ? "absent: " + model_type + "'s default; " : "") +
            (applies ? "the queries of the layers without rotary are scaled by position (" + which +
                           "): log1p(floor((p + 1) / floor_scale)) * attn_scale + 1 "
                           "(HfRopeConfig::attention_temperature)"
                     : not_applied));
    const c10::optional<double> floor_scale = number(source, config, "floor_scale", top);
    const c10::optional<double> attn_scale = number(source, config, "attn_scale", top);
    if (applies) {
      audit.add(prefix + "floor_scale", floor_scale ? Status::kUsed : Status::kDefault,
                floor_scale ? shown(field(config, "floor_scale")) : "8192",
                std::string(floor_scale ? "" : "absent: " + model_type + "'s default; ") +
                    "the temperature's step of positions");
      audit.add(prefix + "attn_scale", attn_scale ? Status::kUsed : Status::kDefault,
                attn_scale ? shown(field(config, "attn_scale")) : "0.1",
                std::string(attn_scale ? "" : "absent: " + model_type + "'s default; ") +
                    "the temperature's weight of the logarithm");
      const std::string who = source + ": " + top + "floor_scale / attn_scale";
      const detail::CallerScope caller(detail::CallerScope::Rename{}, who.c_str());
      detail::check_attention_temperature(floor_scale.value_or(8192.0), attn_scale.value_or(0.1));
      result.attention_temperature = AttentionTemperatureOptions()
                                         .floor_scale(floor_scale.value_or(8192.0))
                                         .attn_scale(attn_scale.value_or(0.1));
    } else {
      for (const char* key : {"floor_scale", "attn_scale"}) {
        if (!field(config, key).is_null()) {
          audit.add(prefix + key, Status::kIgnored, shown(field(config, key)), not_applied);
        }
      }
    }
  } else if (!tuning.is_null()) {
    audit.add(prefix + "attn_temperature_tuning", Status::kIgnored, shown(tuning),
              "only Llama 4's code reads it, not " +
                  (model_type.empty() ? "this model's" : model_type + "'s"));
  }
  if (beta_types && !field(parameters, "llama_4_scaling_beta").is_null()) {
    const double beta = *number(source, parameters, "llama_4_scaling_beta", where);
    // (the rope parameters' value after transformers' standardize_rope_params: for the types that
    // read it, a top-level value wins and max_position_embeddings fills it in)
    const c10::optional<int64_t> original =
        rope_type->reads_original
            ? scaling.original_max_position_embeddings()
            : integer(source, parameters, "original_max_position_embeddings", where);
    TORCH_CHECK(original, source, ": ", where, "original_max_position_embeddings is missing, but ",
                model_type,
                "'s code counts the positions of its query temperature (llama_4_scaling_beta) in "
                "it; add it to the rope parameters");
    const std::string who = source + ": " + where_string + "llama_4_scaling_beta";
    const detail::CallerScope caller(detail::CallerScope::Rename{}, who.c_str());
    detail::check_attention_temperature(static_cast<double>(*original), beta);
    // (its code scales [B, H, L, D] queries, after the rotation)
    result.attention_temperature = AttentionTemperatureOptions()
                                       .form(AttentionTemperatureForm::kMinistral3)
                                       .floor_scale(static_cast<double>(*original))
                                       .attn_scale(beta)
                                       .heads_first(true);
  }
}

void ConfigReader::read_pairing() {
  // DeepSeek-V3's regrouping of pairs (2i, 2i + 1) into halves.
  const bool interleave_by_key =
      code_rule != nullptr && code_rule->rule == CodeRule::kDeinterleaveIfRopeInterleave;
  deinterleave = code_rule != nullptr && code_rule->rule == CodeRule::kDeinterleave;
  if (interleave_by_key) {
    const json& value = field(config, "rope_interleave");
    TORCH_CHECK(value.is_null() || value.is_boolean(), source, ": ", top,
                "rope_interleave must be true or false, but is a ", type_name(value));
    deinterleave = value.is_null() || value.get<bool>();
    audit.add(prefix + "rope_interleave", value.is_null() ? Status::kDefault : Status::kUsed,
              deinterleave ? "true" : "false",
              std::string(value.is_null() ? "absent: true, " + model_type + "'s default; " : "") +
                  (deinterleave ? "pairs (2i, 2i + 1) regrouped into halves: deinterleave"
                                : "pairs (i, i + D/2), as the config's channels are"));
  } else if (deinterleave && !field(config, "rope_interleave").is_null()) {
    audit.add(prefix + "rope_interleave", Status::kIgnored, shown(field(config, "rope_interleave")),
              model_type + "'s code regroups the pairs whatever it says");
  }
  for (const ModelRule& rule : model_rules()) {
    const json& value = field(config, rule.key);
    const std::string key = rule.key;
    const bool read_here =
        (defaults.neox_keys && (key == "rotary_pct" || key == "rotary_emb_base")) ||
        (defaults.rotary_dim_key && key == "rotary_dim") || key == "qk_rope_head_dim" ||
        ((interleave_by_key || deinterleave) && key == "rope_interleave");
    if (!read_here && key == "rope_interleave" && value.is_boolean() && !value.get<bool>()) {
      audit.add(prefix + rule.key, Status::kIgnored, "false",
                "false: no regrouping of the pairs, as posenc's options have it");
      continue;
    }
    if (!value.is_null() && !read_here) {
      audit.add_rule(prefix + rule.key, shown(value), rule.reason);
    }
  }
}

// The warning (the error when strict) that names the keys posenc does not apply.
void ConfigReader::check_unapplied() {
  if (!audit.unapplied().empty()) {
    std::string keys;
    for (const std::string& key : audit.unapplied()) {
      keys += (keys.empty() ? "" : ", ") + key;
    }
    TORCH_CHECK(!read.strict, source, ": posenc does not apply ", keys,
                " (an unknown rope parameter, or a rule of the model's own code), so its RoPE may "
                "differ from the model's; posenc rope --audit says why for each key. Remove the "
                "keys to read the config anyway, or read it without strict to be warned only");
    TORCH_WARN(source, ": posenc does not apply ", keys,
               " (an unknown rope parameter, or a rule of the model's own code), so its RoPE may "
               "differ from the model's; posenc rope --audit says why for each key");
  }
}

void ConfigReader::read_mrope() {
  const char* where = where_string.c_str();
  // Multimodal RoPE: mrope_section (Qwen2-VL, Qwen2.5-VL) and mrope_interleaved (Qwen3-VL).
  if (!field(parameters, "mrope_section").is_null()) {
    for (const double size : numbers(source, parameters, "mrope_section", where)) {
      TORCH_CHECK(size >= 0 && size < 9.0e15 && std::floor(size) == size, source, ": ", where,
                  "mrope_section must hold whole numbers in [0, 9e15), but holds ", size);
      mrope_section.push_back(static_cast<int64_t>(size));
    }
  }
  const json& interleaved = field(parameters, "mrope_interleaved");
  TORCH_CHECK(interleaved.is_null() || interleaved.is_boolean(), source, ": ", where,
              "mrope_interleaved must be true or false, but is a ", type_name(interleaved));
  mrope_interleaved = !interleaved.is_null() && interleaved.get<bool>();
  if (mrope != nullptr) { // the model's code decides (mrope_rule)
    if (mrope_section.empty()) {
      mrope_section = mrope->section;
      audit.add(where_string + "mrope_section", Status::kDefault, json(mrope->section).dump(),
                "absent: " + model_type + "'s code takes these sections");
    }
    if (interleaved.is_null() && mrope->interleaved) {
      audit.add(where_string + "mrope_interleaved", Status::kDefault, "true",
                "absent: " + model_type + "'s code always interleaves the sections");
    }
    mrope_interleaved = mrope->interleaved;
    if (mrope->hw_alternating) { // (height, width, time) -> posenc's (time, height, width)
      TORCH_CHECK(mrope_section.size() == 3, source, ": ", where,
                  "mrope_section must hold three sizes (height, width, time), but holds ",
                  mrope_section.size());
      mrope_section = {mrope_section[2], mrope_section[0], mrope_section[1]};
      TORCH_CHECK(mrope_section[1] == mrope_section[2], source, ": ", where,
                  "mrope_section must give as many height as width frequencies (", model_type,
                  "'s code alternates them), but gives [", mrope_section[1], ", ", mrope_section[2],
                  ", ", mrope_section[0], "] (height, width, time)");
    }
  }
  // (after the model's own sections: transformers accepts "mrope" without them there)
  TORCH_CHECK(!block.mrope_alias || !mrope_section.empty(), source, ": ", where,
              "rope type 'mrope' needs mrope_section");
}

RotaryEmbeddingOptions ConfigReader::options() const {
  return RotaryEmbeddingOptions(head_dim, *max_positions)
      .base(base)
      .rotary_dim(rotary_dim)
      .scaling(scaling)
      .mrope_section(mrope_section)
      .mrope_interleaved(mrope_interleaved)
      .mrope_hw_alternating(mrope != nullptr && mrope->hw_alternating)
      .pairing(interleaved_pairs ? RotaryPairing::kInterleaved : RotaryPairing::kHalfSplit)
      .deinterleave(deinterleave)
      .inverse(code_rule != nullptr && code_rule->rule == CodeRule::kInverse)
      .rotate_last_channels(code_rule != nullptr &&
                            code_rule->rule == CodeRule::kInterleavedLastChannels);
}

} // namespace

const char* to_string(HfConfigKey::Status status) {
  switch (status) {
    case Status::kUsed:
      return "used";
    case Status::kDefault:
      return "default";
    case Status::kIgnored:
      return "ignored";
    case Status::kUnknown:
      return "unknown";
  }
  return "?";
}

HfRopeConfig read_hf_rope_config(const std::string& json_text, const std::string& source,
                                 const HfConfigReadOptions& read) {
  ConfigReader reader(source, read);
  return reader.run(json_text);
}

HfRopeConfig read_hf_rope_config_file(const std::string& path, const HfConfigReadOptions& read) {
  std::ifstream file(path, std::ios::binary);
  TORCH_CHECK(file.good(), "read_hf_rope_config_file: cannot open '", path, "'");
  // (read up to one byte past the limit: a file past it, or one without an end such as
  // /dev/zero, is refused by the limit's check, not by exhausting memory)
  std::string text;
  char chunk[1 << 16];
  while (text.size() <= detail::kMaxConfigFileBytes &&
         file.read(chunk, sizeof(chunk)).gcount() > 0) {
    text.append(chunk, static_cast<size_t>(file.gcount()));
  }
  TORCH_CHECK(!file.bad(), "read_hf_rope_config_file: reading '", path, "' failed");
  TORCH_CHECK(text.size() <= detail::kMaxConfigFileBytes, "read_hf_rope_config_file: '", path,
              "' has more than ", detail::kMaxConfigFileBytes,
              " bytes, more than posenc reads of a config.json (transformers' are a few kilobytes "
              "to a few megabytes); pass the model's config.json");
  return read_hf_rope_config(text, path, read);
}

} // namespace io
} // namespace posenc
