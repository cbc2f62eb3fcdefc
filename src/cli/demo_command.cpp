#include "cli/commands.h"
#include "cli/validators.h"
#include "demo/reversal.h"
#include "plot/figures.h"

#include <torch/cuda.h>

#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace posenc {
namespace cli {

namespace {

struct DemoArgs {
  demo::DemoOptions options;
  std::string device = "cpu";
  std::vector<std::string> encodings = {"none", "sinusoidal", "learned", "rotary"};
  std::string plots = "posenc_figures";
  bool quiet = false;
};

demo::Encoding parse_encoding(const std::string& name) {
  if (name == "none")
    return demo::Encoding::kNone;
  if (name == "sinusoidal")
    return demo::Encoding::kSinusoidal;
  if (name == "learned")
    return demo::Encoding::kLearned;
  return demo::Encoding::kRotary;
}

void run_demo(DemoArgs args) {
  if (args.device == "cuda") {
    TORCH_CHECK(torch::cuda::is_available(),
                "posenc demo: --device cuda, but no CUDA device is available to this LibTorch");
    args.options.device = torch::kCUDA;
  }
  const auto& o = args.options;
  if (!args.quiet) {
    std::cout << "Reversal task: a transformer encoder (" << o.layers << " layers, d_model "
              << o.d_model << ", " << o.heads << " heads) reads " << o.seq_len
              << " tokens over a vocabulary of " << o.vocab
              << " and must output them reversed.\nWithout position information the task cannot be "
                 "solved: self-attention "
                 "sees a set.\nTraining "
              << o.steps << " steps of batch " << o.batch << " on " << args.device << ", seed "
              << o.seed << ".\n\n";
  }
  std::vector<demo::DemoResult> results;
  for (const auto& name : args.encodings) {
    const auto encoding = parse_encoding(name);
    const auto progress = [&](int64_t step, double loss, double accuracy) {
      std::cout << "\r  " << std::left << std::setw(11) << name << " step " << std::right
                << std::setw(5) << step << "/" << o.steps << "  loss " << std::fixed
                << std::setprecision(4) << loss << "  batch accuracy " << std::setprecision(1)
                << std::setw(5) << 100.0 * accuracy << "%" << std::flush;
    };
    results.push_back(demo::train_reversal(
        encoding, o, args.quiet ? demo::Progress() : demo::Progress(progress)));
    if (!args.quiet) {
      std::cout << "\n";
    }
  }
  std::cout << (args.quiet ? "" : "\n")
            << "| encoding   | first loss | final loss | held-out token accuracy | time   |\n"
            << "|------------|------------|------------|-------------------------|--------|\n";
  for (const auto& r : results) {
    char line[160];
    std::snprintf(line, sizeof(line), "| %-10s | %10.4f | %10.4f | %22.1f%% | %5.1fs |\n",
                  demo::name_of(r.encoding).c_str(), r.first_loss, r.final_loss,
                  100.0 * r.held_out_accuracy, r.seconds);
    std::cout << line;
  }
  std::cout << "(chance: " << std::fixed << std::setprecision(1)
            << 100.0 / static_cast<double>(o.vocab)
            << "%; the best any model without positions can do is "
            << 100.0 * demo::position_blind_ceiling(o)
            << "%: guess the most frequent of the other tokens)\n";
  if (!args.plots.empty()) {
    const auto written = plot::write_encoding_figures(args.plots, 64, 128);
    for (const auto& path : written) {
      std::cout << "wrote " << path << "\n";
    }
  }
}

} // namespace

void add_demo_command(CLI::App& app) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Train a small transformer to reverse sequences, with and without positional encodings");
  cmd->add_option("--steps", args->options.steps, "Training steps per encoding")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--seed", args->options.seed, "Random seed (the run is deterministic for a seed)")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("--device", args->device, "cpu or cuda")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--encodings", args->encodings, "Encodings to compare")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "sinusoidal", "learned", "rotary"}));
  cmd->add_option("--plots", args->plots, "Directory for the encoding figures (PNG); empty: none")
      ->capture_default_str();
  cmd->add_flag("--quiet", args->quiet, "Print only the result table");
  cmd->callback([args] { run_demo(*args); });
}

} // namespace cli
} // namespace posenc
