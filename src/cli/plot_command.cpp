#include "cli/commands.h"
#include "cli/validators.h"
#include "plot/figures.h"

#include <posenc/functional/positional_encoding.h>

#include <iostream>
#include <memory>
#include <string>

namespace posenc {
namespace cli {

namespace {
struct PlotArgs {
  int64_t max_len = 64;
  int64_t d_model = 128;
  double base = 10000.0;
  std::string directory = ".";
  int width = 1000;
  int height = 540;
};
} // namespace

void add_plot_command(CLI::App& app) {
  auto args = std::make_shared<PlotArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plot", "Draw the encoding as PNG figures: a heatmap and the similarity between positions");
  cmd->add_option("--max-len", args->max_len, "Number of positions (at least 2)")
      ->capture_default_str()
      ->check(at_least(2));
  cmd->add_option("--d-model", args->d_model, "Encoding width")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--base", args->base, "Base of the wavelength progression")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("-o,--output-dir", args->directory,
                  "Directory for positional_encoding.png and position_similarity.png")
      ->capture_default_str();
  cmd->add_option("--width", args->width, "Width of the heatmap in pixels")
      ->capture_default_str()
      ->check(CLI::Range(200, 10000));
  cmd->add_option("--height", args->height, "Height of the heatmap in pixels")
      ->capture_default_str()
      ->check(CLI::Range(200, 10000));
  cmd->callback([args] {
    namespace F = posenc::functional;
    const auto table = F::sinusoidal_table(args->max_len, args->d_model,
                                           F::SinusoidalTableFuncOptions().base(args->base));
    plot::make_directories(args->directory);
    const std::string heatmap = args->directory + "/positional_encoding.png";
    const std::string similarity = args->directory + "/position_similarity.png";
    plot::write_encoding_heatmap(table, heatmap, args->width, args->height);
    plot::write_similarity_figure(table, similarity);
    std::cout << "wrote " << heatmap << "\nwrote " << similarity << "\n";
  });
}

} // namespace cli
} // namespace posenc
