#pragma once

// Reading a rope_parameters / rope_scaling block of JSON (nlohmann-json, private to the libraries
// that parse JSON): the one reader of rope parameters, used by the rope_frequencies operator
// (detail::rope_scaling_from_json) and the Hugging Face config reader (posenc::io).

#include <posenc/options/rotary_embedding.h>

#include <c10/util/Optional.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace posenc {
namespace detail {

/// A rope block read: the scaling, and the keys of the block that are not rope parameters posenc
/// reads (the caller decides whether they are errors).
struct RopeBlock {
  RopeScalingOptions scaling;
  /// transformers 4's type "mrope" (Qwen2-VL): the default frequencies with M-RoPE sections.
  bool mrope_alias = false;
  std::vector<std::string> other_keys;
};

/// Where a block comes from.
enum class RopeBlockKind {
  /// A model's config.json: the keys transformers requires must be there (RopeTypeEntry::required);
  /// keys that are not rope parameters are returned in other_keys.
  kConfig,
  /// The arguments of a call (the rope_frequencies operator, posenc.nn): missing keys take
  /// RopeScalingOptions' defaults, as the C++ options do; a key that is neither a rope parameter
  /// nor one of rope_theta, mrope_section, mrope_interleaved (transformers' block holds them too)
  /// is an error, before any other check (a misspelt key is the cause of what follows).
  kArguments,
};

/// The number a JSON value spells when JSON has no literal for it: the strings "nan", "inf" and
/// "-inf" (posenc.nn sends a keyword argument that is not finite so, so that the check of the
/// options, not the JSON reader, says what must hold); nullopt for any other value.
c10::optional<double> spelled_number(const nlohmann::json& value);

/// Reads `block` (a JSON object or null): the rope type from "rope_type" (else "type", else
/// "default"), then every key of rope_parameter_keys() that is present, each checked for its type
/// (numbers, whole numbers, booleans, lists of numbers), with transformers' readings (yarn's
/// beta_fast / beta_slow of 0 mean the defaults, as `get(...) or 32` does). Messages name
/// `source` and the key after `where` (e.g. "config.json", "text_config.rope_parameters.").
/// kArguments blocks may spell numbers as spelled_number reads them; a config's may not.
RopeBlock read_rope_block(const nlohmann::json& block, const std::string& source,
                          const std::string& where, RopeBlockKind kind);

} // namespace detail
} // namespace posenc
