#pragma once

// The options of `posenc rope` and `posenc export` that say how a config.json is read: which
// layer (or layer type) of a model with per-layer rope parameters.

#include "cli/validators.h"

#include <posenc/io/hf_config.h>

#include <CLI/CLI.hpp>

#include <memory>

namespace posenc {
namespace cli {

/// Adds --layer and --layer-type to `cmd`, filling `read` (which must outlive the command).
inline void add_hf_layer_options(CLI::App* cmd, const std::shared_ptr<io::HfConfigReadOptions>& read) {
  cmd->add_option_function<int64_t>(
         "--layer", [read](const int64_t& value) { read->layer = value; },
         "With --hf-config: the layer (0-based) whose rotary embedding is read (its type from "
         "layer_types; needed where rope_parameters holds one set per layer type, e.g. Gemma 3)")
      ->check(at_least(0));
  cmd->add_option("--layer-type", read->layer_type,
                  "With --hf-config: the layer type whose rope parameters are read "
                  "(full_attention, sliding_attention, ...), instead of --layer");
}

} // namespace cli
} // namespace posenc
