#include "cli/commands.h"

#include <posenc/export.h>
#include <posenc/modules/positional_encoding.h>

#include <iostream>
#include <memory>
#include <string>

namespace posenc {
namespace cli {

namespace {

struct ExportArgs {
  int64_t max_len = 0;
  int64_t d_model = 0;
  double base = 10000.0;
  bool seq_first = false;
  std::string output;
};

void run_export(const ExportArgs& args) {
  PositionalEncoding module(
      PositionalEncodingOptions(args.d_model, args.max_len).base(args.base).batch_first(!args.seq_first));
  to_torchscript(module).save(args.output);
  std::cout << "wrote " << args.output << ": TorchScript " << *module
            << "; load it with torch.jit.load (Python) or torch::jit::load (C++)\n";
}

} // namespace

void add_export_command(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Write a PositionalEncoding as a TorchScript file that plain PyTorch can load");
  cmd->add_option("--max-len", args->max_len, "Number of positions the table holds")->required();
  cmd->add_option("--d-model", args->d_model, "Encoding width")->required();
  cmd->add_option("--base", args->base, "Base of the wavelength progression")->capture_default_str();
  cmd->add_flag("--seq-first", args->seq_first, "Inputs are [L, B, D] instead of [B, L, D]");
  cmd->add_option("-o,--output", args->output, "Output file (.pt)")->required();
  cmd->callback([args] { run_export(*args); });
}

} // namespace cli
} // namespace posenc
