#include "demo/reversal.h"

#include <posenc/posenc.h>

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <deque>
#include <numeric>

namespace posenc {
namespace demo {

std::string name_of(Encoding encoding) {
  switch (encoding) {
    case Encoding::kNone:
      return "none";
    case Encoding::kSinusoidal:
      return "sinusoidal";
    case Encoding::kLearned:
      return "learned";
    case Encoding::kRotary:
      return "rotary";
  }
  return "?";
}

namespace {

// An encoder layer whose self-attention rotates queries and keys with posenc::RotaryEmbedding:
// the layout of torch::nn::TransformerEncoderLayer (post-norm, ReLU feed-forward), with attention
// written out because torch::nn::MultiheadAttention offers no hook between the projections and the
// scores.
struct RotaryEncoderLayerImpl : torch::nn::Module {
  RotaryEncoderLayerImpl(int64_t d_model, int64_t heads, int64_t feedforward, int64_t max_len)
      : heads(heads),
        qkv(register_module("qkv", torch::nn::Linear(d_model, 3 * d_model))),
        out(register_module("out", torch::nn::Linear(d_model, d_model))),
        up(register_module("up", torch::nn::Linear(d_model, feedforward))),
        down(register_module("down", torch::nn::Linear(feedforward, d_model))),
        norm1(
            register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})))),
        norm2(
            register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})))),
        rope(register_module("rope",
                             RotaryEmbedding(RotaryEmbeddingOptions(d_model / heads, max_len)))) {}

  // x: [B, L, D]
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t batch = x.size(0);
    const int64_t length = x.size(1);
    const int64_t width = x.size(2);
    const int64_t head_dim = width / heads;
    const auto parts = qkv(x).chunk(3, -1);
    const auto q =
        rope(parts[0].reshape({batch, length, heads, head_dim})).transpose(1, 2); // [B, H, L, Dh]
    const auto k = rope(parts[1].reshape({batch, length, heads, head_dim})).transpose(1, 2);
    const auto v = parts[2].reshape({batch, length, heads, head_dim}).transpose(1, 2);
    const auto scores =
        torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
    const auto attended = torch::matmul(torch::softmax(scores, -1), v)
                              .transpose(1, 2)
                              .reshape({batch, length, width});
    const auto h = norm1(x + out(attended));
    return norm2(h + down(torch::relu(up(h))));
  }

  int64_t heads;
  torch::nn::Linear qkv, out, up, down;
  torch::nn::LayerNorm norm1, norm2;
  RotaryEmbedding rope;
};
TORCH_MODULE(RotaryEncoderLayer);

// tokens [B, L] -> logits [B, L, vocab], for any of the four encodings.
struct ReversalModelImpl : torch::nn::Module {
  ReversalModelImpl(Encoding encoding, const DemoOptions& o) : encoding(encoding) {
    // LibTorch initializes embeddings from N(0, 1), not N(0, 1/d_model) as the paper assumes, so
    // tokens are not scaled up by sqrt(d_model): that would drown positions of magnitude <= 1.
    const double scale = 1.0;
    if (encoding == Encoding::kSinusoidal || encoding == Encoding::kLearned) {
      embed = register_module(
          "embed", TokenAndPositionEmbedding(
                       TokenAndPositionEmbeddingOptions(o.vocab, o.d_model, o.seq_len)
                           .positions(encoding == Encoding::kLearned ? PositionKind::kLearned
                                                                     : PositionKind::kSinusoidal)
                           .scale(scale)
                           .batch_first(false)));
      if (embed->learned) {
        // Learned positions start at the tokens' scale. With BERT's std 0.02 next to N(0, 1)
        // tokens they stay at the no-position level within the demo's budget.
        embed->learned->options.init_std(1.0);
        embed->learned->reset_parameters();
      }
    } else {
      tokens = register_module("tokens", torch::nn::Embedding(o.vocab, o.d_model));
      token_scale = scale;
    }
    if (encoding == Encoding::kRotary) {
      for (int64_t i = 0; i < o.layers; ++i) {
        rotary_layers.push_back(
            register_module("layer" + std::to_string(i),
                            RotaryEncoderLayer(o.d_model, o.heads, o.feedforward, o.seq_len)));
      }
    } else {
      encoder = register_module("encoder",
                                torch::nn::TransformerEncoder(torch::nn::TransformerEncoderOptions(
                                    torch::nn::TransformerEncoderLayerOptions(o.d_model, o.heads)
                                        .dim_feedforward(o.feedforward)
                                        .dropout(0.0),
                                    o.layers)));
    }
    head = register_module("head", torch::nn::Linear(o.d_model, o.vocab));
  }

  torch::Tensor forward(const torch::Tensor& ids) {
    if (encoding == Encoding::kRotary) {
      auto h = tokens(ids) * token_scale; // [B, L, D]
      for (auto& layer : rotary_layers) {
        h = layer(h);
      }
      return head(h);
    }
    // torch::nn::TransformerEncoder takes [L, B, D].
    const auto seq_first = ids.t();
    const auto h = embed ? embed(seq_first) : tokens(seq_first) * token_scale;
    return head(encoder(h)).transpose(0, 1);
  }

  Encoding encoding;
  TokenAndPositionEmbedding embed{nullptr};
  torch::nn::Embedding tokens{nullptr};
  double token_scale = 1.0;
  torch::nn::TransformerEncoder encoder{nullptr};
  std::vector<RotaryEncoderLayer> rotary_layers;
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(ReversalModel);

// A batch of random sequences and their reversals, from `generator`.
std::pair<torch::Tensor, torch::Tensor> reversal_batch(int64_t batch, const DemoOptions& o,
                                                       const at::Generator& generator) {
  const auto x = at::randint(o.vocab, {batch, o.seq_len}, generator,
                             torch::TensorOptions().dtype(torch::kLong));
  return {x.to(o.device), x.flip({1}).to(o.device)};
}

double mean(const std::deque<double>& values) {
  return values.empty() ? 0.0
                        : std::accumulate(values.begin(), values.end(), 0.0) /
                              static_cast<double>(values.size());
}

} // namespace

double position_blind_ceiling(const DemoOptions& o, int64_t samples) {
  torch::NoGradGuard no_grad;
  auto generator = at::detail::createCPUGenerator(o.seed + 7);
  const auto x = at::randint(o.vocab, {samples, o.seq_len}, generator,
                             torch::TensorOptions().dtype(torch::kLong));
  // Counts of every token in each sequence, minus the token the model sits on (position 0; any
  // position whose mirror is another position gives the same value).
  auto counts =
      torch::zeros({samples, o.vocab}).scatter_add_(1, x, torch::ones({samples, o.seq_len}));
  counts.scatter_add_(1, x.narrow(1, 0, 1), -torch::ones({samples, 1}));
  return (std::get<0>(counts.max(1)) / static_cast<double>(o.seq_len - 1)).mean().item<double>();
}

DemoResult train_reversal(Encoding encoding, const DemoOptions& o, const Progress& progress,
                          int64_t interval) {
  torch::manual_seed(o.seed);
  ReversalModel model(encoding, o);
  model->to(o.device);
  model->train();
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(o.learning_rate));
  auto training_data = at::detail::createCPUGenerator(o.seed + 1);
  auto held_out_data = at::detail::createCPUGenerator(o.seed + 1000003);

  DemoResult result;
  result.encoding = encoding;
  std::deque<double> first;
  std::deque<double> recent;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= o.steps; ++step) {
    // Cosine decay of the learning rate after a short warm-up.
    const double warm = std::min(1.0, static_cast<double>(step) / 50.0);
    const double decay =
        0.5 * (1.0 + std::cos(M_PI * static_cast<double>(step) / static_cast<double>(o.steps)));
    for (auto& group : optimizer.param_groups()) {
      static_cast<torch::optim::AdamOptions&>(group.options())
          .lr(o.learning_rate * warm * (0.05 + 0.95 * decay));
    }
    const auto batch = reversal_batch(o.batch, o, training_data);
    const auto logits = model(batch.first);
    const auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, o.vocab}),
                                                           batch.second.reshape({-1}));
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    const double value = loss.item<double>();
    if (first.size() < 50) {
      first.push_back(value);
    }
    recent.push_back(value);
    if (recent.size() > 50) {
      recent.pop_front();
    }
    if (progress && (step % interval == 0 || step == o.steps)) {
      const double accuracy =
          logits.argmax(-1).eq(batch.second).to(torch::kDouble).mean().item<double>();
      progress(step, mean(recent), accuracy);
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.first_loss = mean(first);
  result.final_loss = mean(recent);

  model->eval();
  torch::NoGradGuard no_grad;
  const auto held_out = reversal_batch(o.held_out, o, held_out_data);
  result.held_out_accuracy =
      model(held_out.first).argmax(-1).eq(held_out.second).to(torch::kDouble).mean().item<double>();
  return result;
}

} // namespace demo
} // namespace posenc
