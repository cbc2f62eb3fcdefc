// What the operator boundary guarantees, for every operator family: each call is validated once
// and reads from the device at most once; every kernel (Meta included) rejects arguments on
// different devices; messages name the entry point that was called; positions past a table are
// computed from the encoding's definition passed as data; the fused dropout mask depends only on
// the seed, the device and the shape; modules reject inputs whose shape contradicts their options.

#include <posenc/posenc.h>

#include "test_util.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

namespace F = posenc::functional;
using posenc::BeyondMaxLen;

namespace {

class OpBoundary : public posenc_test::SeededTest {};

using posenc_test::HostReadCounter;

const torch::Device kMeta(torch::kMeta);

} // namespace

// --- one read from the device per call --------------------------------------------------------

TEST_F(OpBoundary, OffsetFormReadsNothingFromTheDevice) {
  posenc::PositionalEncoding pe(16, 64);
  const HostReadCounter counter;
  pe(torch::randn({2, 5, 16}), 7);
  EXPECT_EQ(HostReadCounter::reads(), 0);
  EXPECT_EQ(HostReadCounter::items(), 0);
}

TEST_F(OpBoundary, ExplicitPositionsAreReadOncePerModuleCall) {
  posenc::PositionalEncoding pe(16, 64);
  posenc::LearnedPositionalEmbedding learned(16, 64);
  posenc::RotaryEmbedding rope(8, 64);
  const auto positions = torch::tensor({{0, 3, -1}, {5, 6, 7}}, torch::kLong);
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { pe->forward_positions(torch::randn({2, 3, 16}), positions); },
           [&] { learned->forward_positions(torch::randn({2, 3, 16}), positions); },
           [&] { rope->forward_positions(torch::randn({2, 3, 4, 8}), positions); },
           [&] { pe->forward_padded(torch::randn({2, 3, 16}), positions.lt(0)); }}) {
    const HostReadCounter counter;
    call();
    EXPECT_EQ(HostReadCounter::reads(), 1);
    EXPECT_EQ(HostReadCounter::items(), 0);
  }
}

TEST_F(OpBoundary, TokenIdsAndPaddingPositionsShareOneRead) {
  posenc::TokenAndPositionEmbedding embed(
      posenc::TokenAndPositionEmbeddingOptions(30, 16, 64).padding_idx(0));
  const auto ids = torch::tensor({{0, 0, 4, 5}, {7, 8, 9, 0}}, torch::kLong);
  const HostReadCounter counter;
  embed(ids, 3);
  EXPECT_EQ(HostReadCounter::reads(), 1);
  EXPECT_EQ(HostReadCounter::items(), 0);
}

TEST_F(OpBoundary, PositionsPastTheTableAreReadOnceToo) {
  posenc::PositionalEncoding pe(
      posenc::PositionalEncodingOptions(16, 8).beyond_max_len(BeyondMaxLen::kExtrapolate));
  const HostReadCounter counter;
  pe->forward_positions(torch::randn({2, 3, 16}), torch::tensor({4, 9, 30}, torch::kLong));
  EXPECT_EQ(HostReadCounter::reads(), 1);
  EXPECT_EQ(HostReadCounter::items(), 0);
}

// --- devices, in every kernel ------------------------------------------------------------------

TEST_F(OpBoundary, MetaTableWithCpuInputIsRejectedByEveryTableVariant) {
  const auto table = torch::empty({16, 8}, kMeta);
  auto x = torch::randn({2, 3, 8});
  const std::string message = "expected the input on the device of the encoding table (meta), "
                              "but got an input on cpu";
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table(x, table), message);
  const auto before = x.clone();
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table_(x, table), message);
  EXPECT_TRUE(torch::equal(x, before));
  auto out = torch::empty({2, 3, 8});
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table_out(out, x, table), message);
}

TEST_F(OpBoundary, OutOnAnotherDeviceIsRejected) {
  auto out = torch::empty({2, 3, 8}, kMeta);
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table_out(out, torch::randn({2, 3, 8}),
                                                          F::sinusoidal_table(16, 8)),
                      "out must have the input's dtype and device");
}

TEST_F(OpBoundary, MetaPositionsAreRejectedByEveryFamily) {
  const auto positions = torch::zeros({3}, torch::TensorOptions(torch::kLong).device(kMeta));
  const std::string message = "positions must be on the input's device (cpu), but got meta";
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table(torch::randn({2, 3, 8}),
                                                      F::sinusoidal_table(16, 8), 0, true,
                                                      positions),
                      message);
  const auto tables = F::rotary_tables(16, 8);
  EXPECT_POSENC_ERROR(posenc::ops::apply_rotary(torch::randn({2, 3, 1, 8}), tables.first,
                                                tables.second, 0, positions),
                      message);
  EXPECT_POSENC_ERROR(posenc::ops::token_and_position_embedding(
                          torch::zeros({2, 3}, torch::kLong), torch::randn({10, 8}),
                          F::sinusoidal_table(16, 8), 0, true, positions),
                      message);
}

TEST_F(OpBoundary, MetaCachesWithCpuInputAreRejectedInPlaceToo) {
  const auto cos = torch::empty({16, 4}, kMeta);
  auto x = torch::randn({1, 3, 2, 8});
  const auto before = x.clone();
  EXPECT_POSENC_ERROR(posenc::ops::apply_rotary_(x, cos, cos),
                      "expected the input on the device of the cos/sin caches (meta)");
  EXPECT_TRUE(torch::equal(x, before));
}

TEST_F(OpBoundary, MetaWeightWithCpuTokensIsRejected) {
  EXPECT_POSENC_ERROR(
      posenc::ops::token_and_position_embedding(torch::zeros({2, 3}, torch::kLong),
                                                torch::empty({10, 8}, kMeta),
                                                torch::empty({16, 8}, kMeta)),
      "expected the token ids on the module's device (meta), but got cpu");
}

// --- messages name the entry point ---------------------------------------------------------------

TEST_F(OpBoundary, MessagesNameTheModuleOrTheOperatorCalled) {
  posenc::PositionalEncoding pe(8, 16);
  const auto x = torch::randn({1, 4, 8});
  EXPECT_POSENC_ERROR(pe(x, 14), "PositionalEncoding: positions offset .. offset + L - 1");
  // The module's name does not stick to the thread after its error.
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table(x, pe->pe, 14),
                      "posenc::add_position_table: positions offset .. offset + L - 1");
  EXPECT_POSENC_ERROR(F::positional_encoding(x, pe->pe, F::PositionalEncodingFuncOptions().offset(14)),
                      "positional_encoding: positions offset .. offset + L - 1");
}

// --- positions past a table, from the encoding's definition -------------------------------------

TEST_F(OpBoundary, ColumnsExtendATableExactly) {
  const auto options = F::SinusoidalTableFuncOptions().base(300.0);
  const auto small = F::sinusoidal_table(16, 10, options);
  const auto large = F::sinusoidal_table(64, 10, options);
  const auto columns = F::sinusoidal_columns(10, options);
  const auto x = torch::randn({3, 12, 10});
  EXPECT_TRUE(torch::equal(posenc::ops::add_position_table(x, small, 10, true, c10::nullopt, 1.0,
                                                           columns),
                           posenc::ops::add_position_table(x, large, 10)));
  const auto positions = torch::tensor({{63, -1, 2}, {15, 16, 40}, {0, 1, 2}}, torch::kLong);
  const auto y = torch::randn({3, 3, 10});
  EXPECT_TRUE(torch::equal(
      posenc::ops::add_position_table(y, small, 0, true, positions, 2.0, columns),
      posenc::ops::add_position_table(y, large, 0, true, positions, 2.0)));
}

TEST_F(OpBoundary, InvFreqExtendsRotaryCachesExactly) {
  const auto options = F::RotaryTablesFuncOptions().base(500.0);
  const auto small = F::rotary_tables(8, 12, options);
  const auto large = F::rotary_tables(64, 12, options);
  const auto inv_freq = F::rotary_inv_freq(12, options);
  const auto x = torch::randn({2, 6, 3, 12});
  EXPECT_TRUE(torch::equal(posenc::ops::apply_rotary(x, small.first, small.second, 30,
                                                     c10::nullopt, false, false, false, inv_freq),
                           posenc::ops::apply_rotary(x, large.first, large.second, 30)));
}

// Found by the fuzzer: rows past a table of width 0 were sized with a division by the width.
TEST_F(OpBoundary, ColumnsExtendAZeroWidthTable) {
  const auto table = torch::zeros({2, 0});
  const auto columns = torch::zeros({2, 0}, torch::kDouble);
  const auto y = posenc::ops::add_position_table(torch::zeros({1, 3, 0}), table, 1, true,
                                                 c10::nullopt, 1.0, columns);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{1, 3, 0}));
}

TEST_F(OpBoundary, BadColumnsAreRejected) {
  const auto table = F::sinusoidal_table(4, 6);
  const auto x = torch::randn({1, 6, 6});
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table(x, table, 0, true, c10::nullopt, 1.0,
                                                      torch::zeros({2, 5}, torch::kDouble)),
                      "columns must be a float64 [2, D] = [2, 6] column plan");
  auto kinds = F::sinusoidal_columns(6);
  kinds[1][2] = 3.0;
  EXPECT_POSENC_ERROR(
      posenc::ops::add_position_table(x, table, 0, true, c10::nullopt, 1.0, kinds),
      "but column 2 has frequency");
}

TEST_F(OpBoundary, ATableExtendedByColumnsGetsNoGradient) {
  const auto table = F::sinusoidal_table(4, 6).requires_grad_();
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table(torch::randn({1, 6, 6}), table, 0, true,
                                                      c10::nullopt, 1.0, F::sinusoidal_columns(6)),
                      "a table extended past its end by `columns` gets no gradient");
}

// --- one dropout semantics per device ----------------------------------------------------------

TEST_F(OpBoundary, FusedDropoutMaskDoesNotDependOnLayout) {
  const auto tokens = torch::randint(0, 50, {4, 9}, torch::kLong);
  const auto weight = torch::randn({50, 16});
  const auto table = F::sinusoidal_table(32, 16);
  const auto run = [&](const torch::Tensor& t, const torch::Tensor& w) {
    torch::manual_seed(11);
    return posenc::ops::token_and_position_embedding(t, w, table, 2, true, c10::nullopt, 1.5, -1,
                                                     0.4, /*train=*/true);
  };
  const auto contiguous = run(tokens, weight);
  const auto strided = run(tokens.t().contiguous().t(), weight.t().contiguous().t());
  ASSERT_FALSE(tokens.t().contiguous().t().is_contiguous());
  EXPECT_TRUE(torch::equal(std::get<1>(contiguous), std::get<1>(strided)));
  EXPECT_TRUE(torch::equal(std::get<0>(contiguous), std::get<0>(strided)));
}

TEST_F(OpBoundary, FusedDropoutMaskIsTheSameInsideAndPastTheTable) {
  const auto tokens = torch::randint(0, 50, {2, 9}, torch::kLong);
  const auto weight = torch::randn({50, 16});
  const auto run = [&](const torch::Tensor& table, int64_t offset, const torch::Tensor& columns) {
    torch::manual_seed(5);
    return std::get<1>(posenc::ops::token_and_position_embedding(
        tokens, weight, table, offset, true, c10::nullopt, 1.0, -1, 0.3, true,
        columns.defined() ? c10::optional<torch::Tensor>(columns) : c10::nullopt));
  };
  const auto inside = run(F::sinusoidal_table(64, 16), 40, torch::Tensor());
  const auto past = run(F::sinusoidal_table(8, 16), 40, F::sinusoidal_columns(16));
  EXPECT_TRUE(torch::equal(inside, past));
  EXPECT_GT(inside.logical_not().sum().item<int64_t>(), 0);
}

TEST_F(OpBoundary, TokenModulePastMaxLenUsesTheFusedDropout) {
  auto options = posenc::TokenAndPositionEmbeddingOptions(50, 16, 8).dropout(0.5);
  posenc::TokenAndPositionEmbedding past(options.beyond_max_len(BeyondMaxLen::kExtrapolate));
  posenc::TokenAndPositionEmbedding inside(posenc::TokenAndPositionEmbeddingOptions(50, 16, 64)
                                               .dropout(0.5)
                                               .beyond_max_len(BeyondMaxLen::kExtrapolate));
  inside->tokens->weight.data().copy_(past->tokens->weight.data());
  const auto ids = torch::randint(0, 50, {2, 6}, torch::kLong);
  torch::manual_seed(3);
  const auto a = past(ids, 20);
  torch::manual_seed(3);
  const auto b = inside(ids, 20);
  EXPECT_TRUE(torch::equal(a, b));
}

// --- shapes against options ---------------------------------------------------------------------

TEST_F(OpBoundary, RotaryModuleRejectsHeadsOfAnotherWidth) {
  posenc::RotaryEmbedding rope(posenc::RotaryEmbeddingOptions(8, 16).rotary_dim(4));
  EXPECT_POSENC_ERROR(rope(torch::randn({1, 3, 2, 10})),
                      "RotaryEmbedding: expected heads of width head_dim = 8, but got 10");
  EXPECT_POSENC_ERROR(rope(torch::randn({1, 3, 2, 6})),
                      "RotaryEmbedding: expected heads of width head_dim = 8, but got 6");
  // The operator itself rotates the first R channels of any wider head (partial rotary).
  const auto x = torch::randn({1, 3, 2, 10});
  EXPECT_TRUE(torch::equal(posenc::ops::apply_rotary(x, rope->cos, rope->sin).narrow(-1, 4, 6),
                           x.narrow(-1, 4, 6)));
}
