#include "cli/commands.h"
#include "cli/hf_read_options.h"
#include "cli/validators.h"

#include <posenc/functional/rotary_embedding.h>
#include <posenc/io/hf_config.h>

#include <c10/util/ArrayRef.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

namespace posenc {
namespace cli {

namespace {

struct RopeArgs {
  std::string hf_config;
  int64_t seq_len = 0; // 0: a call within the model's context
  std::string format = "text";
  bool audit = false;
  bool strict = false;
  std::shared_ptr<io::HfConfigReadOptions> read = std::make_shared<io::HfConfigReadOptions>();
};

// A double as the shortest text that reads back as the same value (11158840, not 1.11588e+07).
std::string shortest(double value) {
  char text[32];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr);
}

// The audit: one line per key that bears on positions (csv: key,status,value,reason).
void print_audit(const RopeArgs& args, const io::HfRopeConfig& config) {
  if (args.format == "csv") {
    std::cout << "key,status,value,reason\n";
    const auto quoted = [](const std::string& text) {
      std::string out = "\"";
      for (const char c : text) {
        out += c == '"' ? std::string("\"\"") : std::string(1, c);
      }
      return out + "\"";
    };
    for (const io::HfConfigKey& key : config.audit) {
      std::cout << quoted(key.key) << ',' << io::to_string(key.status) << ',' << quoted(key.value)
                << ',' << quoted(key.reason) << '\n';
    }
    return;
  }
  size_t width = 3;
  for (const io::HfConfigKey& key : config.audit) {
    width = std::max(width, key.key.size());
  }
  std::cout << args.hf_config << ": how posenc read each key that bears on positions\n";
  for (const io::HfConfigKey& key : config.audit) {
    std::cout << key.key << std::string(width + 2 - key.key.size(), ' ')
              << io::to_string(key.status)
              << std::string(9 - std::string(io::to_string(key.status)).size(), ' ')
              << (key.value.empty() ? "-" : key.value) << "  (" << key.reason << ")\n";
  }
}

// The query temperature of the layer read, if its config has one (AttentionTemperature).
std::string temperature_line(const io::HfRopeConfig& config) {
  if (!config.attention_temperature) {
    return "";
  }
  const AttentionTemperatureOptions& t = *config.attention_temperature;
  std::ostringstream line;
  line << "query temperature: form " << t.form() << ", floor_scale " << shortest(t.floor_scale())
       << ", attn_scale " << shortest(t.attn_scale())
       << (t.form() == AttentionTemperatureForm::kLlama4
               ? " (Llama 4's layers without rotary: log1p(floor((p + 1) / floor_scale)) * "
                 "attn_scale + 1)\n"
               : " (every layer, after the rotation: 1 + attn_scale * log(1 + floor(p / "
                 "floor_scale)))\n");
  return line.str();
}

void run_rope(const RopeArgs& args) {
  namespace F = posenc::functional;
  io::HfConfigReadOptions read = *args.read;
  read.strict = args.strict;
  const io::HfRopeConfig config = io::read_hf_rope_config_file(args.hf_config, read);
  if (args.audit) {
    print_audit(args, config);
    return;
  }
  if (!config.rotates) { // (a layer without rotary: nothing to list)
    if (args.format == "csv") {
      std::cout << "pair,inv_freq,wavelength\n";
    } else {
      std::cout << args.hf_config << ": "
                << (read.layer ? "layer " + std::to_string(*read.layer)
                               : "layer type " + config.layer_type)
                << " has no rotary: its attention takes no positions"
                << (config.attention_temperature ? " but scales its queries by position" : "")
                << "\n"
                << temperature_line(config);
    }
    return;
  }
  const RotaryEmbeddingOptions& options = config.options;
  const RopeScalingOptions& scaling = options.scaling();
  auto table_options = F::RotaryTablesFuncOptions().base(options.base()).scaling(scaling);
  if (args.seq_len > 0) {
    table_options.seq_len(args.seq_len);
  }
  const int64_t rotary_dim = options.rotated_width();
  const at::Tensor inv_freq = F::rotary_inv_freq(rotary_dim, table_options);
  const double attention_factor = F::rotary_attention_factor(rotary_dim, table_options);
  const double* frequency = inv_freq.data_ptr<double>();
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  if (args.format == "csv") {
    std::cout << "pair,inv_freq,wavelength\n";
  } else {
    std::cout << args.hf_config << ": rope_type " << scaling.type() << ", rope_theta "
              << shortest(options.base()) << ", head_dim " << options.head_dim() << ", rotary_dim "
              << rotary_dim << ", max_position_embeddings " << *scaling.max_position_embeddings()
              << ", heads " << config.num_attention_heads << " (key/value "
              << config.num_key_value_heads << ")\n";
    if (!options.mrope_section().empty()) {
      // Which position axis (temporal, height, width) turns each pair.
      std::cout << "multimodal: mrope_section=" << c10::IntArrayRef(options.mrope_section())
                << (options.mrope_interleaved() ? ", mrope_interleaved=true" : "")
                << (options.mrope_hw_alternating() ? ", mrope_hw_alternating=true" : "")
                << " (positions [3, B, L])\n";
    }
    if (!config.rotary_layers.empty() && !read.layer) {
      std::cout << "rotary in "
                << std::count(config.rotary_layers.begin(), config.rotary_layers.end(), true)
                << " of " << config.rotary_layers.size()
                << " layers (no_rope_layers; --layer N says which)\n";
    }
    std::cout << temperature_line(config);
    if (options.deinterleave()) {
      std::cout << "pairs (2i, 2i + 1) regrouped into halves before turning (deinterleave: "
                   "DeepSeek-V3's rope_interleave)\n";
    }
    if (options.inverse()) {
      std::cout << "turned by -theta (inverse: NanoChat's rotate_half)\n";
    }
    if (options.rotate_last_channels()) {
      std::cout << "the last " << options.rotated_width() << " of " << options.head_dim()
                << " channels of each head turn (rotate_last_channels: DeepSeek-V4's heads)\n";
    }
    if (args.seq_len > 0) {
      std::cout << "frequencies of a call ending at position " << args.seq_len - 1 << "\n";
    }
    std::cout << "attention factor: " << attention_factor << " (HF multiplies cos and sin by it)\n";
    std::cout << "pair          inv_freq        wavelength (positions)\n";
  }
  char line[128];
  for (int64_t i = 0; i < inv_freq.numel(); ++i) {
    const double wavelength = kTwoPi / frequency[i];
    std::snprintf(line, sizeof(line),
                  args.format == "csv" ? "%lld,%.17g,%.17g\n" : "%4lld  %16.9e  %16.9e\n",
                  static_cast<long long>(i), frequency[i], wavelength);
    std::cout << line;
  }
  if (args.format == "csv") {
    std::cout << "# attention_factor," << attention_factor << "\n";
  }
}

} // namespace

void add_rope_command(CLI::App& app) {
  auto args = std::make_shared<RopeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "rope", "Print the frequencies, wavelengths and attention factor of a model's RoPE");
  cmd->add_option("--hf-config", args->hf_config, "A Hugging Face config.json")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--seq-len", args->seq_len,
                  "Length of the call (last position + 1): dynamic and longrope frequencies "
                  "depend on it (default: a call within the model's context)")
      ->check(at_least(1));
  cmd->add_option("--format", args->format, "text or csv")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "csv"}));
  cmd->add_flag("--audit", args->audit,
                "Print how each key that bears on positions was read (used, default, ignored, "
                "unknown, and why) instead of the frequencies");
  cmd->add_flag("--strict", args->strict,
                "Refuse a config whose keys change the rotation in ways posenc does not apply "
                "(unknown rope parameters, a model's own rules), instead of warning");
  add_hf_layer_options(cmd, args->read);
  cmd->callback([args] { run_rope(*args); });
}

} // namespace cli
} // namespace posenc
