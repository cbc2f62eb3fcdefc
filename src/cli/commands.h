#pragma once

// Subcommands of the `posenc` program. Each `add_*` registers a subcommand with its options on
// `app`; the subcommand runs from its callback.

#include <CLI/CLI.hpp>

namespace posenc {
namespace cli {

/// `posenc table`: prints the sinusoidal table.
void add_table_command(CLI::App& app);

/// `posenc export`: writes a PositionalEncoding as TorchScript.
void add_export_command(CLI::App& app);

} // namespace cli
} // namespace posenc
