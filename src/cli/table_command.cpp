#include "cli/commands.h"
#include "cli/table_format.h"
#include "cli/validators.h"

#include <posenc/functional/positional_encoding.h>

#include <iostream>
#include <memory>
#include <string>

namespace posenc {
namespace cli {

namespace {

struct TableArgs {
  int64_t max_len = 0;
  int64_t d_model = 0;
  double base = 10000.0;
  int64_t offset = 0;
  std::string format = "text";
  int precision = -1;
};

void run_table(const TableArgs& args) {
  namespace F = posenc::functional;
  // Computed in float64 and printed from there: the printed digits are the formula's, not a
  // float32 rounding of it.
  const at::Tensor table = F::sinusoidal_table(
      args.max_len, args.d_model,
      F::SinusoidalTableFuncOptions().base(args.base).offset(args.offset).dtype(at::kDouble));
  if (args.format == "csv") {
    std::cout << format_csv(table, args.precision < 0 ? 9 : args.precision);
  } else {
    std::cout << format_python(table, args.precision < 0 ? 4 : args.precision) << "\n";
  }
}

} // namespace

void add_table_command(CLI::App& app) {
  auto args = std::make_shared<TableArgs>();
  CLI::App* cmd =
      app.add_subcommand("table", "Print the sinusoidal encoding table [max_len, d_model]");
  cmd->add_option("--max-len", args->max_len, "Number of positions (rows)")
      ->required()
      ->check(at_least(1));
  cmd->add_option("--d-model", args->d_model, "Encoding width (columns)")
      ->required()
      ->check(at_least(1));
  cmd->add_option("--base", args->base, "Base of the wavelength progression")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--offset", args->offset, "Position of the first row")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("--format", args->format,
                  "text: PyTorch's tensor printout; csv: one row per line")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "csv"}));
  cmd->add_option("--precision", args->precision,
                  "Digits after the point (text, default 4) or significant digits (csv, default 9)")
      ->check(CLI::Range(0, 17));
  cmd->callback([args] { run_table(*args); });
}

} // namespace cli
} // namespace posenc
