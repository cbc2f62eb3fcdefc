// LearnedPositionalEmbedding.

#include <posenc/export.h>
#include <posenc/posenc.h>

#include "test_util.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <string>

using posenc::LearnedPositionalEmbedding;
using posenc::LearnedPositionalEmbeddingOptions;

namespace {

class Learned : public posenc_test::SeededTest {};

using posenc_test::printed;

} // namespace

TEST_F(Learned, RegistersTrainableTableWithNormalInit) {
  LearnedPositionalEmbedding pos(256, 512);
  ASSERT_TRUE(pos->named_parameters().contains("weight"));
  EXPECT_TRUE(pos->named_buffers().is_empty());
  EXPECT_EQ(pos->weight.sizes(), (std::vector<int64_t>{512, 256}));
  EXPECT_TRUE(pos->weight.requires_grad());
  // 131072 draws of normal(0, 0.02): the sample std is 0.02 to within 0.3%.
  EXPECT_NEAR(pos->weight.std().item<double>(), 0.02, 0.0005);
  EXPECT_NEAR(pos->weight.mean().item<double>(), 0.0, 0.0005);
}

TEST_F(Learned, ForwardAddsRowsAndGradientReachesThem) {
  LearnedPositionalEmbedding pos(LearnedPositionalEmbeddingOptions(4, 10).batch_first(false));
  const auto x = torch::randn({3, 2, 4}, torch::requires_grad());
  const auto y = pos(x, 5);
  EXPECT_TRUE(torch::equal(y, x + pos->weight.narrow(0, 5, 3).unsqueeze(1)));
  y.sum().backward();
  auto expected = torch::zeros({10, 4});
  expected.narrow(0, 5, 3).fill_(2.0); // two sequences in the batch
  EXPECT_TRUE(torch::equal(pos->weight.grad(), expected));
  EXPECT_TRUE(torch::equal(x.grad(), torch::ones({3, 2, 4})));
}

TEST_F(Learned, PositionsAndPadding) {
  LearnedPositionalEmbedding pos(4, 10);
  const auto x = torch::randn({2, 3, 4});
  const auto positions = torch::tensor({{2, 9, -1}, {0, 0, 1}}, torch::kLong);
  const auto y = pos->forward_positions(x, positions);
  EXPECT_TRUE(torch::equal(y[0][1], x[0][1] + pos->weight[9]));
  EXPECT_TRUE(torch::equal(y[0][2], x[0][2]));
  const auto mask = torch::tensor({{1, 0, 0}, {0, 0, 1}}, torch::kBool);
  const auto padded = pos->forward_padded(x, mask);
  EXPECT_TRUE(torch::equal(padded[0][1], x[0][1] + pos->weight[0]));
  EXPECT_TRUE(torch::equal(padded[1][2], x[1][2]));
}

TEST_F(Learned, TrainingMovesOnlyTheRowsUsed) {
  LearnedPositionalEmbedding pos(8, 20);
  const auto before = pos->weight.detach().clone();
  torch::optim::SGD optimizer(pos->parameters(), 0.1);
  const auto loss = pos(torch::randn({4, 6, 8}), 2).pow(2).sum();
  loss.backward();
  optimizer.step();
  const auto changed = (pos->weight.detach() != before).any(1);
  EXPECT_TRUE(changed.narrow(0, 2, 6).all().item<bool>());
  EXPECT_FALSE(changed.narrow(0, 8, 12).any().item<bool>());
}

TEST_F(Learned, ErrorsAndPrinting) {
  LearnedPositionalEmbedding pos(4, 10);
  EXPECT_POSENC_ERROR(
      pos(torch::randn({1, 3, 4}), 8),
      "LearnedPositionalEmbedding: positions offset .. offset + L - 1 must lie in the table, i.e. "
      "offset + L <= max_len (10), but got L = 3 and offset = 8 (offset + L = 11); build the "
      "module with a larger max_len, or split the sequence");
  EXPECT_POSENC_ERROR(
      pos->forward_positions(torch::randn({1, 3, 4}), torch::tensor({0, 1, 10})),
      "positions must be < max_len (10), but got 10; build the module with max_len >= 11");
  EXPECT_POSENC_ERROR(LearnedPositionalEmbedding(0, 10),
                      "LearnedPositionalEmbedding: d_model must be >= 1, but got 0");
  EXPECT_POSENC_ERROR(
      LearnedPositionalEmbedding(LearnedPositionalEmbeddingOptions(4, 10).init_std(-1)),
      "init_std must be finite and >= 0, but got -1");
  EXPECT_EQ(
      printed(*pos),
      "posenc::LearnedPositionalEmbedding(d_model=4, max_len=10, dropout=0, batch_first=true)");
}

TEST_F(Learned, SaveLoadCloneAndBadCheckpoint) {
  LearnedPositionalEmbedding saved(6, 12);
  const std::string path = testing::TempDir() + "learned_" + std::to_string(::getpid()) + ".pt";
  torch::save(saved, path);
  LearnedPositionalEmbedding fresh(6, 12);
  torch::load(fresh, path);
  EXPECT_TRUE(torch::equal(fresh->weight, saved->weight));
  EXPECT_TRUE(fresh->weight.requires_grad());
  LearnedPositionalEmbedding other(6, 13);
  const auto before = other->weight.detach().clone();
  EXPECT_POSENC_ERROR(torch::load(other, path),
                      "LearnedPositionalEmbedding: the checkpoint's weight has shape [12, 6], but "
                      "this module's is [13, 6]");
  EXPECT_TRUE(torch::equal(other->weight, before));
  std::remove(path.c_str());
  auto copy = std::dynamic_pointer_cast<posenc::LearnedPositionalEmbeddingImpl>(saved->clone());
  EXPECT_TRUE(torch::equal(copy->weight, saved->weight));
  EXPECT_NE(copy->weight.data_ptr(), saved->weight.data_ptr());
}

TEST_F(Learned, ExportEqualsModule) {
  LearnedPositionalEmbedding pos(LearnedPositionalEmbeddingOptions(5, 9).scale(2.0));
  auto exported = posenc::to_torchscript(pos);
  const auto x = torch::randn({2, 4, 5});
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(exported.forward({x, int64_t{3}}).toTensor(), pos(x, 3)));
  const auto positions = torch::tensor({{0, 8, -1, 2}, {1, 1, 1, 1}}, torch::kLong);
  EXPECT_TRUE(torch::equal(exported.run_method("forward_positions", x, positions).toTensor(),
                           pos->forward_positions(x, positions)));
  EXPECT_THROW(exported.forward({x, int64_t{7}}), std::exception);
  // A learned table has no definition to compute fractional positions from: both refuse them.
  const auto fractional = torch::tensor({0.5, 1.0, 2.0, 3.0});
  EXPECT_POSENC_ERROR(pos->forward_positions(x, fractional),
                      "LearnedPositionalEmbedding: floating-point positions (Float) are computed "
                      "from the encoding's definition, which this call lacks (a learned table has "
                      "none)");
  try {
    exported.run_method("forward_positions", x, fractional);
    FAIL() << "expected an error";
  } catch (const std::exception& e) { // TorchScript raises its own exception type
    EXPECT_NE(std::string(e.what()).find("LearnedPositionalEmbedding: floating-point positions are "
                                         "computed from the encoding's definition, which a learned "
                                         "table does not have"),
              std::string::npos)
        << e.what();
  }
}
