// The operator posenc::read_hf_rope_config: posenc::io::read_hf_rope_config for Python
// (`posenc.nn.read_hf_rope_config`, `posenc.nn.RotaryEmbedding.from_hf_config`), so that the
// Python package reads a config.json with the same code as C++ and the command line. Registered
// by libposenc_io, which `import posenc` loads beside libposenc.

#include <posenc/io/hf_config.h>

#include "detail/rope_types.h"

#include <c10/util/Exception.h>
#include <torch/library.h>
#include <torch/version.h>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace posenc {
namespace io {
namespace {

using nlohmann::json;

// Collects the reader's warnings (TORCH_WARN), which an operator called from Python would
// otherwise print to stderr: the Python package raises them as Python warnings.
class CollectWarnings : public c10::WarningHandler {
 public:
#if TORCH_VERSION_MAJOR >= 2
  void process(const c10::Warning& warning) override {
    messages.push_back(warning.msg());
  }
#else
  void process(const c10::SourceLocation& /*location*/, const std::string& msg,
               const bool /*verbatim*/) override {
    messages.push_back(msg);
  }
#endif
  std::vector<std::string> messages;
};

// The options as the keyword arguments of posenc.nn.RotaryEmbedding (its names and values), the
// head counts, and the audit.
std::string read_hf_rope_config_op(const std::string& config, bool strict,
                                   const std::string& source, c10::optional<int64_t> layer,
                                   const std::string& layer_type) {
  HfConfigReadOptions read;
  read.strict = strict;
  read.layer = layer;
  read.layer_type = layer_type;
  CollectWarnings warnings;
  const HfRopeConfig result = [&] {
#if TORCH_VERSION_MAJOR >= 2
    const c10::WarningUtils::WarningHandlerGuard guard(&warnings);
#else
    const c10::Warning::WarningHandlerGuard guard(&warnings);
#endif
    return read_hf_rope_config(config, source, read);
  }();
  const RotaryEmbeddingOptions& options = result.options;
  std::ostringstream pairing;
  pairing << options.pairing();
  json module = {
      {"head_dim", options.head_dim()},
      {"max_len", options.max_len()},
      {"base", options.base()},
      {"rotary_dim", options.rotated_width()},
      {"pairing", pairing.str()},
      {"rope_scaling", json::parse(detail::rope_scaling_to_json(options.scaling()))},
      {"attention_factor_in_cos_sin", options.attention_factor_in_cos_sin()},
  };
  if (!options.freq_factors().empty()) {
    module["freq_factors"] = options.freq_factors();
  }
  if (options.deinterleave()) {
    module["deinterleave"] = true;
  }
  if (options.inverse()) {
    module["inverse"] = true;
  }
  if (options.rotate_last_channels()) {
    module["rotate_last_channels"] = true;
  }
  if (!options.mrope_section().empty()) {
    module["mrope_section"] = options.mrope_section();
    module["mrope_interleaved"] = options.mrope_interleaved();
    if (options.mrope_hw_alternating()) {
      module["mrope_hw_alternating"] = true;
    }
  }
  if (options.cached_len()) {
    module["cached_len"] = *options.cached_len();
  }
  // (the keyword arguments of posenc.nn.AttentionTemperature; null: no temperature)
  json temperature = nullptr;
  if (result.attention_temperature) {
    const AttentionTemperatureOptions& t = *result.attention_temperature;
    temperature = {{"floor_scale", t.floor_scale()},
                   {"attn_scale", t.attn_scale()},
                   {"form", attention_temperature_form_name(t.form())},
                   {"heads_first", t.heads_first()}};
  }
  json audit = json::array();
  for (const HfConfigKey& key : result.audit) {
    audit.push_back({{"key", key.key},
                     {"status", to_string(key.status)},
                     {"value", key.value},
                     {"reason", key.reason}});
  }
  return json{{"module", std::move(module)},
              {"num_attention_heads", result.num_attention_heads},
              {"num_key_value_heads", result.num_key_value_heads},
              {"audit", std::move(audit)},
              {"layer_types", result.layer_types},
              {"layer_type", result.layer_type},
              {"rotary_layers", result.rotary_layers},
              {"rotates", result.rotates},
              {"attention_temperature", std::move(temperature)},
              {"warnings", warnings.messages}}
      .dump();
}

} // namespace

// read_hf_rope_config(config, strict, source, layer, layer_type) -> JSON text: {"module": the
// keyword arguments of posenc.nn.RotaryEmbedding, "num_attention_heads", "num_key_value_heads",
// "audit": [{"key", "status", "value", "reason"}, ...], "layer_types", "layer_type",
// "rotary_layers" (which layers rotate; empty: all), "rotates" (the layer asked for),
// "attention_temperature" (the keyword arguments of posenc.nn.AttentionTemperature, or null),
// "warnings": the reader's warnings, not printed}. `layer` / `layer_type`: HfConfigReadOptions'.
// `config` is a config.json's text; `strict` refuses keys that change the rotation and are not
// applied (else a warning); `source` names the config in messages. Errors and warnings are
// read_hf_rope_config's.
TORCH_LIBRARY_FRAGMENT(posenc, m) {
  m.def(
      "read_hf_rope_config(str config, bool strict=False, str source=\"config.json\", "
      "int? layer=None, str layer_type=\"\") -> str",
      &read_hf_rope_config_op);
}

} // namespace io
} // namespace posenc
