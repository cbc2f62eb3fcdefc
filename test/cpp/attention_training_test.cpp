// The attention biases in use: three small models, each one multi-head attention layer whose only
// source of order is its positional bias (ALiBi, T5's relative position bias, Conformer's
// relative positions), trained for a few hundred steps to output the previous token of a random
// sequence. The same models without the bias see an unordered set of tokens (attention without
// positions is permutation-equivariant) and cannot learn the task.

#include <posenc/posenc.h>

#include "test_util.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>

namespace {

enum class Bias { kNone, kAlibi, kT5, kConformer };

constexpr int64_t kVocab = 8;
constexpr int64_t kLength = 12;
constexpr int64_t kWidth = 32;
constexpr int64_t kHeads = 4;

// Embedding -> one attention layer with the bias (+ residual) -> linear read-out.
struct TinyModelImpl : torch::nn::Module {
  explicit TinyModelImpl(Bias bias_) : bias(bias_) {
    embed = register_module("embed", torch::nn::Embedding(kVocab, kWidth));
    qkv = register_module("qkv", torch::nn::Linear(kWidth, 3 * kWidth));
    out = register_module("out", torch::nn::Linear(kWidth, kVocab));
    alibi = register_module("alibi", posenc::ALiBi(kHeads));
    t5 = register_module("t5", posenc::RelativePositionBias(
                                   posenc::RelativePositionBiasOptions(kHeads).num_buckets(16).max_distance(16)));
    rel_pos = register_module("rel_pos", posenc::RelPositionalEncoding(
                                             posenc::RelPositionalEncodingOptions(kWidth).max_len(kLength)));
    rel_attn = register_module("rel_attn", posenc::RelPositionMultiheadAttention(kWidth, kHeads));
  }

  torch::Tensor forward(const torch::Tensor& tokens) {
    const torch::Tensor x = embed(tokens); // [B, L, D]
    const int64_t batch = x.size(0);
    torch::Tensor attended;
    if (bias == Bias::kConformer) {
      auto [scaled, pos_emb] = rel_pos->forward(x);
      attended = rel_attn(scaled, scaled, scaled, pos_emb);
    } else {
      const auto chunks = qkv(x).chunk(3, -1);
      const auto split = [&](const torch::Tensor& t) {
        return t.view({batch, kLength, kHeads, kWidth / kHeads}).transpose(1, 2);
      };
      torch::Tensor scores = torch::matmul(split(chunks[0]), split(chunks[1]).transpose(-2, -1)) /
                             std::sqrt(static_cast<double>(kWidth / kHeads));
      if (bias == Bias::kAlibi) {
        scores = scores + alibi(kLength, kLength, c10::nullopt, /*causal=*/true);
      } else if (bias == Bias::kT5) {
        scores = scores + t5(kLength, kLength);
      }
      attended = torch::matmul(torch::softmax(scores, -1), split(chunks[2]))
                     .transpose(1, 2)
                     .reshape({batch, kLength, kWidth});
    }
    return out(x + attended);
  }

  Bias bias;
  torch::nn::Embedding embed{nullptr};
  torch::nn::Linear qkv{nullptr}, out{nullptr};
  posenc::ALiBi alibi{nullptr};
  posenc::RelativePositionBias t5{nullptr};
  posenc::RelPositionalEncoding rel_pos{nullptr};
  posenc::RelPositionMultiheadAttention rel_attn{nullptr};
};
TORCH_MODULE(TinyModel);

// Trains on "output the previous token" (the first position outputs itself) and returns the
// accuracy on fresh sequences.
double train_previous_token(Bias bias, int steps) {
  torch::manual_seed(0);
  TinyModel model(bias);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));
  const auto batch_of = [](int64_t size) {
    const torch::Tensor tokens = torch::randint(kVocab, {size, kLength});
    const torch::Tensor targets = torch::cat({tokens.narrow(1, 0, 1), tokens.narrow(1, 0, kLength - 1)}, 1);
    return std::make_pair(tokens, targets);
  };
  for (int step = 0; step < steps; ++step) {
    auto [tokens, targets] = batch_of(64);
    const torch::Tensor loss = torch::nn::functional::cross_entropy(
        model(tokens).view({-1, kVocab}), targets.view({-1}));
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
  torch::NoGradGuard no_grad;
  model->eval();
  auto [tokens, targets] = batch_of(512);
  return (model(tokens).argmax(-1) == targets).to(torch::kDouble).mean().item<double>();
}

} // namespace

TEST(AttentionTraining, WithoutPositionsThePreviousTokenIsUnlearnable) {
  // each position sees the same multiset of tokens: little better than guessing the own token
  EXPECT_LT(train_previous_token(Bias::kNone, 300), 0.35);
}

TEST(AttentionTraining, AlibiLearnsThePreviousToken) {
  EXPECT_GT(train_previous_token(Bias::kAlibi, 300), 0.9);
}

TEST(AttentionTraining, T5BiasLearnsThePreviousToken) {
  EXPECT_GT(train_previous_token(Bias::kT5, 300), 0.9);
}

TEST(AttentionTraining, ConformerRelativeAttentionLearnsThePreviousToken) {
  EXPECT_GT(train_previous_token(Bias::kConformer, 300), 0.9);
}
