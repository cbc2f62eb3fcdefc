#include "cli/commands.h"
#include "cli/validators.h"
#include "plot/figures.h"

#include <posenc/functional/positional_encoding.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

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
  // The 2-D sin-cos table.
  std::vector<int64_t> grid{16};
  int64_t embed_dim = 64;
  std::vector<int64_t> channels; // empty: plot::default_sincos_2d_channels
  double interpolation_scale = 1.0;
  int64_t base_size = 16;
  // The RoPE spectrum.
  plot::RopeSpectrumOptions rope;
};

// The checks that involve two options (CLI11 validators see one).
void check_channels(const PlotArgs& args) {
  if (args.channels.size() > plot::kMaxSincos2dChannels) {
    throw CLI::ValidationError("--channels", "at most " +
                                                 std::to_string(plot::kMaxSincos2dChannels) +
                                                 " channels (one panel each), but got " +
                                                 std::to_string(args.channels.size()));
  }
  for (const int64_t channel : args.channels) {
    if (channel >= args.embed_dim) {
      throw CLI::ValidationError("--channels", "must be below --embed-dim (" +
                                                   std::to_string(args.embed_dim) + "), but got " +
                                                   std::to_string(channel));
    }
  }
}
} // namespace

void add_plot_command(CLI::App& app) {
  auto args = std::make_shared<PlotArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plot",
      "Draw PNG figures: the sinusoidal encoding and the similarity between its positions "
      "(positional_encoding.png, position_similarity.png), the channels of the 2-D sin-cos "
      "table (sincos_2d.png) and the wavelengths of RoPE's scaling variants (rope_spectrum.png)");
  // (a figure shows every position and channel: at most 4096 of each, and the similarity figure
  // holds max_len^2 values)
  cmd->add_option("--max-len", args->max_len, "Number of positions, 2 to 4096")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{2}, int64_t{4096}));
  cmd->add_option("--d-model", args->d_model, "Encoding width, 1 to 4096")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--base", args->base, "Base of the wavelength progression")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("-o,--output-dir", args->directory, "Directory for the figures")
      ->capture_default_str();
  cmd->add_option("--width", args->width, "Width of the heatmap in pixels")
      ->capture_default_str()
      ->check(CLI::Range(200, 10000));
  cmd->add_option("--height", args->height, "Height of the heatmap in pixels")
      ->capture_default_str()
      ->check(CLI::Range(200, 10000));
  cmd->add_option("--grid", args->grid,
                  "2-D table: the patch grid, S (square) or H W, each 1 to 192")
      ->capture_default_str()
      ->expected(1, 2)
      ->check(CLI::Range(int64_t{1}, int64_t{192}));
  cmd->add_option("--embed-dim", args->embed_dim,
                  "2-D table: number of channels, a multiple of 4 from 4 to 2048")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{4}, int64_t{2048}) & multiple_of(4));
  cmd->add_option("--channels", args->channels,
                  "2-D table: the channels to draw, one panel each (at most 32, each below "
                  "--embed-dim; default: sin and cos of two frequencies of x and of y)")
      ->check(at_least(0));
  cmd->add_option("--interpolation-scale", args->interpolation_scale,
                  "2-D table: coordinates are divided by it")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--base-size", args->base_size,
                  "2-D table: the grid size coordinates are normalized to")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--head-dim", args->rope.head_dim,
                  "RoPE spectrum: rotated width, even, 2 to 4096")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{2}, int64_t{4096}) & multiple_of(2));
  cmd->add_option("--rope-theta", args->rope.theta, "RoPE spectrum: base of the frequencies")
      ->capture_default_str()
      ->check(finite_above(1.0));
  cmd->add_option("--rope-factor", args->rope.factor,
                  "RoPE spectrum: context extension factor of linear, YaRN and LLaMA 3 scaling")
      ->capture_default_str()
      ->check(finite_above(1.0, /*inclusive=*/true));
  cmd->add_option("--original-max-len", args->rope.original_max_len,
                  "RoPE spectrum: the pre-training context length (a line in the figure)")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->callback([args] {
    check_channels(*args);
    namespace F = posenc::functional;
    const auto table = F::sinusoidal_table(args->max_len, args->d_model,
                                           F::SinusoidalTableFuncOptions().base(args->base));
    const auto grid = Sincos2dTableOptions(args->embed_dim, args->grid)
                          .interpolation_scale(args->interpolation_scale)
                          .base_size(args->base_size);
    const auto channels =
        args->channels.empty() ? plot::default_sincos_2d_channels(args->embed_dim) : args->channels;
    plot::make_directories(args->directory);
    const std::string heatmap = args->directory + "/positional_encoding.png";
    const std::string similarity = args->directory + "/position_similarity.png";
    const std::string sincos_2d = args->directory + "/sincos_2d.png";
    const std::string spectrum = args->directory + "/rope_spectrum.png";
    plot::write_encoding_heatmap(table, heatmap, args->width, args->height);
    plot::write_similarity_figure(table, similarity);
    plot::write_sincos_2d_figure(grid, channels, sincos_2d);
    plot::write_rope_spectrum_figure(args->rope, spectrum);
    std::cout << "wrote " << heatmap << "\nwrote " << similarity << "\nwrote " << sincos_2d
              << "\nwrote " << spectrum << "\n";
  });
}

} // namespace cli
} // namespace posenc
