#pragma once

// The demo: a transformer encoder learns to output its input sequence reversed, a task no model
// without position information can solve (self-attention without positions treats its input as a
// set). The same model is trained with no encoding and with posenc's sinusoidal, learned and
// rotary encodings.

#include <posenc/enums.h>

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace posenc {
namespace demo {

/// The encodings the demo compares.
enum class Encoding { kNone, kSinusoidal, kLearned, kRotary };

/// The display name of an encoding ("none", "sinusoidal", "learned", "rotary").
std::string name_of(Encoding encoding);

/// The task and the model's size.
struct DemoOptions {
  int64_t seq_len = 16;
  int64_t vocab = 32;
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t layers = 2;
  int64_t feedforward = 128;
  int64_t batch = 64;
  int64_t steps = 1000;
  double learning_rate = 2e-3;
  int64_t held_out = 1024;
  uint64_t seed = 0;
  torch::Device device = torch::kCPU;
};

/// One training run's outcome.
struct DemoResult {
  Encoding encoding = Encoding::kNone;
  double final_loss = 0;        // mean training loss over the last 50 steps
  double first_loss = 0;        // mean training loss over the first 50 steps
  double held_out_accuracy = 0; // token accuracy on sequences never seen in training
  double seconds = 0;           // wall-clock training time
};

/// Called every `interval` steps with (step, loss, accuracy of the current batch).
using Progress = std::function<void(int64_t step, double loss, double accuracy)>;

/// The best held-out token accuracy any model without position information can reach on the
/// task: at output position i it sees only the token at i and the multiset of the sequence, so its
/// best guess is the most frequent of the other tokens. Estimated from `samples` sequences.
double position_blind_ceiling(const DemoOptions& options, int64_t samples = 100000);

/// Trains the model with `encoding` on the reversal task and evaluates it. Deterministic for a
/// given `options.seed` on a given device and LibTorch.
DemoResult train_reversal(Encoding encoding, const DemoOptions& options,
                          const Progress& progress = nullptr, int64_t interval = 100);

} // namespace demo
} // namespace posenc
