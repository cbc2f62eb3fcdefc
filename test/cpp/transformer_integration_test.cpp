// posenc::PositionalEncoding in a real LibTorch transformer: Embedding -> PositionalEncoding
// (sequence-first, the layout torch::nn::TransformerEncoder takes) -> TransformerEncoder.

#include <posenc/posenc.h>

#include <torch/torch.h>

#include <gtest/gtest.h>

namespace {

struct TinyEncoderImpl : torch::nn::Module {
  TinyEncoderImpl(int64_t vocab, int64_t d_model, int64_t max_len)
      : embedding(register_module("embedding", torch::nn::Embedding(vocab, d_model))),
        positions(register_module(
            "positions",
            posenc::PositionalEncoding(posenc::PositionalEncodingOptions(d_model, max_len).batch_first(false)))),
        encoder(register_module(
            "encoder",
            torch::nn::TransformerEncoder(
                torch::nn::TransformerEncoderOptions(
                    torch::nn::TransformerEncoderLayerOptions(d_model, /*nhead=*/4).dim_feedforward(64).dropout(0.0),
                    /*num_layers=*/2)))),
        head(register_module("head", torch::nn::Linear(d_model, vocab))) {}

  // tokens: [L, B] int64 -> logits [L, B, vocab]
  torch::Tensor forward(const torch::Tensor& tokens) {
    return head(encoder(positions(embedding(tokens))));
  }

  torch::nn::Embedding embedding;
  posenc::PositionalEncoding positions;
  torch::nn::TransformerEncoder encoder;
  torch::nn::Linear head;
};
TORCH_MODULE(TinyEncoder);

} // namespace

TEST(TransformerIntegration, ForwardAndBackwardThroughEncoder) {
  torch::manual_seed(0);
  TinyEncoder model(/*vocab=*/20, /*d_model=*/32, /*max_len=*/64);
  const auto tokens = torch::randint(0, 20, {12, 3}, torch::kLong); // [L, B]
  const auto logits = model(tokens);
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{12, 3, 20}));
  const auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 20}), tokens.reshape({-1}));
  loss.backward();
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  for (const auto& parameter : model->named_parameters()) {
    ASSERT_TRUE(parameter.value().grad().defined()) << parameter.key();
  }
  EXPECT_GT(model->embedding->weight.grad().abs().sum().item<double>(), 0.0);
  EXPECT_FALSE(model->positions->pe.grad().defined());
  // The module's state dict carries the table under the usual key.
  EXPECT_TRUE(model->named_buffers().contains("positions.pe"));
}

// Without positions a transformer encoder is permutation-equivariant; with them, permuting the
// input sequence is no longer the same as permuting the output.
TEST(TransformerIntegration, PositionsBreakPermutationEquivariance) {
  torch::manual_seed(0);
  TinyEncoder model(20, 32, 64);
  model->eval();
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, 20, {10, 2}, torch::kLong);
  const auto permutation = torch::randperm(10, torch::kLong);
  const auto permuted_output = model(tokens).index_select(0, permutation);
  const auto output_of_permuted = model(tokens.index_select(0, permutation));
  EXPECT_FALSE(torch::allclose(permuted_output, output_of_permuted, 1e-4, 1e-4));

  // The same model with the encoding removed is equivariant (to float rounding).
  const auto embed_only = [&](const torch::Tensor& t) { return model->head(model->encoder(model->embedding(t))); };
  EXPECT_TRUE(torch::allclose(
      embed_only(tokens).index_select(0, permutation), embed_only(tokens.index_select(0, permutation)), 1e-4, 1e-5));
}

TEST(TransformerIntegration, TrainingStepsReduceLoss) {
  torch::manual_seed(0);
  TinyEncoder model(16, 32, 32);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));
  const auto tokens = torch::randint(0, 16, {8, 16}, torch::kLong);
  // Target: the token one position earlier (a shift), which needs position information.
  const auto targets = torch::roll(tokens, 1, 0);
  double first = 0;
  double last = 0;
  for (int step = 0; step < 30; ++step) {
    optimizer.zero_grad();
    const auto loss = torch::nn::functional::cross_entropy(model(tokens).reshape({-1, 16}), targets.reshape({-1}));
    loss.backward();
    optimizer.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.5 * first);
}
