#include "detail/rope_types.h"

#include "detail/checks.h"
#include "detail/json_text.h"
#include "detail/rope_parameters.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace posenc {
namespace detail {
namespace {

constexpr double kPi = 3.14159265358979323846;

bool positive_number(double value) {
  return std::isfinite(value) && value > 0.0;
}

// base^(-2i / R) for i < R / 2: the plain RoPE frequencies (HF: 1 / base^(arange(0, R, 2) / R)).
std::vector<double> default_frequencies(double base, int64_t rotary_dim) {
  std::vector<double> inv_freq(static_cast<size_t>(rotary_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double exponent = static_cast<double>(2 * i) / static_cast<double>(rotary_dim);
    inv_freq[i] = 1.0 / std::pow(base, exponent);
  }
  return inv_freq;
}

// YaRN's and LongRoPE's default factor: the context extension max / original.
double extension_factor(const RopeScalingOptions& scaling) {
  const auto max = static_cast<double>(*scaling.max_position_embeddings());
  const auto original = static_cast<double>(*scaling.original_max_position_embeddings());
  return scaling.factor().value_or(max / original);
}

// YaRN's mscale: 1 for scale <= 1, else 0.1 * mscale * ln(scale) + 1.
double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// --- the frequencies of each type (transformers' _compute_*_parameters) ------------------------

RopeFrequencies default_type(const RopeSpec& spec, c10::optional<int64_t>) {
  return {default_frequencies(spec.base, spec.rotary_dim)};
}

RopeFrequencies linear_type(const RopeSpec& spec, c10::optional<int64_t>) {
  RopeFrequencies result{default_frequencies(spec.base, spec.rotary_dim)};
  for (double& frequency : result.inv_freq) {
    frequency /= *spec.scaling.factor();
  }
  return result;
}

RopeFrequencies dynamic_type(const RopeSpec& spec, c10::optional<int64_t> seq_len) {
  // NTK-aware: base * (factor * L / max - (factor - 1))^(R / (R - 2)), L >= max.
  const double max = static_cast<double>(*spec.scaling.max_position_embeddings());
  const double length = std::max(static_cast<double>(seq_len.value_or(0)), max);
  const double dim = static_cast<double>(spec.rotary_dim);
  const double factor = *spec.scaling.factor();
  const double base =
      spec.base * std::pow(factor * length / max - (factor - 1.0), dim / (dim - 2.0));
  return {default_frequencies(base, spec.rotary_dim)};
}

RopeFrequencies yarn_type(const RopeSpec& spec, c10::optional<int64_t>) {
  const RopeScalingOptions& scaling = spec.scaling;
  const double factor = extension_factor(scaling);
  const double dim = static_cast<double>(spec.rotary_dim);
  RopeFrequencies result;
  if (scaling.attention_factor()) {
    result.variant_attention_factor = *scaling.attention_factor();
  } else if (scaling.mscale().value_or(0.0) != 0.0 &&
             scaling.mscale_all_dim().value_or(0.0) != 0.0) {
    result.variant_attention_factor =
        yarn_mscale(factor, *scaling.mscale()) / yarn_mscale(factor, *scaling.mscale_all_dim());
  } else {
    result.variant_attention_factor = yarn_mscale(factor, 1.0);
  }
  // The dimension whose wavelength makes `rotations` turns over the original context.
  const double original = static_cast<double>(*scaling.original_max_position_embeddings());
  const auto correction_dim = [&](double rotations) {
    return dim * std::log(original / (rotations * 2.0 * kPi)) / (2.0 * std::log(spec.base));
  };
  double low = correction_dim(scaling.beta_fast());
  double high = correction_dim(scaling.beta_slow());
  if (scaling.truncate()) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1.0);
  if (low == high) {
    high += 0.001; // as HF: no singular ramp
  }
  const std::vector<double> extrapolation = default_frequencies(spec.base, spec.rotary_dim);
  result.inv_freq.resize(extrapolation.size());
  for (size_t i = 0; i < extrapolation.size(); ++i) {
    const double ramp = std::min(1.0, std::max(0.0, (static_cast<double>(i) - low) / (high - low)));
    const double keep = 1.0 - ramp; // the share of the unscaled (extrapolated) frequency
    result.inv_freq[i] = extrapolation[i] / factor * (1.0 - keep) + extrapolation[i] * keep;
  }
  return result;
}

RopeFrequencies longrope_type(const RopeSpec& spec, c10::optional<int64_t> seq_len) {
  const RopeScalingOptions& scaling = spec.scaling;
  const int64_t original = *scaling.original_max_position_embeddings();
  const double factor = extension_factor(scaling);
  RopeFrequencies result;
  const double log_original = std::log(static_cast<double>(original));
  result.variant_attention_factor = scaling.attention_factor().value_or(
      factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / log_original));
  const std::vector<double>& ext =
      seq_len && *seq_len > original ? scaling.long_factor() : scaling.short_factor();
  result.inv_freq = default_frequencies(spec.base, spec.rotary_dim);
  for (size_t i = 0; i < result.inv_freq.size(); ++i) {
    result.inv_freq[i] /= ext[i];
  }
  return result;
}

RopeFrequencies llama3_type(const RopeSpec& spec, c10::optional<int64_t>) {
  const RopeScalingOptions& scaling = spec.scaling;
  const double factor = *scaling.factor();
  const double old_context = static_cast<double>(*scaling.original_max_position_embeddings());
  const double low_wavelength = old_context / scaling.low_freq_factor();
  const double high_wavelength = old_context / scaling.high_freq_factor();
  RopeFrequencies result{default_frequencies(spec.base, spec.rotary_dim)};
  for (double& frequency : result.inv_freq) {
    const double wavelength = 2.0 * kPi / frequency;
    // (low_freq_factor == high_freq_factor, Llama 4 Scout: one bound and no band between,
    // transformers' where() selects no smoothed value; at a wavelength exactly on the bound its
    // 0 / 0 would be NaN, and posenc keeps the frequency, the limit of a narrowing band.)
    if (wavelength > low_wavelength) {
      frequency /= factor;
    } else if (!(wavelength < high_wavelength) &&
               scaling.high_freq_factor() > scaling.low_freq_factor()) {
      const double smooth = (old_context / wavelength - scaling.low_freq_factor()) /
                            (scaling.high_freq_factor() - scaling.low_freq_factor());
      frequency = (1.0 - smooth) * frequency / factor + smooth * frequency;
    }
  }
  return result;
}

// Gemma 4's proportional RoPE: the first int(partial * R // 2) pairs turn with base^(-2i / R) (R
// the whole head), the others not at all (frequency 0), everything divided by factor (default 1).
RopeFrequencies proportional_type(const RopeSpec& spec, c10::optional<int64_t>) {
  const RopeScalingOptions& scaling = spec.scaling;
  const auto turning = static_cast<size_t>(
      std::floor(scaling.partial_rotary_factor() * static_cast<double>(spec.rotary_dim) / 2.0));
  RopeFrequencies result{default_frequencies(spec.base, spec.rotary_dim)};
  for (size_t i = 0; i < result.inv_freq.size(); ++i) {
    result.inv_freq[i] = i < turning ? result.inv_freq[i] / scaling.factor().value_or(1.0) : 0.0;
  }
  return result;
}

// Hunyuan's NTK-alpha: the default frequencies of base * alpha^(R / (R - 2)), for every length
// (transformers' compute_ntk_alpha_rope_parameters).
RopeFrequencies ntk_alpha_type(const RopeSpec& spec, c10::optional<int64_t>) {
  const double dim = static_cast<double>(spec.rotary_dim);
  return {default_frequencies(spec.base * std::pow(*spec.scaling.alpha(), dim / (dim - 2.0)),
                              spec.rotary_dim)};
}

// --- the checks of each type ------------------------------------------------------------------

void check_dynamic(const RopeSpec& spec) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(spec.rotary_dim >= 4, who,
              ": dynamic NTK scaling raises the base to the power R / (R - 2), so it needs a "
              "rotated width R >= 4, but got ",
              spec.rotary_dim);
}

void check_yarn(const RopeSpec& spec) {
  static constexpr detail::CallerName who{};
  const RopeScalingOptions& scaling = spec.scaling;
  TORCH_CHECK(positive_number(scaling.beta_fast()) && positive_number(scaling.beta_slow()), who,
              ": yarn's beta_fast and beta_slow must be finite numbers > 0, but got ",
              scaling.beta_fast(), " and ", scaling.beta_slow());
  TORCH_CHECK(spec.base > 1.0, who, ": yarn divides by log(base), so base must be > 1, but got ",
              spec.base);
  for (const auto& value : {scaling.mscale(), scaling.mscale_all_dim()}) {
    TORCH_CHECK(!value || std::isfinite(*value), who,
                ": yarn's mscale and mscale_all_dim must be finite, but got ", *value);
  }
}

void check_longrope(const RopeSpec& spec) {
  static constexpr detail::CallerName who{};
  const RopeScalingOptions& scaling = spec.scaling;
  const int64_t half = spec.rotary_dim / 2;
  for (const auto* factors : {&scaling.short_factor(), &scaling.long_factor()}) {
    TORCH_CHECK(static_cast<int64_t>(factors->size()) == half, who,
                ": longrope needs short_factor and long_factor with one value per frequency "
                "(R / 2 = ",
                half, "), but got ", scaling.short_factor().size(), " and ",
                scaling.long_factor().size(), " values");
    for (const double factor : *factors) {
      TORCH_CHECK(positive_number(factor), who,
                  ": longrope's short_factor and long_factor must hold finite numbers > 0, but "
                  "hold ",
                  factor);
    }
  }
}

void check_llama3(const RopeSpec& spec) {
  static constexpr detail::CallerName who{};
  const RopeScalingOptions& scaling = spec.scaling;
  TORCH_CHECK(positive_number(scaling.low_freq_factor()) &&
                  positive_number(scaling.high_freq_factor()) &&
                  scaling.low_freq_factor() <= scaling.high_freq_factor(),
              who, ": llama3 needs 0 < low_freq_factor <= high_freq_factor, but got ",
              scaling.low_freq_factor(), " and ", scaling.high_freq_factor(),
              " (LLaMA 3.1: 1 and 4; Llama 4 Scout: 1 and 1)");
}

void check_proportional(const RopeSpec& spec) {
  static constexpr detail::CallerName who{};
  const double partial = spec.scaling.partial_rotary_factor();
  TORCH_CHECK(partial >= 0.0 && partial <= 1.0, who,
              ": proportional RoPE turns int(partial_rotary_factor * R // 2) of the R / 2 pairs, "
              "so partial_rotary_factor must lie in [0, 1], but got ",
              partial);
}

void check_ntk_alpha(const RopeSpec& spec) {
  static constexpr detail::CallerName who{};
  const c10::optional<double> alpha = spec.scaling.alpha();
  TORCH_CHECK(alpha.has_value(), who,
              ": rope type 'ntk_alpha' needs alpha; set RopeScalingOptions::alpha (HF: "
              "rope_parameters.alpha, e.g. 1000 for Hunyuan-A13B)");
  TORCH_CHECK(positive_number(*alpha), who, ": ntk_alpha's alpha must be a finite number > 0, but got ",
              *alpha);
  TORCH_CHECK(spec.rotary_dim >= 4, who,
              ": ntk_alpha raises alpha to the power R / (R - 2), so it needs a rotated width R >= "
              "4, but got ",
              spec.rotary_dim);
}

// --- the parameters (one reader for the operator and the config reader) ----------------------

using nlohmann::json;

enum class Kind { kNumber, kCount, kFlag, kNumbers };

struct Parameter {
  const char* key;
  Kind kind;
  void (*set)(RopeScalingOptions& scaling, const json& value);
  // the value in `scaling` for rope_scaling_to_json, or null when unset
  json (*get)(const RopeScalingOptions& scaling);
};

template <typename T>
json optional_json(const c10::optional<T>& value) {
  return value ? json(*value) : json();
}

// transformers' `get(key) or default`: 0 (or null) reads as the default.
double or_default(const json& value, double fallback) {
  const double read = value.get<double>();
  return read != 0.0 ? read : fallback;
}

const std::vector<Parameter>& parameters() {
  static const std::vector<Parameter> table = {
      {"factor", Kind::kNumber, [](RopeScalingOptions& s, const json& v) { s.factor(v.get<double>()); },
       [](const RopeScalingOptions& s) { return optional_json(s.factor()); }},
      {"max_position_embeddings", Kind::kCount,
       [](RopeScalingOptions& s, const json& v) { s.max_position_embeddings(v.get<int64_t>()); },
       [](const RopeScalingOptions& s) { return optional_json(s.max_position_embeddings()); }},
      {"original_max_position_embeddings", Kind::kCount,
       [](RopeScalingOptions& s, const json& v) {
         s.original_max_position_embeddings(v.get<int64_t>());
       },
       [](const RopeScalingOptions& s) {
         return optional_json(s.original_max_position_embeddings());
       }},
      {"beta_fast", Kind::kNumber,
       [](RopeScalingOptions& s, const json& v) { s.beta_fast(or_default(v, 32.0)); },
       [](const RopeScalingOptions& s) { return json(s.beta_fast()); }},
      {"beta_slow", Kind::kNumber,
       [](RopeScalingOptions& s, const json& v) { s.beta_slow(or_default(v, 1.0)); },
       [](const RopeScalingOptions& s) { return json(s.beta_slow()); }},
      {"mscale", Kind::kNumber, [](RopeScalingOptions& s, const json& v) { s.mscale(v.get<double>()); },
       [](const RopeScalingOptions& s) { return optional_json(s.mscale()); }},
      {"mscale_all_dim", Kind::kNumber,
       [](RopeScalingOptions& s, const json& v) { s.mscale_all_dim(v.get<double>()); },
       [](const RopeScalingOptions& s) { return optional_json(s.mscale_all_dim()); }},
      {"truncate", Kind::kFlag, [](RopeScalingOptions& s, const json& v) { s.truncate(v.get<bool>()); },
       [](const RopeScalingOptions& s) { return json(s.truncate()); }},
      {"attention_factor", Kind::kNumber,
       [](RopeScalingOptions& s, const json& v) { s.attention_factor(v.get<double>()); },
       [](const RopeScalingOptions& s) { return optional_json(s.attention_factor()); }},
      {"short_factor", Kind::kNumbers,
       [](RopeScalingOptions& s, const json& v) { s.short_factor(v.get<std::vector<double>>()); },
       [](const RopeScalingOptions& s) { return json(s.short_factor()); }},
      {"long_factor", Kind::kNumbers,
       [](RopeScalingOptions& s, const json& v) { s.long_factor(v.get<std::vector<double>>()); },
       [](const RopeScalingOptions& s) { return json(s.long_factor()); }},
      {"low_freq_factor", Kind::kNumber,
       [](RopeScalingOptions& s, const json& v) { s.low_freq_factor(v.get<double>()); },
       [](const RopeScalingOptions& s) { return json(s.low_freq_factor()); }},
      {"high_freq_factor", Kind::kNumber,
       [](RopeScalingOptions& s, const json& v) { s.high_freq_factor(v.get<double>()); },
       [](const RopeScalingOptions& s) { return json(s.high_freq_factor()); }},
      {"partial_rotary_factor", Kind::kNumber,
       [](RopeScalingOptions& s, const json& v) { s.partial_rotary_factor(v.get<double>()); },
       [](const RopeScalingOptions& s) { return json(s.partial_rotary_factor()); }},
      {"alpha", Kind::kNumber, [](RopeScalingOptions& s, const json& v) { s.alpha(v.get<double>()); },
       [](const RopeScalingOptions& s) { return optional_json(s.alpha()); }},
  };
  return table;
}

const Parameter* find_parameter(const std::string& key) {
  for (const Parameter& parameter : parameters()) {
    if (key == parameter.key) {
      return &parameter;
    }
  }
  return nullptr;
}

// Checks `value` (not null) against `kind`; messages start with context + key.
void check_kind(const json& value, Kind kind, const std::string& context, const std::string& key) {
  switch (kind) {
    case Kind::kNumber:
      TORCH_CHECK(value.is_number(), context, key, " must be a number, but is a ",
                  value.type_name());
      TORCH_CHECK(std::isfinite(value.get<double>()), context, key, " must be finite, but is ",
                  value.get<double>());
      break;
    case Kind::kCount: {
      TORCH_CHECK(value.is_number(), context, key, " must be a whole number, but is a ",
                  value.type_name());
      const double read = value.get<double>();
      TORCH_CHECK(std::isfinite(read) && std::floor(read) == read, context, key,
                  " must be a whole number, but is ", read);
      TORCH_CHECK(std::abs(read) < 9.0e15, context, key,
                  " must be a whole number within posenc's limit of 9e15 in magnitude, but is ",
                  read);
      break;
    }
    case Kind::kFlag:
      TORCH_CHECK(value.is_boolean(), context, key, " must be true or false, but is a ",
                  value.type_name());
      break;
    case Kind::kNumbers:
      TORCH_CHECK(value.is_array(), context, key,
                  " must be a list of numbers (one per frequency), but is a ", value.type_name());
      for (const json& element : value) {
        TORCH_CHECK(element.is_number(), context, key, " must hold numbers only, but holds a ",
                    element.type_name());
        TORCH_CHECK(std::isfinite(element.get<double>()), context, key,
                    " must hold finite numbers, but holds ", element.get<double>());
      }
      break;
  }
}

} // namespace

// --- the table --------------------------------------------------------------------------------

const std::vector<RopeTypeEntry>& rope_type_table() {
  static const std::vector<RopeTypeEntry> table = [] {
    std::vector<RopeTypeEntry> entries(8);
    entries[0].type = RopeType::kDefault;
    entries[0].name = "default";
    entries[0].frequencies = default_type;

    entries[1].type = RopeType::kLinear;
    entries[1].name = "linear";
    entries[1].parameters = {"factor"};
    entries[1].required = {"factor"};
    entries[1].frequencies = linear_type;

    entries[2].type = RopeType::kDynamic;
    entries[2].name = "dynamic";
    entries[2].parameters = {"factor", "max_position_embeddings"};
    entries[2].required = {"factor"};
    entries[2].switches = RopeSwitch::kNtkBase;
    entries[2].check = check_dynamic;
    entries[2].frequencies = dynamic_type;

    entries[3].type = RopeType::kYarn;
    entries[3].name = "yarn";
    entries[3].parameters = {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
                             "mscale", "mscale_all_dim", "truncate", "attention_factor"};
    entries[3].reads_original = true;
    entries[3].factor_from_lengths = true;
    entries[3].has_attention_factor = true;
    entries[3].check = check_yarn;
    entries[3].frequencies = yarn_type;

    entries[4].type = RopeType::kLongRope;
    entries[4].name = "longrope";
    entries[4].parameters = {"factor", "original_max_position_embeddings", "short_factor",
                             "long_factor", "attention_factor"};
    entries[4].required = {"short_factor", "long_factor"};
    entries[4].reads_original = true;
    entries[4].factor_from_lengths = true;
    entries[4].has_attention_factor = true;
    entries[4].switches = RopeSwitch::kLongFactors;
    entries[4].check = check_longrope;
    entries[4].frequencies = longrope_type;

    entries[5].type = RopeType::kLlama3;
    entries[5].name = "llama3";
    entries[5].parameters = {"factor", "original_max_position_embeddings", "low_freq_factor",
                             "high_freq_factor"};
    entries[5].required = {"factor", "low_freq_factor", "high_freq_factor"};
    entries[5].required_hint = " (LLaMA 3.1: factor 8, low_freq_factor 1, high_freq_factor 4)";
    entries[5].reads_original = true;
    entries[5].check = check_llama3;
    entries[5].frequencies = llama3_type;

    entries[6].type = RopeType::kProportional;
    entries[6].name = "proportional";
    entries[6].parameters = {"factor", "partial_rotary_factor"};
    entries[6].rotates_whole_head = true;
    entries[6].check = check_proportional;
    entries[6].frequencies = proportional_type;

    entries[7].type = RopeType::kNtkAlpha;
    entries[7].name = "ntk_alpha";
    entries[7].parameters = {"alpha"};
    entries[7].required = {"alpha"};
    entries[7].required_hint = " (Hunyuan-A13B: alpha 1000)";
    entries[7].check = check_ntk_alpha;
    entries[7].frequencies = ntk_alpha_type;
    return entries;
  }();
  return table;
}

const RopeTypeEntry& rope_type_entry(RopeType type) {
  for (const RopeTypeEntry& entry : rope_type_table()) {
    if (entry.type == type) {
      return entry;
    }
  }
  TORCH_CHECK(false, "posenc: unknown RopeType ", static_cast<int>(type));
}

const RopeTypeEntry* find_rope_type(c10::string_view name) {
  for (const RopeTypeEntry& entry : rope_type_table()) {
    if (name == entry.name) {
      return &entry;
    }
  }
  return nullptr;
}

std::string rope_type_names() {
  std::string names;
  const auto& table = rope_type_table();
  for (size_t i = 0; i < table.size(); ++i) {
    names += i == 0 ? "" : i + 1 == table.size() ? " and " : ", ";
    names += table[i].name;
  }
  return names;
}

const std::vector<const char*>& rope_parameter_keys() {
  static const std::vector<const char*> keys = [] {
    std::vector<const char*> all;
    for (const Parameter& parameter : parameters()) {
      all.push_back(parameter.key);
    }
    return all;
  }();
  return keys;
}

c10::optional<int64_t> rope_switch_length(const RopeSpec& spec) {
  switch (rope_type_entry(spec.scaling.type()).switches) {
    case RopeSwitch::kNtkBase:
      return spec.scaling.max_position_embeddings();
    case RopeSwitch::kLongFactors:
      return spec.scaling.original_max_position_embeddings();
    case RopeSwitch::kNever:
      break;
  }
  return c10::nullopt;
}

std::string describe_rope_scaling(const RopeSpec& spec, double variant_attention_factor) {
  const RopeScalingOptions& scaling = spec.scaling;
  const RopeTypeEntry& entry = rope_type_entry(scaling.type());
  std::ostringstream stream;
  if (scaling.factor()) {
    stream << ", factor=" << *scaling.factor();
  }
  if (entry.switches == RopeSwitch::kNtkBase) {
    stream << ", max_position_embeddings=" << *scaling.max_position_embeddings();
  }
  if (entry.reads_original) {
    stream << ", original_max_position_embeddings=" << *scaling.original_max_position_embeddings();
  }
  if (entry.rotates_whole_head) {
    stream << ", partial_rotary_factor=" << scaling.partial_rotary_factor();
  }
  if (entry.type == RopeType::kNtkAlpha) {
    stream << ", alpha=" << *scaling.alpha();
  }
  if (entry.has_attention_factor) {
    stream << ", attention_factor=" << variant_attention_factor;
    if (!spec.attention_factor_in_cos_sin) {
      stream << " (not in cos/sin)";
    }
  }
  return stream.str();
}

// --- the common checks and the frequencies (rotary.h) ------------------------------------------

void check_rope_spec(const RopeSpec& spec) {
  static constexpr detail::CallerName who{};
  const RopeScalingOptions& scaling = spec.scaling;
  const RopeTypeEntry& entry = rope_type_entry(scaling.type());
  const int64_t half = spec.rotary_dim / 2;
  TORCH_CHECK(*scaling.max_position_embeddings() >= 1 &&
                  *scaling.original_max_position_embeddings() >= 1,
              who,
              ": max_position_embeddings and original_max_position_embeddings must be >= 1, "
              "but got ",
              *scaling.max_position_embeddings(), " and ",
              *scaling.original_max_position_embeddings());
  // (lengths whose arithmetic, length + 1 and length * factor, stays exact in int64 and float64)
  constexpr int64_t kLongestContext = int64_t{1} << 53;
  TORCH_CHECK(*scaling.max_position_embeddings() <= kLongestContext &&
                  *scaling.original_max_position_embeddings() <= kLongestContext,
              who,
              ": max_position_embeddings and original_max_position_embeddings must be <= 2^53, "
              "but got ",
              *scaling.max_position_embeddings(), " and ",
              *scaling.original_max_position_embeddings());
  const bool needs_factor = std::find_if(entry.required.begin(), entry.required.end(),
                                         [](const char* key) {
                                           return std::string(key) == "factor";
                                         }) != entry.required.end();
  TORCH_CHECK(!needs_factor || scaling.factor().has_value(), who, ": rope type '", entry.name,
              "' needs a scaling factor; set RopeScalingOptions::factor (HF: rope_scaling.factor)");
  if (scaling.factor()) {
    TORCH_CHECK(positive_number(*scaling.factor()), who,
                ": the scaling factor must be a finite number > 0, but got ", *scaling.factor());
  }
  if (scaling.attention_factor()) {
    TORCH_CHECK(positive_number(*scaling.attention_factor()), who,
                ": attention_factor must be a finite number > 0, but got ",
                *scaling.attention_factor());
  }
  if (entry.check != nullptr) {
    entry.check(spec);
  }
  TORCH_CHECK(spec.freq_factors.empty() || static_cast<int64_t>(spec.freq_factors.size()) == half,
              who, ": freq_factors must be empty or hold one divisor per frequency (R / 2 = ", half,
              "), but holds ", spec.freq_factors.size());
  for (const double factor : spec.freq_factors) {
    TORCH_CHECK(positive_number(factor), who,
                ": freq_factors must hold finite numbers > 0, but holds ", factor);
  }
}

RopeFrequencies rope_frequencies(const RopeSpec& spec, c10::optional<int64_t> seq_len) {
  static constexpr detail::CallerName who{};
  check_rope_spec(spec);
  const RopeScalingOptions& scaling = spec.scaling;
  RopeFrequencies result = rope_type_entry(scaling.type()).frequencies(spec, seq_len);
  for (size_t i = 0; i < spec.freq_factors.size(); ++i) {
    result.inv_freq[i] /= spec.freq_factors[i];
  }
  for (const double frequency : result.inv_freq) {
    TORCH_CHECK(std::isfinite(frequency) && std::abs(frequency) <= kMaxFrequency, who,
                ": the rope type '", scaling.type(), "' with these parameters (base ", spec.base,
                ") gives the frequency ", frequency,
                ", outside [-1.9e289, 1.9e289] (an angle would not be a finite number); check "
                "the scaling parameters");
  }
  TORCH_CHECK(positive_number(result.variant_attention_factor), who, ": the rope type '",
              scaling.type(), "' gives the attention factor ", result.variant_attention_factor,
              "; it must be a finite number > 0 (check mscale, mscale_all_dim or "
              "attention_factor)");
  result.attention_factor =
      spec.attention_factor_in_cos_sin ? result.variant_attention_factor : 1.0;
  return result;
}

// --- JSON ---------------------------------------------------------------------------------------

c10::optional<double> spelled_number(const json& value) {
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    if (text == "nan") {
      return std::numeric_limits<double>::quiet_NaN();
    }
    if (text == "inf" || text == "-inf") {
      return text == "inf" ? std::numeric_limits<double>::infinity()
                           : -std::numeric_limits<double>::infinity();
    }
  }
  return c10::nullopt;
}

RopeBlock read_rope_block(const json& block, const std::string& source, const std::string& where,
                          RopeBlockKind kind) {
  const bool strict = kind == RopeBlockKind::kArguments;
  RopeBlock result;
  if (block.is_null()) {
    return result;
  }
  TORCH_CHECK(block.is_object(), source, ": ", where.substr(0, where.size() - 1),
              " must be an object, but is a ", block.type_name());
  const std::string context = source + ": " + where;
  // transformers 5 writes rope_type, transformers 4 wrote type (and may write both)
  const auto type_field = block.find(block.contains("rope_type") ? "rope_type" : "type");
  std::string name = "default";
  if (type_field != block.end() && !type_field->is_null()) {
    TORCH_CHECK(type_field->is_string(), context, "rope_type must be a string, but is a ",
                type_field->type_name());
    name = type_field->get<std::string>();
  }
  result.mrope_alias = name == "mrope";
  const RopeTypeEntry* entry = find_rope_type(result.mrope_alias ? "default" : name);
  TORCH_CHECK(entry != nullptr, source, ": unknown ", where, "rope_type '", name,
              "'; posenc knows ", rope_type_names());
  result.scaling.type(entry->type);
  for (const auto& item : block.items()) {
    const std::string& key = item.key();
    if (key == "rope_type" || key == "type") {
      continue;
    }
    const Parameter* parameter = find_parameter(key);
    if (parameter == nullptr) {
      result.other_keys.push_back(key);
      continue;
    }
    if (item.value().is_null()) {
      continue; // transformers reads null as absent
    }
    // (a Hunyuan block pasted as it is would otherwise turn as dynamic NTK, alpha unread)
    TORCH_CHECK(!strict || key != "alpha" || entry->type == RopeType::kNtkAlpha, context,
                "alpha is read by rope type 'ntk_alpha' only, but rope_type is '", entry->name,
                "'; Hunyuan's \"dynamic\" with an alpha is rope_type 'ntk_alpha'");
    // (the arguments of a call may spell the numbers JSON cannot hold; check_kind refuses them)
    json value = item.value();
    if (strict) {
      const auto spelled = [](json& element) {
        if (const c10::optional<double> number = spelled_number(element)) {
          element = *number;
        }
      };
      if (parameter->kind == Kind::kNumbers && value.is_array()) {
        std::for_each(value.begin(), value.end(), spelled);
      } else if (parameter->kind == Kind::kNumber || parameter->kind == Kind::kCount) {
        spelled(value);
      }
    }
    check_kind(value, parameter->kind, context, key);
    parameter->set(result.scaling, value);
  }
  for (const std::string& key : result.other_keys) {
    // (transformers' block also carries its base and M-RoPE's sections: not rope parameters)
    TORCH_CHECK(!strict || key == "rope_theta" || key == "mrope_section" ||
                    key == "mrope_interleaved",
                source, ": unknown ", where.substr(0, where.size() - 1), " key '", key,
                "'; posenc reads rope_type, rope_theta, mrope_section, mrope_interleaved and ",
                [] {
                  std::string known;
                  for (const char* parameter : rope_parameter_keys()) {
                    known += known.empty() ? "" : ", ";
                    known += parameter;
                  }
                  return known;
                }());
  }
  for (const char* key : strict ? std::vector<const char*>() : entry->required) {
    const auto found = block.find(key);
    TORCH_CHECK(found != block.end() && !found->is_null(), context, key,
                " is needed by rope type '", entry->name, "'", entry->required_hint);
  }
  return result;
}

RopeScalingOptions rope_scaling_from_json(c10::string_view json_text, double base) {
  const std::string who = detail::caller(); // (named in what it reads, not only on failure)
  detail::check_json_limits(json_text, detail::kMaxOptionTextBytes, who + ": rope_parameters");
  json block;
  try {
    block = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& error) {
    TORCH_CHECK(false, who, ": rope_parameters must be a JSON object (transformers' rope "
                "parameters, e.g. {\"rope_type\": \"llama3\", \"factor\": 8.0, ...}), but it is not "
                "valid JSON (", error.what(), ")");
  }
  TORCH_CHECK(block.is_object(), who,
              ": rope_parameters must be a JSON object (e.g. {\"rope_type\": \"yarn\", "
              "\"factor\": 4.0}), but is a ",
              block.type_name());
  const RopeBlock read = read_rope_block(block, who, "rope_parameters.", RopeBlockKind::kArguments);
  const auto theta = block.find("rope_theta");
  // transformers' block carries the base: it must be the base of the call (M-RoPE's sections do
  // not change the frequencies); a base that is not finite is left to the base's own check
  TORCH_CHECK(theta == block.end() || theta->is_null() || !std::isfinite(base) ||
                  (theta->is_number() && theta->get<double>() == base),
              who, ": rope_parameters.rope_theta (", theta == block.end() ? "" : theta->dump(),
              ") differs from base (", base, "); pass base = rope_theta or leave rope_theta out");
  const auto partial = block.find("partial_rotary_factor");
  TORCH_CHECK(rope_type_entry(read.scaling.type()).rotates_whole_head || partial == block.end() ||
                  partial->is_null() || read.scaling.partial_rotary_factor() == 1.0,
              who, ": rope_parameters.partial_rotary_factor = ", read.scaling.partial_rotary_factor(),
              " narrows the rotated width of rope type '", read.scaling.type(),
              "' (transformers: int(head_dim * partial_rotary_factor) channels); pass that width "
              "as rotary_dim and leave partial_rotary_factor out");
  return read.scaling;
}

std::string rope_scaling_to_json(const RopeScalingOptions& scaling) {
  const RopeTypeEntry& entry = rope_type_entry(scaling.type());
  json block = json::object();
  block["rope_type"] = entry.name;
  for (const Parameter& parameter : parameters()) {
    const bool read = std::find_if(entry.parameters.begin(), entry.parameters.end(),
                                   [&](const char* key) {
                                     return std::string(key) == parameter.key;
                                   }) != entry.parameters.end();
    // max_position_embeddings and original_max_position_embeddings feed every type's defaults
    const bool length = std::string(parameter.key).find("max_position_embeddings") !=
                        std::string::npos;
    json value = parameter.get(scaling);
    if ((read || length) && !value.is_null()) {
      block[parameter.key] = std::move(value);
    }
  }
  return block.dump();
}

} // namespace detail

const char* rope_type_name(RopeType type) {
  return detail::rope_type_entry(type).name;
}

} // namespace posenc
