#include "cli/commands.h"
#include "cli/hf_read_options.h"
#include "cli/validators.h"

#include "cli/output.h"
#include "io/file_output.h"

#include <posenc/export.h>
#include <posenc/io/hf_config.h>
#include <posenc/io/safetensors.h>
#include <posenc/modules/positional_encoding.h>
#include <posenc/modules/rotary_embedding.h>
#include <posenc/ops/attention_bias.h>

#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace posenc {
namespace cli {

namespace {

struct ExportArgs {
  std::string module = "sinusoidal";
  int64_t max_len = 0;
  c10::optional<int64_t> cached_len; // default: max_len
  int64_t d_model = 0;
  int64_t head_dim = 0;
  c10::optional<int64_t> rotary_dim; // default: head_dim
  double base = 10000.0;
  double scale = 1.0;
  bool seq_first = false;
  bool heads_first = false;
  bool extrapolate = false;
  std::string layout = enum_name(ChannelLayout::kInterleaved);
  std::string spacing = enum_name(FrequencySpacing::kPaper);
  std::string pairing; // "": half_split, or with --hf-config the pairing the config implies
  bool deinterleave = false;
  bool inverse = false;
  bool rotate_last_channels = false;
  std::string hf_config;
  std::shared_ptr<io::HfConfigReadOptions> read = std::make_shared<io::HfConfigReadOptions>();
  std::string format = "torchscript";
  std::string output;
};

template <typename Module>
void save(const Module& module, const std::string& path, const std::string& format) {
  if (format == "safetensors") {
    std::ostringstream description;
    description << *module;
    // The module's state dict (its tables); "format": "pt" is what Hugging Face's loaders expect.
    save_safetensors(*module, path, {{"format", "pt"}, {"posenc.module", description.str()}});
    std::ostream& report = report_stream(path);
    report << "wrote " << path << ": safetensors state dict of " << *module << " (";
    const char* separator = "";
    for (const auto& item : state_dict(*module)) {
      report << separator << item.key() << " " << item.value().sizes() << " "
             << item.value().scalar_type();
      separator = ", ";
    }
    report << "); load it with safetensors.torch.load_file (Python) or "
              "posenc::load_safetensors (C++)\n";
    return;
  }
  std::ostringstream bytes;
  to_torchscript(module).save(bytes);
  io::write_file_safely(path, bytes.str(), "posenc export");
  report_stream(path) << "wrote " << path << ": TorchScript " << *module
                      << "; load it with torch.jit.load (Python) or torch::jit::load (C++)\n";
}

// The file of the shared library that holds `symbol` (empty where it cannot be told).
std::string library_of(const void* symbol) {
  Dl_info info{};
  return dladdr(symbol, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "";
}

// --format onnx: ONNX export is torch.onnx's (Python), so the program runs
// `$POSENC_PYTHON -m posenc.onnx` (default python3) with its own options, already checked here;
// posenc.onnx builds the same module with posenc.nn (from_hf_config reads the config with this
// library's reader) and exports it. The Python package loads the libposenc this program runs
// on (POSENC_LIBRARY), so both build the module from the same code.
void run_onnx_export(const ExportArgs& args) {
  const char* python_variable = std::getenv("POSENC_PYTHON");
  const std::string python =
      python_variable != nullptr && *python_variable != '\0' ? python_variable : "python3";
  std::vector<std::string> argv{python,      "-m", "posenc.onnx", "--module",
                                args.module, "-o", args.output};
  const auto add = [&argv](const char* name, const std::string& value) {
    argv.emplace_back(name);
    argv.push_back(value);
  };
  const auto number = [](double value) {
    std::ostringstream text;
    text.precision(17);
    text << value;
    return text.str();
  };
  if (args.max_len > 0) {
    add("--max-len", std::to_string(args.max_len));
  }
  if (args.cached_len) {
    add("--cached-len", std::to_string(*args.cached_len));
  }
  if (!args.hf_config.empty()) {
    add("--hf-config", args.hf_config);
    if (args.read->layer) {
      add("--layer", std::to_string(*args.read->layer));
    }
    if (!args.read->layer_type.empty()) {
      add("--layer-type", args.read->layer_type);
    }
  }
  if (args.module == "rotary") {
    if (args.hf_config.empty()) {
      add("--head-dim", std::to_string(args.head_dim));
      add("--base", number(args.base));
      if (args.rotary_dim) {
        add("--rotary-dim", std::to_string(*args.rotary_dim));
      }
    }
    if (!args.pairing.empty()) {
      add("--pairing", args.pairing);
    }
    for (const auto& flag : {std::make_pair("--deinterleave", args.deinterleave),
                             std::make_pair("--inverse", args.inverse),
                             std::make_pair("--rotate-last-channels", args.rotate_last_channels),
                             std::make_pair("--heads-first", args.heads_first)}) {
      if (flag.second) {
        argv.emplace_back(flag.first);
      }
    }
  } else {
    add("--d-model", std::to_string(args.d_model));
    add("--base", number(args.base));
    add("--scale", number(args.scale));
    add("--layout", args.layout);
    add("--spacing", args.spacing);
    if (args.seq_first) {
      argv.emplace_back("--seq-first");
    }
  }
  // this program's libposenc, unless the caller chose one
  const std::string library = library_of(reinterpret_cast<const void*>(
      static_cast<at::Tensor (*)(const at::Tensor&)>(&ops::rel_shift)));
  if (std::getenv("POSENC_LIBRARY") == nullptr && !library.empty()) {
    setenv("POSENC_LIBRARY", library.c_str(), 1);
  }
  std::vector<char*> pointers;
  for (std::string& item : argv) {
    pointers.push_back(&item[0]);
  }
  pointers.push_back(nullptr);
  pid_t child = 0;
  const int spawned =
      posix_spawnp(&child, python.c_str(), nullptr, nullptr, pointers.data(), environ);
  TORCH_CHECK(spawned == 0, "export --format onnx: could not run ", python,
              " (ONNX export is torch.onnx's, in Python): ", std::strerror(spawned),
              "; install Python with torch, onnx and onnxscript, or set POSENC_PYTHON to the "
              "interpreter that has them");
  int status = 0;
  TORCH_CHECK(waitpid(child, &status, 0) == child, "export --format onnx: lost ", python);
  TORCH_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "export --format onnx: `", python,
              " -m posenc.onnx` failed (",
              WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                : std::string("killed"),
              ", its message above); it needs torch, onnx, onnxscript and posenc's Python package "
              "(pip install ., or PYTHONPATH=<posenc>/python) in POSENC_PYTHON (default "
              "python3), with the torch this posenc was built against");
}

void run_export(const ExportArgs& args) {
  if (args.format == "onnx") {
    run_onnx_export(args);
    return;
  }
  const BeyondMaxLen beyond = args.extrapolate ? BeyondMaxLen::kExtrapolate : BeyondMaxLen::kError;
  if (args.module == "rotary" && !args.hf_config.empty()) {
    // Everything but the layout and the policy past max_len comes from the config (the pairing
    // too, unless --pairing is given);
    // --max-len, if given, replaces max_position_embeddings as the caches' length.
    const io::HfRopeConfig config = io::read_hf_rope_config_file(args.hf_config, *args.read);
    TORCH_CHECK(config.rotates, args.hf_config, ": ",
                args.read->layer ? "layer " + std::to_string(*args.read->layer)
                                 : "layer type " + config.layer_type,
                " has no rotary (no_rope_layers, or its rope parameters are null): its attention "
                "takes no positions, so there is no rotary embedding to export; choose a layer "
                "that rotates");
    RotaryEmbeddingOptions options = config.options;
    if (args.max_len > 0) {
      options.max_len(args.max_len);
    }
    // Dynamic NTK and LongRoPE exist to run past max_position_embeddings (their frequencies follow
    // the call's length, as transformers computes them): rows past the caches are computed per
    // call by default, not refused.
    const RopeType rope_type = options.scaling().type();
    const bool extends = rope_type == RopeType::kDynamic || rope_type == RopeType::kLongRope;
    options.heads_first(args.heads_first)
        .beyond_max_len(extends ? BeyondMaxLen::kExtrapolate : beyond)
        .cached_len(args.cached_len);
    if (!args.pairing.empty()) { // else the model type's (read_hf_rope_config)
      options
          .pairing(enum_named<RotaryPairing>(args.pairing))
          .deinterleave(args.deinterleave);
    } else if (args.deinterleave) {
      options.deinterleave(true);
    }
    if (args.inverse) { // else the model type's
      options.inverse(true);
    }
    if (args.rotate_last_channels) { // else the model type's
      options.rotate_last_channels(true);
    }
    save(RotaryEmbedding(options), args.output, args.format);
    return;
  }
  if (args.module == "rotary") {
    RotaryEmbeddingOptions options(args.head_dim, args.max_len);
    options.base(args.base)
        .pairing(args.pairing.empty() ? RotaryPairing::kHalfSplit
                                      : enum_named<RotaryPairing>(args.pairing))
        .deinterleave(args.deinterleave)
        .inverse(args.inverse)
        .rotate_last_channels(args.rotate_last_channels)
        .heads_first(args.heads_first)
        .beyond_max_len(beyond)
        .cached_len(args.cached_len);
    if (args.rotary_dim) {
      options.rotary_dim(*args.rotary_dim);
    }
    save(RotaryEmbedding(options), args.output, args.format);
    return;
  }
  save(PositionalEncoding(PositionalEncodingOptions(args.d_model, args.max_len)
                              .base(args.base)
                              .batch_first(!args.seq_first)
                              .layout(enum_named<ChannelLayout>(args.layout))
                              .spacing(enum_named<FrequencySpacing>(args.spacing))
                              .beyond_max_len(beyond)
                              .scale(args.scale)),
       args.output, args.format);
}

} // namespace

void add_export_command(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand("export",
                                     "Write a PositionalEncoding or RotaryEmbedding as a "
                                     "TorchScript file that plain PyTorch can load, or its "
                                     "tables as a safetensors file");
  cmd->add_option("--module", args->module,
                  "sinusoidal (PositionalEncoding) or rotary (RotaryEmbedding)")
      ->capture_default_str()
      ->check(CLI::IsMember({"sinusoidal", "rotary"}));
  cmd->add_option("--max-len", args->max_len,
                  "Number of positions the table holds (required, except with --hf-config: "
                  "max_position_embeddings)")
      ->check(at_least(1));
  cmd->add_option_function<int64_t>(
         "--cached-len", [args](const int64_t& value) { args->cached_len = value; },
         "Positions whose cos/sin rows are cached (rotary; default: max-len, which contexts "
         "past posenc's 2^28-element table limit cannot use); rows past them are computed on "
         "each call")
      ->check(at_least(1));
  cmd->add_option("--hf-config", args->hf_config,
                  "A Hugging Face config.json: head width, rope_theta, partial rotary and "
                  "rope_scaling / rope_parameters from it (rotary)")
      ->check(CLI::ExistingFile);
  add_hf_layer_options(cmd, args->read);
  cmd->add_option("--d-model", args->d_model, "Encoding width (sinusoidal)")->check(at_least(1));
  cmd->add_option("--head-dim", args->head_dim, "Head width (rotary)")->check(at_least(1));
  cmd->add_option_function<int64_t>(
         "--rotary-dim", [args](const int64_t& value) { args->rotary_dim = value; },
         "Rotated channels per head (rotary; default: head-dim)")
      ->check(at_least(1));
  cmd->add_option("--base", args->base, "Base of the wavelength progression")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--scale", args->scale, "Factor the input is multiplied by (sinusoidal)")
      ->capture_default_str();
  cmd->add_option("--layout", args->layout, "Channel layout (sinusoidal)")
      ->capture_default_str()
      ->check(CLI::IsMember(enum_names<ChannelLayout>()));
  cmd->add_option("--spacing", args->spacing, "Frequency spacing (sinusoidal)")
      ->capture_default_str()
      ->check(CLI::IsMember(enum_names<FrequencySpacing>()));
  cmd->add_option("--pairing", args->pairing,
                  "Channel pairing (rotary): half_split (the default) or interleaved; with "
                  "--hf-config, the one the model type implies unless given")
      ->check(CLI::IsMember(enum_names<RotaryPairing>()));
  cmd->add_flag("--deinterleave", args->deinterleave,
                "Pairs (2i, 2i + 1) regrouped into halves before turning (rotary, with "
                "half_split: DeepSeek-V3's rope_interleave); with --hf-config, the model type's "
                "unless --pairing is given");
  cmd->add_flag("--inverse", args->inverse,
                "Turned by -theta (rotary: NanoChat's rotation); with --hf-config, the model "
                "type's where not given");
  cmd->add_flag("--rotate-last-channels", args->rotate_last_channels,
                "The last --rotary-dim channels of each head turn, the leading ones pass "
                "through (rotary: DeepSeek-V4's heads); with --hf-config, the model type's "
                "where not given");
  cmd->add_flag("--seq-first", args->seq_first,
                "Inputs are [L, B, D] instead of [B, L, D] (sinusoidal)");
  cmd->add_flag("--heads-first", args->heads_first,
                "Inputs are [B, H, L, Dh] instead of [B, L, H, Dh] (rotary)");
  cmd->add_flag("--extrapolate", args->extrapolate,
                "Compute positions past max-len on the fly instead of raising (rotary with "
                "--hf-config: what dynamic and longrope configs do without it)");
  cmd->add_option("--format", args->format,
                  "torchscript (a module torch.jit.load runs), safetensors (the module's tables, "
                  "its state dict) or onnx (a graph of standard ONNX operators, batch and length "
                  "dynamic; runs Python's posenc.onnx: POSENC_PYTHON, default python3)")
      ->capture_default_str()
      ->check(CLI::IsMember({"torchscript", "safetensors", "onnx"}));
  cmd->add_option("-o,--output", args->output, "Output file (.pt, .safetensors, .onnx)")
      ->required();
  cmd->callback([args, cmd] {
    const bool from_config = !args->hf_config.empty();
    if (from_config && args->module != "rotary") {
      throw CLI::ValidationError("--hf-config", "applies to --module rotary only");
    }
    for (const char* name : {"--layer", "--layer-type"}) {
      if (!from_config && cmd->count(name) > 0) {
        throw CLI::ValidationError(name, "applies to --hf-config only");
      }
    }
    if (!from_config && args->max_len == 0) {
      throw CLI::RequiredError("--max-len");
    }
    for (const char* name : {"--head-dim", "--rotary-dim", "--base"}) {
      if (from_config && cmd->count(name) > 0) {
        throw CLI::ValidationError(name, "comes from --hf-config; do not pass both");
      }
    }
    if (args->format == "onnx" && args->extrapolate) {
      throw CLI::ValidationError("--extrapolate",
                                 "an ONNX graph holds the table's rows and computes none past "
                                 "max-len; export with a --max-len that covers every position");
    }
    if (args->rotate_last_channels && !from_config &&
        (!args->rotary_dim || *args->rotary_dim == args->head_dim)) {
      throw CLI::ValidationError("--rotate-last-channels",
                                 "turns the last --rotary-dim channels of each head; give a "
                                 "--rotary-dim below --head-dim (the whole head turns the same "
                                 "without it)");
    }
    if (args->deinterleave && !args->pairing.empty() &&
        enum_named<RotaryPairing>(args->pairing) == RotaryPairing::kInterleaved) {
      throw CLI::ValidationError("--deinterleave",
                                 "regroups pairs (2i, 2i + 1) into halves, the layout of "
                                 "--pairing half_split; drop --pairing interleaved");
    }
    // Each module's own options: required where it needs them, refused where it has none.
    const bool rotary = args->module == "rotary";
    for (const char* name : {"--head-dim", "--rotary-dim", "--pairing", "--deinterleave",
                             "--inverse", "--rotate-last-channels", "--heads-first",
                             "--cached-len"}) {
      if (!rotary && cmd->count(name) > 0) {
        throw CLI::ValidationError(name, "applies to --module rotary only");
      }
    }
    for (const char* name : {"--d-model", "--scale", "--layout", "--spacing", "--seq-first"}) {
      if (rotary && cmd->count(name) > 0) {
        throw CLI::ValidationError(name, "applies to --module sinusoidal only");
      }
    }
    if (rotary && !from_config && cmd->count("--head-dim") == 0) {
      throw CLI::RequiredError("--head-dim (or --hf-config)");
    }
    if (!rotary && cmd->count("--d-model") == 0) {
      throw CLI::RequiredError("--d-model");
    }
    run_export(*args);
  });
}

} // namespace cli
} // namespace posenc
