// posenc::PositionalEncoding in a real LibTorch transformer: Embedding -> PositionalEncoding
// (sequence-first, the layout torch::nn::TransformerEncoder takes) -> TransformerEncoder.

#include <posenc/export.h>
#include <posenc/posenc.h>

#include <torch/torch.h>

#include "test_util.h"

#include <gtest/gtest.h>

#include <sstream>

namespace {

struct TinyEncoderImpl : torch::nn::Module {
  TinyEncoderImpl(int64_t vocab, int64_t d_model, int64_t max_len)
      : embedding(register_module("embedding", torch::nn::Embedding(vocab, d_model))),
        positions(register_module(
            "positions",
            posenc::PositionalEncoding(
                posenc::PositionalEncodingOptions(d_model, max_len).batch_first(false)))),
        encoder(register_module("encoder",
                                torch::nn::TransformerEncoder(torch::nn::TransformerEncoderOptions(
                                    torch::nn::TransformerEncoderLayerOptions(d_model, /*nhead=*/4)
                                        .dim_feedforward(64)
                                        .dropout(0.0),
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
  const auto loss =
      torch::nn::functional::cross_entropy(logits.reshape({-1, 20}), tokens.reshape({-1}));
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
  const auto embed_only = [&](const torch::Tensor& t) {
    return model->head(model->encoder(model->embedding(t)));
  };
  EXPECT_TRUE(torch::allclose(embed_only(tokens).index_select(0, permutation),
                              embed_only(tokens.index_select(0, permutation)),
                              1e-4,
                              1e-5));
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
    const auto loss = torch::nn::functional::cross_entropy(model(tokens).reshape({-1, 16}),
                                                           targets.reshape({-1}));
    loss.backward();
    optimizer.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.5 * first);
}

// --- TokenAndPositionEmbedding: the block in front of the encoder ------------------------------

namespace {

using posenc_test::printed;

} // namespace

TEST(TokenAndPositionEmbedding, EqualsTokenEmbeddingTimesScalePlusEncoding) {
  torch::manual_seed(0);
  posenc::TokenAndPositionEmbedding embed(50, 16, 64);
  EXPECT_DOUBLE_EQ(embed->options.scale(), 4.0);
  const auto ids = torch::randint(0, 50, {3, 7}, torch::kLong);
  const auto expected =
      embed->tokens->weight.index_select(0, ids.reshape({-1})).view({3, 7, 16}) * 4.0 +
      posenc::functional::sinusoidal_table(
          7, 16, posenc::functional::SinusoidalTableFuncOptions().offset(5))
          .unsqueeze(0);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::allclose(embed(ids, 5), expected, 0, 1e-6));
}

TEST(TokenAndPositionEmbedding, LearnedPositionsAndGradients) {
  torch::manual_seed(0);
  posenc::TokenAndPositionEmbedding embed(posenc::TokenAndPositionEmbeddingOptions(20, 8, 10)
                                              .positions(posenc::PositionKind::kLearned)
                                              .scale(1.0));
  ASSERT_TRUE(embed->learned);
  EXPECT_FALSE(embed->sinusoidal);
  const auto ids = torch::tensor({{1, 2, 3}}, torch::kLong);
  embed(ids).sum().backward();
  EXPECT_TRUE(embed->learned->weight.grad().narrow(0, 0, 3).eq(1).all().item<bool>());
  EXPECT_EQ(embed->learned->weight.grad().narrow(0, 3, 7).abs().sum().item<double>(), 0.0);
  EXPECT_EQ(embed->tokens->weight.grad()[2].sum().item<double>(), 8.0);
  const auto names = embed->named_parameters();
  EXPECT_TRUE(names.contains("tokens.weight"));
  EXPECT_TRUE(names.contains("positions.weight"));
}

TEST(TokenAndPositionEmbedding, PaddingGetsNeitherEmbeddingNorPosition) {
  torch::manual_seed(0);
  posenc::TokenAndPositionEmbedding embed(
      posenc::TokenAndPositionEmbeddingOptions(20, 8, 10).padding_idx(0).scale(1.0));
  const auto left = torch::tensor({{0, 0, 5, 6}}, torch::kLong);
  const auto plain = torch::tensor({{5, 6}}, torch::kLong);
  torch::NoGradGuard no_grad;
  const auto y = embed(left);
  EXPECT_EQ(y[0].narrow(0, 0, 2).abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(torch::equal(y[0].narrow(0, 2, 2), embed(plain)[0]));
  // A decoding step continues from the number of real tokens seen.
  EXPECT_TRUE(torch::equal(embed(torch::tensor({{7}}, torch::kLong), 2)[0][0],
                           embed(torch::tensor({{5, 6, 7}}, torch::kLong))[0][2]));
}

TEST(TokenAndPositionEmbedding, FeedsTransformerEncoderSequenceFirst) {
  torch::manual_seed(0);
  posenc::TokenAndPositionEmbedding embed(
      posenc::TokenAndPositionEmbeddingOptions(30, 32, 64).batch_first(false).dropout(0.1));
  torch::nn::TransformerEncoder encoder(torch::nn::TransformerEncoderOptions(
      torch::nn::TransformerEncoderLayerOptions(32, 4).dim_feedforward(64), 2));
  const auto ids = torch::randint(0, 30, {12, 2}, torch::kLong); // [L, B]
  const auto hidden = encoder(embed(ids));
  EXPECT_EQ(hidden.sizes(), (std::vector<int64_t>{12, 2, 32}));
  hidden.sum().backward();
  EXPECT_GT(embed->tokens->weight.grad().abs().sum().item<double>(), 0.0);
}

TEST(TokenAndPositionEmbedding, ErrorsAndPrinting) {
  posenc::TokenAndPositionEmbedding embed(
      posenc::TokenAndPositionEmbeddingOptions(10, 4, 8).padding_idx(1));
  EXPECT_POSENC_ERROR(embed(torch::tensor({{1, 10}}, torch::kLong)),
                      "TokenAndPositionEmbedding: token ids must lie in [0, vocab_size) = [0, 10), "
                      "but got ids from 1 to 10");
  EXPECT_POSENC_ERROR(embed(torch::zeros({2, 3})),
                      "TokenAndPositionEmbedding: expected integer token ids, but got Float");
  EXPECT_POSENC_ERROR(
      embed(torch::zeros({3}, torch::kLong)),
      "expected token ids of shape [B, L] (batch_first=true), but got a 1-D tensor of shape [3]");
  EXPECT_POSENC_ERROR(posenc::TokenAndPositionEmbedding(
                          posenc::TokenAndPositionEmbeddingOptions(10, 4, 8).padding_idx(10)),
                      "padding_idx must be in [0, vocab_size) = [0, 10), but got 10");
  EXPECT_POSENC_ERROR(
      posenc::TokenAndPositionEmbedding(posenc::TokenAndPositionEmbeddingOptions(10, 4, 8)
                                            .positions(posenc::PositionKind::kLearned)
                                            .beyond_max_len(posenc::BeyondMaxLen::kExtrapolate)),
      "learned positions cannot extrapolate past max_len");
  EXPECT_EQ(printed(*embed),
            "posenc::TokenAndPositionEmbedding(vocab_size=10, d_model=4, max_len=8, "
            "positions=sinusoidal, scale=2, padding_idx=1, dropout=0, batch_first=true)");
}

TEST(TokenAndPositionEmbedding, FractionalSinusoidalPositions) {
  torch::manual_seed(0);
  posenc::TokenAndPositionEmbedding embed(20, 8, 16);
  const auto ids = torch::tensor({{1, 2, 3}, {4, 5, 6}}, torch::kLong);
  const auto positions = torch::tensor({{0.0, 2.0, 15.0}, {1.0, 1.0, 3.0}}, torch::kDouble);
  torch::NoGradGuard no_grad;
  // integer-valued floats: the integer result; fractional ones (past max_len too): token rows
  // times the scale plus the sinusoid computed in float64
  EXPECT_TRUE(torch::equal(embed->forward_positions(ids, positions),
                           embed->forward_positions(ids, positions.to(torch::kLong))));
  const auto fractional = torch::tensor({0.5, 7.25, 100.75}, torch::kDouble);
  const auto tokens = embed->tokens->weight.index_select(0, ids.reshape({-1})).view({2, 3, 8});
  EXPECT_TRUE(torch::equal(
      embed->forward_positions(ids, fractional),
      posenc::ops::add_positional_encoding(tokens, 0, 10000.0, true, fractional, embed->options.scale())));
  posenc::TokenAndPositionEmbedding learned(
      posenc::TokenAndPositionEmbeddingOptions(20, 8, 16).positions(posenc::PositionKind::kLearned));
  EXPECT_POSENC_ERROR(learned->forward_positions(ids, fractional),
                      "TokenAndPositionEmbedding: floating-point positions (Double) are computed "
                      "from the encoding's definition, which this call lacks (a learned table has "
                      "none)");
  auto exported = posenc::to_torchscript(embed);
  EXPECT_TRUE(torch::allclose(exported.run_method("forward_positions", ids, fractional).toTensor(),
                              embed->forward_positions(ids, fractional), 0, 1e-6));
}

TEST(TokenAndPositionEmbedding, ExportEqualsModule) {
  torch::manual_seed(0);
  for (const auto kind : {posenc::PositionKind::kSinusoidal, posenc::PositionKind::kLearned}) {
    posenc::TokenAndPositionEmbedding embed(
        posenc::TokenAndPositionEmbeddingOptions(20, 8, 16).positions(kind).padding_idx(0));
    auto exported = posenc::to_torchscript(embed);
    const auto ids = torch::tensor({{0, 3, 4, 5}, {6, 7, 8, 0}}, torch::kLong);
    torch::NoGradGuard no_grad;
    // scale = sqrt(8): the export rounds the product before the sum, as posenc's kernel does.
    EXPECT_TRUE(torch::equal(exported.forward({ids, int64_t{2}}).toTensor(), embed(ids, 2)))
        << kind;
    EXPECT_TRUE(exported.named_parameters().size() ==
                (kind == posenc::PositionKind::kLearned ? 2u : 1u));
  }
}
