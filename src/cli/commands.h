#pragma once

// Subcommands of the `posenc` program. Each `add_*` registers a subcommand with its options on
// `app`; the subcommand runs from its callback.

#include <CLI/CLI.hpp>

namespace posenc {
namespace cli {

/// `posenc table`: prints the sinusoidal table.
void add_table_command(CLI::App& app);

/// `posenc export`: writes a PositionalEncoding or RotaryEmbedding as TorchScript.
void add_export_command(CLI::App& app);

/// `posenc rope`: the frequencies, wavelengths and attention factor of a rotary embedding.
void add_rope_command(CLI::App& app);

/// `posenc demo`: trains a transformer on a task that needs positions, with each encoding.
void add_demo_command(CLI::App& app);

/// `posenc plot`: PNG figures of the encoding.
void add_plot_command(CLI::App& app);

} // namespace cli
} // namespace posenc
