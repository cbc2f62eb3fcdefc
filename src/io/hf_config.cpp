#include <posenc/io/hf_config.h>

#include "detail/checks.h"
#include "detail/rope_parameters.h"
#include "detail/rope_types.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

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
              " must be a whole number within posenc's limit of 9e15 in magnitude, but is ", *value);
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

json parse(const std::string& text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::exception& error) {
    TORCH_CHECK(false, source, ": not valid JSON (", error.what(), ")");
  }
}

} // namespace

HfRopeConfig read_hf_rope_config(const std::string& json_text, const std::string& source) {
  const json document = parse(json_text, source);
  TORCH_CHECK(document.is_object(), source, ": expected a JSON object (a model's config.json), but "
              "got a ", type_name(document));
  // Vision-language models (Qwen2-VL, LLaVA, ...) keep the language model's fields in text_config.
  const bool nested = field(document, "num_attention_heads").is_null() &&
                      field(document, "text_config").is_object();
  const json& config = nested ? field(document, "text_config") : document;
  const char* top = nested ? "text_config." : "";

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
  const bool v5 = !scaling_given && !field(config, "rope_parameters").is_null();
  const json& rope = v5 ? field(config, "rope_parameters") : scaling_form;
  static const json empty_object = json::object();
  TORCH_CHECK(rope.is_null() || rope.is_object(), source, ": ", top,
              v5 ? "rope_parameters" : "rope_scaling", " must be an object, but is a ",
              type_name(rope));
  const json& parameters = rope.is_null() ? empty_object : rope;
  const std::string where_string =
      std::string(top) + (v5 ? "rope_parameters." : "rope_scaling.");
  const char* where = where_string.c_str();
  for (const auto& item : parameters.items()) {
    TORCH_CHECK(!item.value().is_object(), source, ": ", where, item.key(),
                " is an object: per-layer rope parameters (one set per layer type) are not "
                "supported; pass the config of one layer type");
  }

  HfRopeConfig result;
  const c10::optional<int64_t> heads = integer(source, config, "num_attention_heads", top);
  const c10::optional<int64_t> head_dim_field = integer(source, config, "head_dim", top);
  const c10::optional<int64_t> hidden = integer(source, config, "hidden_size", top);
  TORCH_CHECK(heads && *heads >= 1, source, ": ", top,
              "num_attention_heads must be a whole number >= 1, but is ",
              heads ? std::to_string(*heads) : std::string("missing"));
  TORCH_CHECK(head_dim_field || hidden, source, ": ", top,
              "head_dim or hidden_size is needed to know the width of a head, but neither is "
              "given");
  const int64_t head_dim = head_dim_field ? *head_dim_field : *hidden / *heads;
  TORCH_CHECK(head_dim >= 2, source, ": the head width must be >= 2, but is ", head_dim,
              head_dim_field ? " (head_dim)" : " (hidden_size / num_attention_heads)");
  result.num_attention_heads = *heads;
  result.num_key_value_heads =
      integer(source, config, "num_key_value_heads", top).value_or(*heads);
  TORCH_CHECK(result.num_key_value_heads >= 1 && *heads % result.num_key_value_heads == 0, source,
              ": ", top, "num_key_value_heads must divide num_attention_heads (", *heads,
              "), but is ", result.num_key_value_heads);

  const c10::optional<int64_t> max_positions =
      integer(source, config, "max_position_embeddings", top);
  TORCH_CHECK(max_positions && *max_positions >= 1, source, ": ", top,
              "max_position_embeddings must be a whole number >= 1 (the cos/sin caches hold that "
              "many positions), but is ",
              max_positions ? std::to_string(*max_positions) : std::string("missing"));

  // The rope type and its parameters (detail/rope_types.cpp: the one reader of rope parameters).
  const detail::RopeBlock block =
      detail::read_rope_block(parameters, source, where, detail::RopeBlockKind::kConfig);
  const detail::RopeTypeEntry& entry = detail::rope_type_entry(block.scaling.type());
  RopeScalingOptions scaling = block.scaling;
  scaling.max_position_embeddings(*max_positions);
  if (entry.reads_original) {
    // A top-level original_max_position_embeddings wins (Phi-3), then the rope parameters', then
    // max_position_embeddings (transformers' standardize_rope_params).
    const c10::optional<int64_t> original =
        integer(source, config, "original_max_position_embeddings", top);
    scaling.original_max_position_embeddings(
        original ? original
                 : scaling.original_max_position_embeddings().value_or(*max_positions));
  } else {
    scaling.original_max_position_embeddings(c10::nullopt);
  }

  // rope_theta and partial_rotary_factor: inside the rope parameters first, then beside them.
  const double base = number(source, parameters, "rope_theta", where)
                          .value_or(number(source, config, "rope_theta", top).value_or(10000.0));
  TORCH_CHECK(base >= 1.0 / detail::kMaxFrequency, source,
              ": rope_theta must be >= 5.2e-290 (so that every angle is a finite number), but is ",
              base, "; LLaMA 3 uses 500000");
  const double partial = number(source, parameters, "partial_rotary_factor", where)
                             .value_or(number(source, config, "partial_rotary_factor", top)
                                           .value_or(1.0));
  TORCH_CHECK(partial > 0.0 && partial <= 1.0, source,
              ": partial_rotary_factor must lie in (0, 1], but is ", partial);
  // A type that rotates the whole head (proportional) turns only a share of its pairs instead.
  scaling.partial_rotary_factor(entry.rotates_whole_head ? partial : 1.0);
  const auto rotary_dim = entry.rotates_whole_head
                              ? head_dim
                              : static_cast<int64_t>(static_cast<double>(head_dim) * partial);
  TORCH_CHECK(rotary_dim >= 2 && rotary_dim % 2 == 0, source,
              ": the rotated width int(head_dim * partial_rotary_factor) = int(", head_dim, " * ",
              partial, ") = ", rotary_dim, " must be even and >= 2");

  // Multimodal RoPE: mrope_section (Qwen2-VL, Qwen2.5-VL) and mrope_interleaved (Qwen3-VL).
  std::vector<int64_t> mrope_section;
  if (!field(parameters, "mrope_section").is_null()) {
    for (const double size : numbers(source, parameters, "mrope_section", where)) {
      TORCH_CHECK(size >= 0 && size < 9.0e15 && std::floor(size) == size, source, ": ", where,
                  "mrope_section must hold whole numbers in [0, 9e15), but holds ", size);
      mrope_section.push_back(static_cast<int64_t>(size));
    }
  }
  TORCH_CHECK(!block.mrope_alias || !mrope_section.empty(), source, ": ", where,
              "rope type 'mrope' needs mrope_section");
  const json& interleaved = field(parameters, "mrope_interleaved");
  TORCH_CHECK(interleaved.is_null() || interleaved.is_boolean(), source, ": ", where,
              "mrope_interleaved must be true or false, but is a ", type_name(interleaved));

  result.options = RotaryEmbeddingOptions(head_dim, *max_positions)
                       .base(base)
                       .rotary_dim(rotary_dim)
                       .scaling(scaling)
                       .mrope_section(mrope_section)
                       .mrope_interleaved(!interleaved.is_null() && interleaved.get<bool>());
  return result;
}

HfRopeConfig read_hf_rope_config_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  TORCH_CHECK(file.good(), "read_hf_rope_config_file: cannot open '", path, "'");
  std::ostringstream text;
  text << file.rdbuf();
  TORCH_CHECK(!file.bad(), "read_hf_rope_config_file: reading '", path, "' failed");
  return read_hf_rope_config(text.str(), path);
}

} // namespace io
} // namespace posenc
