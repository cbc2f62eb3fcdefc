// PositionalEncoding beyond consecutive positions: explicit positions, padding, channel layouts,
// frequency spacings, extrapolation past max_len and input scaling, plus their exports.

#include <posenc/export.h>
#include <posenc/posenc.h>

#include "reference.h"
#include "test_util.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace F = posenc::functional;
using posenc::PositionalEncoding;
using posenc::PositionalEncodingOptions;

namespace {

class Positions : public posenc_test::SeededTest {};

// tensor2tensor's get_timing_signal_1d / fairseq's SinusoidalPositionalEmbedding, written from
// their definition: h = D/2 frequencies base^(-k/(h-1)), [sin | cos], a zero column for odd D.
long double tensor2tensor_value(int64_t position,
                                int64_t column,
                                int64_t d_model,
                                long double base = 10000.0L) {
  const int64_t h = d_model / 2;
  if (column >= 2 * h) {
    return 0.0L;
  }
  const int64_t k = column < h ? column : column - h;
  const long double frequency = std::pow(
      base, -static_cast<long double>(k) / static_cast<long double>(std::max<int64_t>(h - 1, 1)));
  const long double angle = static_cast<long double>(position) * frequency;
  return column < h ? std::sin(angle) : std::cos(angle);
}

double max_abs_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

} // namespace

TEST_F(Positions, ExplicitPerSequencePositionsEqualPerRowOffsets) {
  PositionalEncoding pe(8, 64);
  const auto x = torch::randn({3, 5, 8});
  const auto positions =
      torch::tensor({0, 10, 37}, torch::kLong).unsqueeze(1) + torch::arange(5).unsqueeze(0);
  const auto y = pe->forward_positions(x, positions);
  for (int64_t b = 0; b < 3; ++b) {
    const int64_t offset = positions[b][0].item<int64_t>();
    EXPECT_TRUE(torch::equal(y[b], pe(x.narrow(0, b, 1), offset)[0])) << "row " << b;
  }
}

TEST_F(Positions, SharedPositionsAndInt32) {
  PositionalEncoding pe(PositionalEncodingOptions(6, 32).batch_first(false));
  const auto x = torch::randn({4, 2, 6});
  const auto positions = torch::tensor({3, 1, 4, 1}, torch::kInt);
  const auto table = F::sinusoidal_table(32, 6);
  const auto expected = x + table.index_select(0, positions.to(torch::kLong)).unsqueeze(1);
  EXPECT_TRUE(torch::equal(pe->forward_positions(x, positions), expected));
}

TEST_F(Positions, MinusOneMeansPaddingAndAddsNothing) {
  PositionalEncoding pe(4, 16);
  const auto x = torch::randn({1, 3, 4});
  const auto y = pe->forward_positions(x, torch::tensor({{-1, 0, 1}}, torch::kLong));
  EXPECT_TRUE(torch::equal(y[0][0], x[0][0]));
  EXPECT_TRUE(torch::equal(y[0].narrow(0, 1, 2), pe(x.narrow(1, 1, 2))[0]));
}

TEST_F(Positions, PositionsFromPaddingMaskCountFromFirstRealToken) {
  const auto mask =
      torch::tensor({{1, 1, 0, 0, 0}, {0, 0, 0, 1, 1}, {0, 1, 0, 0, 1}}, torch::kBool);
  const auto expected =
      torch::tensor({{-1, -1, 0, 1, 2}, {0, 1, 2, -1, -1}, {0, -1, 1, 2, -1}}, torch::kLong);
  EXPECT_TRUE(torch::equal(F::positions_from_padding_mask(mask), expected));
  EXPECT_TRUE(
      torch::equal(F::positions_from_padding_mask(mask.t(), /*batch_first=*/false), expected.t()));
  const auto tokens = torch::tensor({{0, 0, 7, 8, 9}}, torch::kLong);
  EXPECT_TRUE(torch::equal(F::positions_from_tokens(tokens, /*padding_idx=*/0),
                           torch::tensor({{-1, -1, 0, 1, 2}}, torch::kLong)));
}

// Left-padded and right-padded copies of the same sequence get the same encodings on their real
// tokens (the left one's shifted), and padding gets none.
TEST_F(Positions, PaddedForwardIsIndependentOfPaddingSide) {
  for (const bool batch_first : {true, false}) {
    PositionalEncoding pe(PositionalEncodingOptions(8, 16).batch_first(batch_first));
    const auto sequence = torch::randn({3, 8});
    const auto pad = torch::randn({2, 8});
    auto left = torch::cat({pad, sequence}).unsqueeze(0);
    auto right = torch::cat({sequence, pad}).unsqueeze(0);
    auto left_mask = torch::tensor({{1, 1, 0, 0, 0}}, torch::kBool);
    auto right_mask = torch::tensor({{0, 0, 0, 1, 1}}, torch::kBool);
    if (!batch_first) {
      left = left.transpose(0, 1);
      right = right.transpose(0, 1);
      left_mask = left_mask.t();
      right_mask = right_mask.t();
    }
    const int64_t seq = batch_first ? 1 : 0;
    const auto y_left = pe->forward_padded(left, left_mask);
    const auto y_right = pe->forward_padded(right, right_mask);
    const auto plain = pe(sequence.unsqueeze(batch_first ? 0 : 1));
    EXPECT_TRUE(torch::equal(y_left.narrow(seq, 2, 3), plain));
    EXPECT_TRUE(torch::equal(y_right.narrow(seq, 0, 3), plain));
    EXPECT_TRUE(torch::equal(y_left.narrow(seq, 0, 2), left.narrow(seq, 0, 2)));
    EXPECT_TRUE(torch::equal(y_right.narrow(seq, 3, 2), right.narrow(seq, 3, 2)));
  }
}

TEST_F(Positions, ConcatenatedLayoutPermutesInterleavedColumns) {
  for (const int64_t d : {6, 7}) {
    const auto interleaved = F::sinusoidal_table(20, d);
    const auto concatenated = F::sinusoidal_table(
        20, d, F::SinusoidalTableFuncOptions().layout(posenc::ChannelLayout::kConcatenated));
    std::vector<int64_t> order;
    for (int64_t c = 0; c < d; c += 2)
      order.push_back(c); // sines
    for (int64_t c = 1; c < d; c += 2)
      order.push_back(c); // cosines
    EXPECT_TRUE(torch::equal(concatenated, interleaved.index_select(1, torch::tensor(order))))
        << "d=" << d;
  }
}

TEST_F(Positions, Tensor2TensorSpacingMatchesItsDefinition) {
  for (const int64_t d : {8, 9, 2, 3}) {
    const auto table = F::sinusoidal_table(300,
                                           d,
                                           F::SinusoidalTableFuncOptions()
                                               .layout(posenc::ChannelLayout::kConcatenated)
                                               .spacing(posenc::FrequencySpacing::kTensor2Tensor)
                                               .dtype(torch::kDouble));
    double worst = 0;
    for (int64_t p = 0; p < 300; ++p) {
      for (int64_t c = 0; c < d; ++c) {
        worst = std::max(worst,
                         static_cast<double>(
                             std::fabs(table[p][c].item<double>() - tensor2tensor_value(p, c, d))));
      }
    }
    EXPECT_LE(worst, 1e-13) << "d=" << d;
    if (d % 2 == 1) {
      EXPECT_EQ(table.select(1, d - 1).abs().max().item<double>(), 0.0);
    }
  }
}

TEST_F(Positions, ModuleUsesLayoutAndSpacing) {
  PositionalEncoding pe(PositionalEncodingOptions(10, 50)
                            .layout(posenc::ChannelLayout::kConcatenated)
                            .spacing(posenc::FrequencySpacing::kTensor2Tensor));
  const auto expected = F::sinusoidal_table(50,
                                            10,
                                            F::SinusoidalTableFuncOptions()
                                                .layout(posenc::ChannelLayout::kConcatenated)
                                                .spacing(posenc::FrequencySpacing::kTensor2Tensor));
  EXPECT_TRUE(torch::equal(pe->pe[0], expected));
}

// Past max_len, kExtrapolate computes exactly what a larger table holds; the buffer keeps its
// shape.
TEST_F(Positions, ExtrapolationEqualsALargerTable) {
  PositionalEncoding small(
      PositionalEncodingOptions(16, 10).beyond_max_len(posenc::BeyondMaxLen::kExtrapolate));
  PositionalEncoding large(16, 100000);
  const auto x = torch::randn({2, 6, 16});
  EXPECT_TRUE(torch::equal(small(x, 7), large(x, 7)));         // straddles max_len
  EXPECT_TRUE(torch::equal(small(x, 99990), large(x, 99990))); // far past it
  const auto positions =
      torch::tensor({{0, 9, 10, 500, -1, 99999}, {3, 3, 3, 3, 3, 3}}, torch::kLong);
  EXPECT_TRUE(
      torch::equal(small->forward_positions(x, positions), large->forward_positions(x, positions)));
  EXPECT_EQ(small->pe.sizes(), (std::vector<int64_t>{1, 10, 16}));
}

TEST_F(Positions, ExtrapolationWorksInDoubleAndForTensor2Tensor) {
  const auto options = PositionalEncodingOptions(9, 4)
                           .layout(posenc::ChannelLayout::kConcatenated)
                           .spacing(posenc::FrequencySpacing::kTensor2Tensor)
                           .beyond_max_len(posenc::BeyondMaxLen::kExtrapolate);
  PositionalEncoding small(options);
  PositionalEncoding large(PositionalEncodingOptions(options).max_len(64));
  small->to(torch::kDouble);
  large->to(torch::kDouble);
  const auto x = torch::randn({1, 20, 9}, torch::kDouble);
  EXPECT_TRUE(torch::equal(small(x, 40), large(x, 40)));
}

TEST_F(Positions, ErrorPolicyNamesTheWayOut) {
  PositionalEncoding pe(4, 8);
  EXPECT_POSENC_ERROR(pe(torch::randn({1, 3, 4}), 6),
                      "build the module with a larger max_len or pass "
                      "beyond_max_len(posenc::BeyondMaxLen::kExtrapolate)");
  EXPECT_POSENC_ERROR(
      pe->forward_positions(torch::randn({1, 3, 4}), torch::tensor({0, 1, 8}, torch::kLong)),
      "PositionalEncoding: positions must be < max_len (8), but got 8; build the module with "
      "max_len >= 9 or pass beyond_max_len");
}

TEST_F(Positions, ScaleMultipliesTheInput) {
  PositionalEncoding pe(PositionalEncodingOptions(16, 32).scale_sqrt_d_model());
  EXPECT_DOUBLE_EQ(pe->options.scale(), 4.0);
  const auto x = torch::randn({2, 5, 16}, torch::requires_grad());
  const auto y = pe(x, 3);
  EXPECT_TRUE(torch::allclose(
      y,
      x * 4 + F::sinusoidal_table(5, 16, F::SinusoidalTableFuncOptions().offset(3)).unsqueeze(0),
      0,
      1e-6));
  const auto upstream = torch::randn({2, 5, 16});
  y.backward(upstream);
  EXPECT_TRUE(torch::allclose(x.grad(), upstream * 4));
  // bfloat16: the scaled sum is formed in float32 and rounded once.
  const auto xb = x.detach().to(torch::kBFloat16);
  const auto expected =
      (xb.to(torch::kFloat) * 4 + F::sinusoidal_table(5, 16).unsqueeze(0)).to(torch::kBFloat16);
  EXPECT_LE(max_abs_difference(pe(xb), expected), 0.0625); // at most one bfloat16 ulp at |y| < 16
  EXPECT_EQ(pe(xb).scalar_type(), torch::kBFloat16);
}

TEST_F(Positions, PrettyPrintShowsNonDefaultOptions) {
  std::ostringstream stream;
  PositionalEncoding(PositionalEncodingOptions(8, 16)
                         .layout(posenc::ChannelLayout::kConcatenated)
                         .spacing(posenc::FrequencySpacing::kTensor2Tensor)
                         .beyond_max_len(posenc::BeyondMaxLen::kExtrapolate)
                         .scale(2.5))
      ->pretty_print(stream);
  EXPECT_EQ(stream.str(),
            "posenc::PositionalEncoding(d_model=8, max_len=16, dropout=0, batch_first=true, "
            "layout=concatenated, spacing=tensor2tensor, beyond_max_len=extrapolate, scale=2.5)");
}

TEST_F(Positions, PositionErrors) {
  PositionalEncoding pe(4, 8);
  const auto x = torch::randn({2, 3, 4});
  EXPECT_POSENC_ERROR(pe->forward_positions(x, torch::zeros({3}, torch::kBool)),
                      "PositionalEncoding: positions must be an integer tensor (int64 or int32) or "
                      "a floating-point one, but got Bool");
  EXPECT_POSENC_ERROR(
      pe->forward_positions(x, torch::zeros({3, 2}, torch::kLong)),
      "positions must have shape [L] = [3] or [B, L] (batch_first=true) = [2, 3], but got [3, 2]");
  EXPECT_POSENC_ERROR(pe->forward_positions(x, torch::full({3}, -2, torch::kLong)),
                      "positions must be >= -1 (-1 marks padding), but got -2");
  EXPECT_POSENC_ERROR(
      pe->forward_positions(
          x, torch::zeros({3}, torch::TensorOptions().dtype(torch::kLong).device(torch::kMeta))),
      "positions must be on the input's device (cpu), but got meta");
  EXPECT_POSENC_ERROR(
      pe->forward_padded(x, torch::zeros({2, 3})),
      "positions_from_padding_mask: expected a bool padding mask (true = padding), but got Float");
  EXPECT_POSENC_ERROR(PositionalEncoding(PositionalEncodingOptions(4, 8).scale(std::nan(""))),
                      "PositionalEncoding: scale must be finite, but got nan");
}

// Fractional positions (position interpolation, timesteps) are computed from the definition in
// float64 and rounded once, at any position (inside the table, between its rows, far past it).
TEST_F(Positions, FractionalPositionsAreTheDefinitionRoundedOnce) {
  for (const bool batch_first : {true, false}) {
    PositionalEncoding pe(PositionalEncodingOptions(10, 8).batch_first(batch_first));
    const auto values = torch::tensor({{0.0, 0.5, 7.25}, {3.75, 100.5, 12345.125}}, torch::kDouble);
    const auto positions = batch_first ? values : values.t();
    const auto x = torch::zeros(batch_first ? std::vector<int64_t>{2, 3, 10}
                                            : std::vector<int64_t>{3, 2, 10});
    const auto y = pe->forward_positions(x, positions);
    // float32 inputs: float64 rows rounded once to float32 (2^-25), plus the float64 evaluation's
    // own error at |angle| <= 12345 (~1e-12).
    double worst = 0;
    for (int64_t i = 0; i < positions.size(0); ++i) {
      for (int64_t j = 0; j < positions.size(1); ++j) {
        const long double at = positions[i][j].item<double>();
        for (int64_t c = 0; c < 10; ++c) {
          worst = std::max(worst, std::abs(y[i][j][c].item<double>() -
                                           static_cast<double>(posenc_test::reference_pe_at(at, c, 10))));
        }
      }
    }
    EXPECT_LE(worst, posenc_test::kFloat32TableTolerance) << "batch_first=" << batch_first;
  }
  // The table-less operator: the same rows (and float32 positions are read exactly).
  const auto x = torch::randn({1, 3, 6});
  const auto positions = torch::tensor({0.25f, 2.5f, 9000.75f});
  PositionalEncoding pe(6, 4);
  EXPECT_TRUE(torch::equal(posenc::ops::add_positional_encoding(x, 0, 10000.0, true, positions),
                           pe->forward_positions(x, positions)));
}

TEST_F(Positions, IntegerValuedFloatPositionsEqualIntegerOnes) {
  PositionalEncoding pe(PositionalEncodingOptions(12, 64).layout(posenc::ChannelLayout::kConcatenated));
  const auto x = torch::randn({2, 4, 12});
  const auto positions = torch::tensor({{0, 5, 63, 2}, {7, 7, 1, 30}}, torch::kLong);
  const auto expected = pe->forward_positions(x, positions);
  for (const auto dtype : {torch::kDouble, torch::kFloat, torch::kHalf}) {
    EXPECT_TRUE(torch::equal(pe->forward_positions(x, positions.to(dtype)), expected)) << dtype;
  }
  EXPECT_TRUE(torch::equal(
      posenc::ops::add_positional_encoding(x, 0, 10000.0, true, positions.to(torch::kDouble),
                                           1.0, "concatenated"),
      posenc::ops::add_positional_encoding(x, 0, 10000.0, true, positions, 1.0, "concatenated")));
}

TEST_F(Positions, FractionalPositionErrorsAndGradients) {
  PositionalEncoding pe(4, 8);
  const auto x = torch::randn({1, 3, 4});
  const double inf = std::numeric_limits<double>::infinity();
  for (const double bad : {std::nan(""), inf, -inf, -0.5, 1e19}) {
    const auto positions = torch::tensor({0.0, bad, 1.0}, torch::kDouble);
    EXPECT_POSENC_ERROR(pe->forward_positions(x, positions),
                        "PositionalEncoding: floating-point positions must be finite and in [0, "
                        "2^63), but got ");
    EXPECT_POSENC_ERROR(posenc::ops::add_positional_encoding(x, 0, 10000.0, true, positions),
                        "at index 1; replace NaN/Inf (e.g. torch.nan_to_num) before encoding");
  }
  // A table operator without the definition cannot compute them (and does not interpolate).
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table(x, pe->pe, 0, true,
                                                      torch::tensor({0.5, 1.0, 2.0})),
                      "posenc::add_position_table: floating-point positions (Float) are computed "
                      "from the encoding's definition, which this call lacks (a learned table has none): pass "
                      "columns");
  EXPECT_POSENC_ERROR(F::positional_encoding(x, pe->pe, F::PositionalEncodingFuncOptions().positions(
                                                            torch::tensor({0.5, 1.0, 2.0}))),
                      "floating-point positions (Float) are computed from the encoding's "
                      "definition");
  // The gradient with respect to x is the identity (scaled); a table cannot get one from rows
  // computed from its definition, so a trainable one is refused rather than left without.
  const auto input = torch::randn({2, 3, 4}, torch::requires_grad());
  const auto columns = torch::tensor({{1.0, 1.0, 0.01, 0.01}, {0.0, 1.0, 0.0, 1.0}}, torch::kDouble);
  const auto fractional = torch::tensor({0.5, 1.5, 20.25});
  posenc::ops::add_position_table(input, pe->pe, 0, true, fractional, 2.0, columns).sum().backward();
  EXPECT_TRUE(torch::equal(input.grad(), torch::full({2, 3, 4}, 2.0)));
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table(input, pe->pe.clone().requires_grad_(), 0,
                                                      true, fractional, 1.0, columns),
                      "a table extended past its end by `columns` gets no gradient");
}

TEST_F(Positions, TableGradientFlowsThroughExplicitPositions) {
  const auto table = torch::zeros({6, 3}, torch::requires_grad());
  const auto x = torch::randn({2, 4, 3});
  const auto positions = torch::tensor({{0, 1, 1, -1}, {5, 5, 5, 2}}, torch::kLong);
  F::positional_encoding(x, table, F::PositionalEncodingFuncOptions().positions(positions))
      .sum()
      .backward();
  const auto expected =
      torch::tensor({1, 2, 1, 0, 0, 3}, torch::kFloat).unsqueeze(1).expand({6, 3});
  EXPECT_TRUE(torch::equal(table.grad(), expected));
}

TEST_F(Positions, ExportSupportsPositionsPaddingAndExtrapolation) {
  PositionalEncoding pe(PositionalEncodingOptions(12, 16)
                            .batch_first(false)
                            .layout(posenc::ChannelLayout::kConcatenated)
                            .beyond_max_len(posenc::BeyondMaxLen::kExtrapolate)
                            .scale(3.0));
  auto exported = posenc::to_torchscript(pe);
  const auto x = torch::randn({6, 2, 12});
  // With scale != 1 the export rounds x * scale before adding the row, as posenc's CPU kernel
  // does: the same bits from the table.
  EXPECT_TRUE(torch::equal(exported.forward({x, int64_t{5}}).toTensor(), pe(x, 5)));
  // Past the table the export computes with PyTorch's sin/cos: rows equal to float32 rounding
  // (6e-8), so sums within that plus one float32 ulp of the result (|y| < 16 here, so 2^-20).
  const double ulp = std::ldexp(1.0, -20);
  EXPECT_LE(max_abs_difference(exported.forward({x, int64_t{40}}).toTensor(), pe(x, 40)),
            ulp + 6e-8);
  const auto positions =
      torch::tensor({{0, 1}, {2, -1}, {15, 15}, {3, 4}, {5, 6}, {7, 8}}, torch::kLong);
  EXPECT_TRUE(torch::equal(exported.run_method("forward_positions", x, positions).toTensor(),
                           pe->forward_positions(x, positions)));
  const auto fractional =
      torch::tensor({{0.5, 1.0}, {2.25, 3.0}, {15.5, 15.5}, {40.75, 4.0}, {1000.5, 6.0}, {7.0, 8.0}},
                    torch::kDouble);
  EXPECT_LE(max_abs_difference(exported.run_method("forward_positions", x, fractional).toTensor(),
                               pe->forward_positions(x, fractional)),
            ulp + 6e-8);
  const auto mask = torch::tensor({{1, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 1}, {0, 1}}, torch::kBool);
  EXPECT_TRUE(torch::equal(exported.run_method("forward_padded", x, mask).toTensor(),
                           pe->forward_padded(x, mask)));
}
