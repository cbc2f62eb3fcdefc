// posenc: the command-line program. `posenc --help` lists the subcommands.

#include "cli/commands.h"
#include "cli/output.h"

#include <posenc/version.h>

#include <c10/util/Exception.h>

#include <CLI/CLI.hpp>

#include <iostream>

int main(int argc, char** argv) {
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
