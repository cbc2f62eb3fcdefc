#pragma once

// The RoPE variants as a table: one entry per rope type (transformers' `ROPE_INIT_FUNCTIONS`),
// holding everything that differs between types — its name, the rope_parameters keys it reads
// and those it needs, when its frequencies depend on the call's length, what pretty_print shows,
// its own checks and its frequencies. The options, the module, the rope_frequencies operator, the
// Hugging Face config reader, the CLI and posenc.nn (through the operator) all read this table;
// nothing else names a rope type. Adding a rope type: a RopeType enumerator, one entry in
// rope_types.cpp and a test against transformers' own function (CONTRIBUTING.md).

#include "detail/rotary.h"

#include <posenc/enums.h>
#include <posenc/options/rotary_embedding.h>

#include <c10/util/Optional.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <string>
#include <vector>

namespace posenc {
namespace detail {

/// How a variant's frequencies depend on the call's length (its largest position + 1).
enum class RopeSwitch {
  /// They never do.
  kNever,
  /// Past max_position_embeddings the base grows with the length (dynamic NTK:
  /// base * (factor * L / max - (factor - 1))^(R / (R - 2))).
  kNtkBase,
  /// Past original_max_position_embeddings a second, fixed set of frequencies (longrope's long
  /// factors) replaces the first.
  kLongFactors,
};

/// One rope type.
struct RopeTypeEntry {
  RopeType type;
  /// transformers' name (`rope_parameters.rope_type`).
  const char* name;
  /// The rope_parameters keys it reads (transformers' names; rope_type and rope_theta aside).
  std::vector<const char*> parameters;
  /// The keys a config must give (transformers raises without them), and what the message about a
  /// missing one adds (the values of a known model), or "".
  std::vector<const char*> required;
  const char* required_hint = "";
  /// It reads original_max_position_embeddings (default: max_position_embeddings; a top-level
  /// value in config.json wins, as transformers' standardize_rope_params does).
  bool reads_original = false;
  /// Without a factor it uses max_position_embeddings / original_max_position_embeddings.
  bool factor_from_lengths = false;
  /// It has an attention factor of its own (shown by pretty_print, applied to cos/sin).
  bool has_attention_factor = false;
  /// The rotated width is the whole head: `partial_rotary_factor` in rope_parameters sets how many
  /// of its pairs turn (the others get frequency 0) instead of narrowing the rotated channels.
  bool rotates_whole_head = false;
  RopeSwitch switches = RopeSwitch::kNever;
  /// Checks beyond the common ones (nullptr: none); messages name the caller.
  void (*check)(const RopeSpec& spec) = nullptr;
  /// The frequencies and the variant's attention factor for a call of length `seq_len` (unset:
  /// within the model's context). Before the freq_factors divisors and the common checks.
  RopeFrequencies (*frequencies)(const RopeSpec& spec, c10::optional<int64_t> seq_len) = nullptr;
};

/// Every rope type posenc knows, in RopeType order.
const std::vector<RopeTypeEntry>& rope_type_table();

/// The entry of `type`.
const RopeTypeEntry& rope_type_entry(RopeType type);

/// The entry named `name`, or nullptr.
const RopeTypeEntry* find_rope_type(c10::string_view name);

/// "default, linear, ..., proportional": the names, for messages.
std::string rope_type_names();

/// Every rope_parameters key some rope type reads (transformers' names), plus
/// max_position_embeddings (a config field beside the block, accepted in it by the operator and
/// posenc.nn), for messages and the readers' checks.
const std::vector<const char*>& rope_parameter_keys();

/// What pretty_print shows of a scaling beyond its type: ", factor=8, original_max_position_embeddings=8192, ...".
std::string describe_rope_scaling(const RopeSpec& spec, double variant_attention_factor);

/// Reads a rope_parameters block given as JSON text (transformers' keys: "rope_type" or "type",
/// and those of rope_parameter_keys()) into RopeScalingOptions, with transformers' defaults. A
/// key posenc does not know, a value of the wrong type or an unknown rope type is a c10::Error
/// that names the caller and the key. transformers' own block may be passed as it is: its
/// rope_theta must equal `base`, its mrope_section / mrope_interleaved do not change the
/// frequencies, and a partial_rotary_factor other than 1 is refused for the types whose rotated
/// width it narrows (the caller passes that width). The rope_frequencies operator's
/// `rope_parameters` argument.
RopeScalingOptions rope_scaling_from_json(c10::string_view json_text, double base);

/// The rope_parameters block of `scaling` as JSON text: the inverse of rope_scaling_from_json
/// (only the keys its type reads, and those that are set).
std::string rope_scaling_to_json(const RopeScalingOptions& scaling);

} // namespace detail
} // namespace posenc
