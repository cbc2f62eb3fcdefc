// posenc: the command-line program. `posenc --help` lists the subcommands.

#include "cli/commands.h"
#include "cli/output.h"

#include <posenc/version.h>

#include <c10/util/Exception.h>

#include <CLI/CLI.hpp>

#include <csignal>
#include <iostream>

int main(int argc, char** argv) {
  // A write past the file-size limit (ulimit -f) then fails with EFBIG, which the writers report
  // (and after which they leave the old file in place), instead of the signal ending the program.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"posenc " POSENC_VERSION
               ": positional encodings for LibTorch (built with LibTorch " POSENC_TORCH_VERSION
               ")"};
  app.set_version_flag("--version", std::string(POSENC_VERSION));
  app.require_subcommand(1);
  posenc::cli::add_table_command(app);
  posenc::cli::add_export_command(app);
  posenc::cli::add_rope_command(app);
  posenc::cli::add_demo_command(app);
  posenc::cli::add_plot_command(app);
  // A first argument that names no subcommand: CLI11 would only say that one is required.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* command : app.get_subcommands({})) {
      known = known || command->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + command->get_name();
    }
    if (!known) {
      std::cerr << "posenc: unknown subcommand '" << argv[1] << "'; expected one of " << names
                << " (posenc --help lists them)\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
    posenc::cli::flush_stdout();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const c10::Error& e) {
    std::cerr << "posenc: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "posenc: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
