// RotaryEmbedding.

#include <posenc/export.h>
#include <posenc/posenc.h>

#include "test_util.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace F = posenc::functional;
using posenc::RotaryEmbedding;
using posenc::RotaryEmbeddingOptions;
using posenc::RotaryPairing;

namespace {

class Rotary : public posenc_test::SeededTest {};

using posenc_test::printed;

// RoPE written from its definition in long double: for each pair (a, b) of rotated channels and
// theta = position * base^(-2i/R), (a, b) -> (a cos - b sin, a sin + b cos). x: [B, L, H, Dh].
template <typename Position>
torch::Tensor reference_rope(const torch::Tensor& x, const std::vector<Position>& positions,
                             int64_t rotary_dim, bool interleaved, long double base = 10000.0L) {
  const auto in = x.to(torch::kDouble).contiguous();
  auto out = in.clone();
  const int64_t B = x.size(0), L = x.size(1), H = x.size(2), D = x.size(3), half = rotary_dim / 2;
  const double* src = in.data_ptr<double>();
  double* dst = out.data_ptr<double>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t l = 0; l < L; ++l) {
      const long double p = static_cast<long double>(positions[static_cast<size_t>(l)]);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t row = ((b * L + l) * H + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t ia = interleaved ? 2 * i : i;
          const int64_t ib = interleaved ? 2 * i + 1 : i + half;
          const long double theta =
              p * std::pow(base, -static_cast<long double>(2 * i) / rotary_dim);
          const long double a = src[row + ia], bb = src[row + ib];
          dst[row + ia] = static_cast<double>(a * std::cos(theta) - bb * std::sin(theta));
          dst[row + ib] = static_cast<double>(a * std::sin(theta) + bb * std::cos(theta));
        }
      }
    }
  }
  return out;
}

std::vector<int64_t> range(int64_t begin, int64_t count) {
  std::vector<int64_t> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    values[static_cast<size_t>(i)] = begin + i;
  return values;
}

double max_abs_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

} // namespace

TEST_F(Rotary, MatchesLongDoubleDefinitionForBothPairings) {
  for (const auto pairing : {RotaryPairing::kHalfSplit, RotaryPairing::kInterleaved}) {
    for (const int64_t rotary_dim : {16, 8}) {
      RotaryEmbedding rope(
          RotaryEmbeddingOptions(16, 4096).rotary_dim(rotary_dim).pairing(pairing));
      const auto x = torch::randn({2, 5, 3, 16});
      const auto y = rope(x, 4000);
      const auto expected =
          reference_rope(x, range(4000, 5), rotary_dim, pairing == RotaryPairing::kInterleaved);
      // float32 cos/sin (error <= 2^-25 each) times |x| <~ 5, plus float32 rounding of the result.
      EXPECT_LE(max_abs_difference(y, expected), 1e-6) << pairing << " rotary_dim=" << rotary_dim;
      if (rotary_dim < 16) {
        EXPECT_TRUE(torch::equal(y.narrow(3, rotary_dim, 16 - rotary_dim),
                                 x.narrow(3, rotary_dim, 16 - rotary_dim)));
      }
    }
  }
}

TEST_F(Rotary, DoubleCachesMatchLongDoubleClosely) {
  RotaryEmbedding rope(RotaryEmbeddingOptions(8, 100));
  rope->to(torch::kDouble);
  EXPECT_EQ(rope->cos.scalar_type(), torch::kDouble);
  const auto x = torch::randn({1, 7, 2, 8}, torch::kDouble);
  EXPECT_LE(max_abs_difference(rope(x, 50), reference_rope(x, range(50, 7), 8, false)), 1e-13);
}

TEST_F(Rotary, PreservesNormsAndScoresDependOnlyOnDistance) {
  RotaryEmbedding rope(RotaryEmbeddingOptions(32, 512).rotary_dim(32));
  rope->to(torch::kDouble);
  const auto q = torch::randn({1, 1, 1, 32}, torch::kDouble);
  const auto k = torch::randn({1, 1, 1, 32}, torch::kDouble);
  const auto score = [&](int64_t m, int64_t n) {
    return (rope(q, m) * rope(k, n)).sum().item<double>();
  };
  for (const int64_t shift : {0, 7, 300}) {
    EXPECT_NEAR(score(10 + shift, 3 + shift), score(10, 3), 1e-10) << shift;
  }
  EXPECT_NEAR(rope(q, 123).norm().item<double>(), q.norm().item<double>(), 1e-12);
}

TEST_F(Rotary, HeadsFirstLayoutAndExplicitPositions) {
  RotaryEmbedding bl(RotaryEmbeddingOptions(8, 64));
  RotaryEmbedding bh(RotaryEmbeddingOptions(8, 64).heads_first(true));
  const auto x = torch::randn({2, 5, 3, 8});
  EXPECT_TRUE(torch::equal(bh(x.transpose(1, 2), 9), bl(x, 9).transpose(1, 2)));
  const auto positions = torch::tensor({{9, 10, 11, 12, 13}, {0, 0, -1, 63, 1}}, torch::kLong);
  const auto y = bl->forward_positions(x, positions);
  EXPECT_TRUE(torch::equal(y[0], bl(x, 9)[0]));
  EXPECT_TRUE(torch::equal(y[1][2], x[1][2])); // -1: padding, not rotated
  EXPECT_TRUE(torch::equal(bh->forward_positions(x.transpose(1, 2), positions), y.transpose(1, 2)));
}

TEST_F(Rotary, GradientIsTheInverseRotation) {
  RotaryEmbedding rope(RotaryEmbeddingOptions(8, 32).pairing(RotaryPairing::kInterleaved));
  const auto x = torch::randn({2, 4, 2, 8}, torch::requires_grad());
  const auto upstream = torch::randn({2, 4, 2, 8});
  rope(x, 3).backward(upstream);
  // <R x, g> = <x, R^T g>: the gradient rotated forward again gives back g.
  EXPECT_LE(max_abs_difference(rope(x.grad(), 3), upstream), 1e-5);
  EXPECT_FALSE(x.grad().allclose(upstream));
}

TEST_F(Rotary, DtypesArePreservedAndRoundedOnce) {
  RotaryEmbedding rope(8, 32);
  const auto x = torch::randn({1, 6, 2, 8});
  for (const auto dtype : {torch::kHalf, torch::kBFloat16, torch::kDouble}) {
    const auto xd = x.to(dtype);
    const auto y = rope(xd, 2);
    EXPECT_EQ(y.scalar_type(), dtype);
    if (dtype != torch::kDouble) {
      EXPECT_TRUE(torch::equal(y, rope(xd.to(torch::kFloat), 2).to(dtype))) << dtype;
    }
  }
  rope->to(torch::kBFloat16);
  EXPECT_EQ(rope->cos.scalar_type(), torch::kFloat);
}

TEST_F(Rotary, ExtrapolationEqualsALargerCache) {
  RotaryEmbedding small(
      RotaryEmbeddingOptions(8, 16).beyond_max_len(posenc::BeyondMaxLen::kExtrapolate));
  RotaryEmbedding large(RotaryEmbeddingOptions(8, 5000));
  const auto x = torch::randn({2, 6, 1, 8});
  EXPECT_TRUE(torch::equal(small(x, 12), large(x, 12)));
  EXPECT_TRUE(torch::equal(small(x, 4990), large(x, 4990)));
  const auto positions = torch::tensor({0, 15, 16, 4999, -1, 3}, torch::kLong);
  EXPECT_TRUE(
      torch::equal(small->forward_positions(x, positions), large->forward_positions(x, positions)));
}

// Fractional positions (position interpolation): cos/sin computed from the frequencies in float64
// for any value, inside the caches, between their rows or past them, without extrapolation.
TEST_F(Rotary, FractionalPositionsAreComputedFromTheFrequencies) {
  for (const auto pairing : {RotaryPairing::kHalfSplit, RotaryPairing::kInterleaved}) {
    RotaryEmbedding rope(RotaryEmbeddingOptions(16, 64).rotary_dim(12).pairing(pairing));
    const std::vector<double> values{0.0, 0.5, 31.25, 63.75, 5000.125};
    const auto x = torch::randn({1, 5, 2, 16});
    const auto y = rope->forward_positions(x, torch::tensor(values, torch::kDouble));
    // float32 cos/sin (2^-25 each) times |x| <~ 5, plus the float32 rounding of the result.
    EXPECT_LE(max_abs_difference(
                  y, reference_rope(x, values, 12, pairing == RotaryPairing::kInterleaved)),
              1e-6)
        << pairing;
  }
  RotaryEmbedding rope(RotaryEmbeddingOptions(8, 32));
  const auto x = torch::randn({2, 4, 3, 8});
  const auto positions = torch::tensor({{0, 3, 31, 7}, {1, 2, 2, 30}}, torch::kLong);
  for (const auto dtype : {torch::kDouble, torch::kFloat, torch::kBFloat16}) {
    EXPECT_TRUE(torch::equal(rope->forward_positions(x, positions.to(dtype)),
                             rope->forward_positions(x, positions)))
        << dtype;
  }
  // The operator needs the frequencies to compute them, and rejects NaN/Inf and negatives.
  EXPECT_POSENC_ERROR(
      posenc::ops::apply_rotary(x, rope->cos, rope->sin, 0, torch::full({4}, 0.5)),
      "posenc::apply_rotary: floating-point positions (Float) are computed from "
      "the encoding's definition, which this call lacks (a learned table has none): pass inv_freq");
  for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -1.0}) {
    EXPECT_POSENC_ERROR(
        rope->forward_positions(x, torch::tensor({0.0, 1.0, bad, 2.0})),
        "RotaryEmbedding: floating-point positions must be finite and in [0, 2^63)");
  }
  // The gradient is the inverse rotation at the same fractional positions.
  const auto input = torch::randn({1, 3, 1, 8}, torch::dtype(torch::kDouble).requires_grad(true));
  rope->to(torch::kDouble);
  const auto fractional = torch::tensor({0.5, 10.25, 40.5}, torch::kDouble);
  const auto upstream = torch::randn({1, 3, 1, 8}, torch::kDouble);
  rope->forward_positions(input, fractional).backward(upstream);
  EXPECT_LE(max_abs_difference(
                input.grad(),
                reference_rope(upstream, std::vector<double>{-0.5, -10.25, -40.5}, 8, false)),
            1e-13);
}

TEST_F(Rotary, FunctionalMatchesModule) {
  RotaryEmbedding rope(
      RotaryEmbeddingOptions(12, 40).rotary_dim(6).pairing(RotaryPairing::kInterleaved));
  const auto tables = F::rotary_tables(40, 6);
  EXPECT_TRUE(torch::equal(tables.first, rope->cos));
  const auto x = torch::randn({1, 3, 2, 12});
  EXPECT_TRUE(torch::equal(F::rotary_embedding(x, tables.first, tables.second,
                                               F::RotaryEmbeddingFuncOptions().offset(5).pairing(
                                                   RotaryPairing::kInterleaved)),
                           rope(x, 5)));
}

TEST_F(Rotary, Errors) {
  RotaryEmbedding rope(8, 16);
  EXPECT_POSENC_ERROR(rope(torch::randn({2, 5, 8})),
                      "RotaryEmbedding: expected a 4-D query or key tensor of shape [B, L, H, Dh] "
                      "(heads_first=false), but got a 3-D tensor of shape [2, 5, 8]");
  EXPECT_POSENC_ERROR(
      rope(torch::randn({1, 2, 1, 6})),
      "RotaryEmbedding: the head dimension Dh = 6 is smaller than the rotated width 8");
  EXPECT_POSENC_ERROR(rope(torch::randn({1, 4, 1, 8}), 13),
                      "offset + L <= max_len (16), but got L = 4 and offset = 13");
  EXPECT_POSENC_ERROR(rope(torch::ones({1, 4, 1, 8}, torch::kLong)),
                      "expected a floating-point input");
  EXPECT_POSENC_ERROR(RotaryEmbedding(RotaryEmbeddingOptions(8, 16).rotary_dim(5)),
                      "RotaryEmbedding: the rotated width must be even and >= 2, but got 5");
  EXPECT_POSENC_ERROR(RotaryEmbedding(RotaryEmbeddingOptions(8, 16).rotary_dim(10)),
                      "RotaryEmbedding: rotary_dim (10) must be <= head_dim (8)");
  EXPECT_POSENC_ERROR(
      rope(torch::empty({1, 4, 1, 8}, torch::Device(torch::kMeta))),
      "expected the input on the device of the cos/sin caches (cpu), but got an input on meta");
  const auto cos = rope->cos.clone().requires_grad_();
  EXPECT_POSENC_ERROR(posenc::ops::apply_rotary(torch::randn({1, 2, 1, 8}), cos, rope->sin),
                      "cos and sin are fixed tables and get no gradient");
}

TEST_F(Rotary, PrintingSaveLoadAndExport) {
  RotaryEmbedding rope(RotaryEmbeddingOptions(16, 64)
                           .rotary_dim(8)
                           .base(500000)
                           .pairing(RotaryPairing::kInterleaved)
                           .heads_first(true));
  EXPECT_EQ(printed(*rope),
            "posenc::RotaryEmbedding(head_dim=16, max_len=64, rotary_dim=8, base=500000, "
            "pairing=interleaved, heads_first=true)");
  const std::string path = testing::TempDir() + "rope_" + std::to_string(::getpid()) + ".pt";
  torch::save(rope, path);
  RotaryEmbedding other(RotaryEmbeddingOptions(16, 32).rotary_dim(8));
  EXPECT_POSENC_ERROR(
      torch::load(other, path),
      "RotaryEmbedding: the checkpoint's cos has shape [64, 4], but this module's is [32, 4]");
  std::remove(path.c_str());
  auto exported = posenc::to_torchscript(rope);
  const auto x = torch::randn({2, 3, 5, 16});
  EXPECT_TRUE(torch::equal(exported.forward({x, int64_t{11}}).toTensor(), rope(x, 11)));
  const auto positions = torch::tensor({{1, 2, 3, -1, 63}, {0, 0, 0, 0, 0}}, torch::kLong);
  EXPECT_TRUE(torch::equal(exported.run_method("forward_positions", x, positions).toTensor(),
                           rope->forward_positions(x, positions)));
  // Fractional positions: the export computes cos/sin with PyTorch's float64 sin/cos, posenc with
  // the C library's; rounded to float32 they may differ by one ulp (2^-24), times |x| <~ 5.
  const auto fractional =
      torch::tensor({{0.5, 2.25, 63.5, 100.75, 7.0}, {0.0, 1.0, 2.0, 3.0, 4.0}}, torch::kDouble);
  EXPECT_LE(max_abs_difference(exported.run_method("forward_positions", x, fractional).toTensor(),
                               rope->forward_positions(x, fractional)),
            5e-7);
  EXPECT_THROW(exported.run_method("forward_positions", x,
                                   torch::full({2, 5}, std::nan(""), torch::kDouble)),
               std::exception);
}

// cached_len < max_len: positions from cached_len to max_len - 1 are computed per call, with the
// values a full cache holds (the same float64 angles, rounded once), in every kind of call; past
// max_len they are refused (or extrapolated) as with a full cache.
TEST_F(Rotary, RowsPastTheCachedOnesAreComputedUpToMaxLen) {
  RotaryEmbedding partial(RotaryEmbeddingOptions(8, 5000).cached_len(16));
  RotaryEmbedding full(RotaryEmbeddingOptions(8, 5000));
  EXPECT_EQ(partial->cos.sizes(), (std::vector<int64_t>{16, 4}));
  EXPECT_EQ(printed(*partial),
            "posenc::RotaryEmbedding(head_dim=8, max_len=5000, cached_len=16, rotary_dim=8, "
            "base=10000, pairing=half_split, heads_first=false)");
  const auto x = torch::randn({2, 6, 3, 8});
  const auto k = torch::randn({2, 6, 1, 8});
  for (const int64_t offset : {int64_t{0}, int64_t{12}, int64_t{4994}}) {
    EXPECT_TRUE(torch::equal(partial(x, offset), full(x, offset))) << offset;
    const auto qk = partial->forward_qk(x, k, offset);
    const auto expected = full->forward_qk(x, k, offset);
    EXPECT_TRUE(torch::equal(std::get<0>(qk), std::get<0>(expected))) << offset;
    EXPECT_TRUE(torch::equal(std::get<1>(qk), std::get<1>(expected))) << offset;
    auto q_in_place = x.clone();
    auto k_in_place = k.clone();
    partial->forward_qk_(q_in_place, k_in_place, offset);
    EXPECT_TRUE(torch::equal(q_in_place, std::get<0>(expected))) << offset;
    EXPECT_TRUE(torch::equal(k_in_place, std::get<1>(expected))) << offset;
  }
  const auto positions = torch::tensor({{0, 15, 16, 4999, -1, 3}, {7, 8, 9, 10, 11, 4000}});
  EXPECT_TRUE(torch::equal(partial->forward_positions(x, positions),
                           full->forward_positions(x, positions)));
  // float64 caches (after .to): the computed rows follow the dtype.
  partial->to(torch::kDouble);
  full->to(torch::kDouble);
  const auto x64 = x.to(torch::kDouble);
  EXPECT_TRUE(torch::equal(partial(x64, 4990), full(x64, 4990)));
  EXPECT_EQ(partial->cos.sizes(), (std::vector<int64_t>{16, 4}));
  // max_len still holds.
  EXPECT_POSENC_ERROR(partial(x64, 4995),
                      "RotaryEmbedding: positions offset .. offset + L - 1 must lie in the table, "
                      "i.e. offset + L <= max_len (5000), but got L = 6 and offset = 4995 (offset "
                      "+ L = 5001); build the module with a larger max_len or pass "
                      "beyond_max_len(posenc::BeyondMaxLen::kExtrapolate), or split the sequence");
  EXPECT_POSENC_ERROR(
      partial->forward_positions(x64, torch::tensor({0, 1, 2, 3, 5000, 5})),
      "RotaryEmbedding: positions must be < max_len (5000), but got 5000; build the module with "
      "max_len >= 5001 or pass beyond_max_len(posenc::BeyondMaxLen::kExtrapolate)");
  // ... and extrapolation past it works with a partial cache too.
  RotaryEmbedding extrapolating(RotaryEmbeddingOptions(8, 32).cached_len(4).beyond_max_len(
      posenc::BeyondMaxLen::kExtrapolate));
  RotaryEmbedding larger(RotaryEmbeddingOptions(8, 6000));
  EXPECT_TRUE(torch::equal(extrapolating(x, 5990), larger(x, 5990)));
  // The TorchScript export computes the same rows with PyTorch's float64 cos/sin (one float32 ulp
  // from the C library's at most, times |x| <~ 5) and refuses what the module refuses.
  RotaryEmbedding exported_from(RotaryEmbeddingOptions(8, 5000).cached_len(16));
  full = RotaryEmbedding(RotaryEmbeddingOptions(8, 5000));
  auto exported = posenc::to_torchscript(*exported_from);
  EXPECT_LE(max_abs_difference(exported.forward({x, int64_t{4994}}).toTensor(), full(x, 4994)),
            5e-7);
  EXPECT_TRUE(torch::equal(exported.forward({x, int64_t{3}}).toTensor(), full(x, 3)));
  EXPECT_LE(max_abs_difference(exported.run_method("forward_positions", x, positions).toTensor(),
                               full->forward_positions(x, positions)),
            5e-7);
  EXPECT_THROW(exported.forward({x, int64_t{4995}}), std::exception);
  // The state dict holds the cached rows only.
  const std::string path = testing::TempDir() + "rope_cached_" + std::to_string(::getpid()) + ".pt";
  torch::save(exported_from, path);
  RotaryEmbedding loaded(RotaryEmbeddingOptions(8, 5000).cached_len(16));
  torch::load(loaded, path);
  EXPECT_TRUE(torch::equal(loaded->cos, exported_from->cos));
  EXPECT_POSENC_ERROR(torch::load(full, path),
                      "RotaryEmbedding: the checkpoint's cos has shape [16, 4], but this module's "
                      "is [5000, 4]");
  std::remove(path.c_str());
}

// cached_len with the length-dependent and multimodal variants: the same results as a full cache.
TEST_F(Rotary, CachedLenKeepsDynamicAndMultimodalRotations) {
  const auto dynamic = posenc::RopeScalingOptions(posenc::RopeType::kDynamic)
                           .factor(2.0)
                           .max_position_embeddings(32);
  RotaryEmbedding partial(RotaryEmbeddingOptions(8, 64).scaling(dynamic).cached_len(8));
  RotaryEmbedding full(RotaryEmbeddingOptions(8, 64).scaling(dynamic));
  const auto x = torch::randn({2, 6, 2, 8});
  for (const int64_t offset : {int64_t{0}, int64_t{20}, int64_t{30}, int64_t{58}}) {
    // (within the switch length, across it, past it)
    EXPECT_TRUE(torch::equal(partial(x, offset), full(x, offset))) << offset;
  }
  const auto positions = torch::tensor({{0, 7, 8, 31, 40, 63}, {1, 2, 3, 4, 5, 6}});
  EXPECT_TRUE(torch::equal(partial->forward_positions(x, positions),
                           full->forward_positions(x, positions)));
  RotaryEmbedding mrope_partial(
      RotaryEmbeddingOptions(8, 64).mrope_section({1, 1, 2}).cached_len(4));
  RotaryEmbedding mrope_full(RotaryEmbeddingOptions(8, 64).mrope_section({1, 1, 2}));
  const auto grid = torch::tensor({{{0, 1, 9, 9, 9, 40}, {2, 3, 4, 5, 6, 63}},
                                   {{0, 1, 9, 10, 9, 40}, {2, 3, 4, 5, 6, 63}},
                                   {{0, 1, 9, 9, 10, 41}, {2, 3, 4, 5, 6, 62}}});
  EXPECT_TRUE(torch::equal(mrope_partial->forward_positions(x, grid),
                           mrope_full->forward_positions(x, grid)));
  EXPECT_POSENC_ERROR(mrope_partial->forward_positions(x, grid.clone().fill_(64)),
                      "RotaryEmbedding: positions must be < max_len (64), but got 64");
}

TEST_F(Rotary, CachedLenIsChecked) {
  EXPECT_POSENC_ERROR(RotaryEmbedding(RotaryEmbeddingOptions(8, 100).cached_len(0)),
                      "RotaryEmbedding: cached_len must be in [1, max_len = 100], but got 0");
  EXPECT_POSENC_ERROR(RotaryEmbedding(RotaryEmbeddingOptions(8, 100).cached_len(101)),
                      "RotaryEmbedding: cached_len must be in [1, max_len = 100], but got 101");
  EXPECT_POSENC_ERROR(
      RotaryEmbedding(RotaryEmbeddingOptions(128, int64_t{1} << 30).cached_len(int64_t{1} << 23)),
      "RotaryEmbedding: the cos/sin caches hold cached_len * rotary_dim / 2 = 8388608 * 64 "
      "elements, which is over posenc's limit of 2^28 elements (1 GiB in float32); lower "
      "cached_len");
  EXPECT_POSENC_ERROR(RotaryEmbedding(RotaryEmbeddingOptions(8, 0)),
                      "RotaryEmbedding: max_len must be >= 1, but got 0");
  // The default: max_len; contexts whose caches would exceed the limit must say how many rows to
  // cache.
  EXPECT_EQ(RotaryEmbeddingOptions(128, 4096).cached_rows(), 4096);
  EXPECT_EQ(RotaryEmbeddingOptions(128, 10485760).cached_len(8192).cached_rows(), 8192);
  EXPECT_POSENC_ERROR(
      RotaryEmbedding(RotaryEmbeddingOptions(128, 10485760)),
      "RotaryEmbedding: the cos/sin caches hold max_len * rotary_dim / 2 = 10485760 * 64 "
      "elements, which is over posenc's limit of 2^28 elements (1 GiB in float32); set cached_len "
      "(e.g. 8192; positions past it are computed on each call) or lower max_len");
}

// Llama 4 Scout's context, 10,485,760 positions, with 8192 cached rows: the last positions are
// computed for the call, equal to RoPE's definition evaluated in long double (float64 angles of
// ~1e7 radians carry ~1e-9 of rounding; the module's float64 caches after .to(kDouble)).
TEST_F(Rotary, TenMillionPositionContextWithoutATenMillionRowCache) {
  const int64_t context = 10485760;
  RotaryEmbedding rope(RotaryEmbeddingOptions(128, context).base(500000.0).cached_len(8192));
  EXPECT_EQ(rope->cos.size(0), 8192);
  rope->to(torch::kDouble);
  const auto x = torch::randn({1, 3, 2, 128}, torch::kDouble);
  const std::vector<int64_t> last{context - 3, context - 2, context - 1};
  EXPECT_LE(
      max_abs_difference(rope(x, context - 3), reference_rope(x, last, 128, false, 500000.0L)),
      1e-7);
  const auto positions = torch::tensor({int64_t{0}, int64_t{8191}, context - 1}, torch::kLong);
  const std::vector<int64_t> chosen{0, 8191, context - 1};
  EXPECT_LE(max_abs_difference(rope->forward_positions(x, positions),
                               reference_rope(x, chosen, 128, false, 500000.0L)),
            1e-7);
  EXPECT_POSENC_ERROR(rope(x, context - 2),
                      "RotaryEmbedding: positions offset .. offset + L - 1 must lie in the table");
}

// inverse (NanoChat's rotation, rotate_half = cat(x2, -x1)): every kind of call turns by -theta,
// i.e. rotates with sin negated (exact), and the module without inverse turns it back; with
// deinterleave, the regrouped pairs turn by -theta too; the TorchScript export alike.
TEST_F(Rotary, InverseTurnsByMinusTheta) {
  for (const RotaryPairing pairing : {RotaryPairing::kHalfSplit, RotaryPairing::kInterleaved}) {
    RotaryEmbedding rope(
        RotaryEmbeddingOptions(12, 64).rotary_dim(8).base(500.0).pairing(pairing).inverse(true));
    RotaryEmbedding forward(
        RotaryEmbeddingOptions(12, 64).rotary_dim(8).base(500.0).pairing(pairing));
    EXPECT_NE(printed(*rope).find(", inverse=true, heads_first=false"), std::string::npos)
        << printed(*rope);
    const auto x = torch::randn({2, 5, 3, 12});
    const bool interleaved = pairing == RotaryPairing::kInterleaved;
    const auto expected =
        posenc::ops::apply_rotary(x, rope->cos, rope->sin.neg(), 9, c10::nullopt, interleaved);
    EXPECT_TRUE(torch::equal(rope(x, 9), expected));
    EXPECT_TRUE(torch::equal(rope->forward_positions(x, torch::arange(9, 14)), expected));
    auto [q, k] = rope->forward_qk(x, x.narrow(2, 0, 1), 9);
    EXPECT_TRUE(torch::equal(q, expected));
    EXPECT_TRUE(torch::equal(k, expected.narrow(2, 0, 1)));
    auto q_in_place = x.clone();
    auto k_in_place = x.narrow(2, 0, 1).clone();
    rope->forward_qk_(q_in_place, k_in_place, 9);
    EXPECT_TRUE(torch::equal(q_in_place, expected));
    EXPECT_TRUE(torch::equal(k_in_place, expected.narrow(2, 0, 1)));
    const auto x64 = x.to(torch::kDouble);
    // float32 cos/sin (each within 2^-25 of its value), so cos^2 + sin^2 is 1 within 2^-23:
    // back within 2^-21 |x|
    EXPECT_LE(max_abs_difference(forward(rope(x64, 9), 9), x64),
              std::ldexp(1.0, -21) * x64.abs().max().item<double>());
    EXPECT_GT(max_abs_difference(rope(x, 9), forward(x, 9)), 1e-2); // not the turn by theta
    auto exported = posenc::to_torchscript(rope);
    EXPECT_LE(max_abs_difference(exported.forward({x, int64_t{9}}).toTensor(), expected), 1e-6);
    // F::rotary_embedding, the functional twin
    namespace F = posenc::functional;
    EXPECT_TRUE(
        torch::equal(F::rotary_embedding(
                         x, rope->cos, rope->sin,
                         F::RotaryEmbeddingFuncOptions().offset(9).pairing(pairing).inverse(true)),
                     expected));
  }
  // deinterleave and inverse: the regrouped channels turned by -theta
  RotaryEmbedding both(
      RotaryEmbeddingOptions(12, 64).rotary_dim(8).deinterleave(true).inverse(true));
  const auto x = torch::randn({1, 4, 2, 12});
  const auto halves = torch::cat(
      {x.narrow(3, 0, 8).index({"...", torch::indexing::Slice(0, 8, 2)}),
       x.narrow(3, 0, 8).index({"...", torch::indexing::Slice(1, 8, 2)}), x.narrow(3, 8, 4)},
      3);
  EXPECT_TRUE(
      torch::equal(both(x, 3), posenc::ops::apply_rotary(halves, both->cos, both->sin.neg(), 3)));
  auto q = x.clone();
  auto k = x.narrow(2, 0, 1).clone();
  both->forward_qk_(q, k, 3);
  EXPECT_TRUE(torch::equal(q, both(x, 3)));
}

// rotate_last_channels (DeepSeek-V4's [nope | rope] heads): the last rotary_dim channels turn as a
// whole head of their own, the leading ones pass through bit for bit, in every kind of call, both
// pairings and layouts, with deinterleave and inverse, and in the TorchScript export; against the
// long-double rotation of the trailing channels.
TEST_F(Rotary, RotateLastChannelsTurnsTheTrailingChannels) {
  using torch::indexing::Slice;
  for (const RotaryPairing pairing : {RotaryPairing::kHalfSplit, RotaryPairing::kInterleaved}) {
    for (const bool heads_first : {false, true}) {
      const auto options = RotaryEmbeddingOptions(12, 64).rotary_dim(8).base(500.0).pairing(
          pairing).heads_first(heads_first);
      RotaryEmbedding rope(RotaryEmbeddingOptions(options).rotate_last_channels(true));
      RotaryEmbedding whole(RotaryEmbeddingOptions(8, 64).base(500.0).pairing(pairing).heads_first(
          heads_first));
      EXPECT_NE(printed(*rope).find(", rotate_last_channels=true"), std::string::npos)
          << printed(*rope);
      const bool interleaved = pairing == RotaryPairing::kInterleaved;
      const auto x = heads_first ? torch::randn({2, 3, 5, 12}) : torch::randn({2, 5, 3, 12});
      const auto pass = x.narrow(3, 0, 4);
      const auto expected = torch::cat({pass, whole(x.narrow(3, 4, 8).contiguous(), 9)}, 3);
      const auto out = rope(x, 9);
      EXPECT_TRUE(torch::equal(out, expected));
      EXPECT_TRUE(torch::equal(out.narrow(3, 0, 4), pass)); // passed through bit for bit
      EXPECT_TRUE(torch::equal(rope->forward_positions(x, torch::arange(9, 14)), expected));
      const auto k = x.narrow(heads_first ? 1 : 2, 0, 1);
      auto [q_out, k_out] = rope->forward_qk(x, k, 9);
      EXPECT_TRUE(torch::equal(q_out, expected));
      EXPECT_TRUE(torch::equal(k_out, expected.narrow(heads_first ? 1 : 2, 0, 1)));
      auto q_in_place = x.clone();
      auto k_in_place = k.clone();
      rope->forward_qk_(q_in_place, k_in_place, 9);
      EXPECT_TRUE(torch::equal(q_in_place, expected));
      EXPECT_TRUE(torch::equal(k_in_place, expected.narrow(heads_first ? 1 : 2, 0, 1)));
      auto exported = posenc::to_torchscript(rope);
      EXPECT_LE(max_abs_difference(exported.forward({x, int64_t{9}}).toTensor(), expected), 1e-6);
      // the values: float64 caches (float64 angles, rounded once) against long double
      RotaryEmbedding rope64(RotaryEmbeddingOptions(options).heads_first(false).rotate_last_channels(
          true));
      rope64->to(torch::kDouble);
      const auto x64 = torch::randn({2, 5, 3, 12}, torch::kDouble);
      const std::vector<int64_t> positions = {9, 10, 11, 12, 13};
      const auto reference = torch::cat(
          {x64.narrow(3, 0, 4),
           reference_rope(x64.narrow(3, 4, 8).contiguous(), positions, 8, interleaved, 500.0L)},
          3);
      EXPECT_LE(max_abs_difference(rope64(x64, 9), reference), 1e-14);
    }
  }
  // with deinterleave and inverse: the trailing channels regrouped and turned by -theta
  RotaryEmbedding both(RotaryEmbeddingOptions(12, 64).rotary_dim(8).deinterleave(true).inverse(
      true).rotate_last_channels(true));
  RotaryEmbedding whole(RotaryEmbeddingOptions(8, 64).deinterleave(true).inverse(true));
  const auto x = torch::randn({1, 4, 2, 12});
  const auto expected = torch::cat({x.narrow(3, 0, 4), whole(x.narrow(3, 4, 8), 3)}, 3);
  EXPECT_TRUE(torch::equal(both(x, 3), expected));
  auto q = x.clone();
  auto k = x.narrow(2, 0, 1).clone();
  both->forward_qk_(q, k, 3);
  EXPECT_TRUE(torch::equal(q, expected));
  EXPECT_TRUE(torch::equal(k, expected.narrow(2, 0, 1)));
  // packed sequences: the rows of their own positions
  RotaryEmbedding last(RotaryEmbeddingOptions(12, 64).rotary_dim(8).rotate_last_channels(true));
  const auto packed = torch::randn({5, 2, 12});
  const auto cu_seqlens = torch::tensor({0, 2, 5}, torch::kInt);
  const auto rows = last->forward_packed(packed, cu_seqlens);
  EXPECT_TRUE(torch::equal(rows.narrow(0, 2, 3),
                           last(packed.narrow(0, 2, 3).unsqueeze(0), 0).squeeze(0)));
  EXPECT_TRUE(torch::equal(rows.narrow(2, 0, 4), packed.narrow(2, 0, 4)));
  // the whole head rotated: the option changes nothing
  RotaryEmbedding full(RotaryEmbeddingOptions(12, 64).rotate_last_channels(true));
  RotaryEmbedding plain(RotaryEmbeddingOptions(12, 64));
  EXPECT_TRUE(torch::equal(full(x, 3), plain(x, 3)));
  // heads of another width contradict head_dim, as without the option
  EXPECT_POSENC_ERROR(last(torch::randn({1, 4, 2, 10}), 0),
                      "RotaryEmbedding: expected heads of width head_dim = 12, but got 10");
  // an in-place call refused by the operator, after the views of the last channels are taken
  // (positions past max_len): q and k unchanged, with deinterleave too
  for (RotaryEmbedding* module : {&last, &both}) {
    auto q_kept = x.clone();
    auto k_kept = x.narrow(2, 0, 1).clone();
    EXPECT_POSENC_ERROR((*module)->forward_qk_(q_kept, k_kept, 62), "max_len");
    EXPECT_TRUE(torch::equal(q_kept, x));
    EXPECT_TRUE(torch::equal(k_kept, x.narrow(2, 0, 1)));
  }
}

// deinterleave (DeepSeek-V3's rope_interleave): pairs (2i, 2i + 1) are rotated and written as
// halves (i, i + R/2): out[i] = a cos - b sin, out[i + R/2] = a sin + b cos with a = x[2i],
// b = x[2i + 1]; the channels past the rotated width pass through. Against the long double
// definition, in every kind of call (q+k, in place on views of a fused tensor, positions, the
// TorchScript export); an in-place call that fails (a bad offset, a leaf that requires grad)
// leaves q and k as they were.
TEST_F(Rotary, DeinterleaveRotatesPairsIntoHalves) {
  RotaryEmbedding rope(RotaryEmbeddingOptions(12, 64).rotary_dim(8).base(500.0).deinterleave(true));
  EXPECT_EQ(printed(*rope),
            "posenc::RotaryEmbedding(head_dim=12, max_len=64, rotary_dim=8, base=500, "
            "pairing=half_split, deinterleave=true, heads_first=false)");
  const auto x = torch::randn({2, 5, 3, 12});
  // the definition: interleaved pairs rotated in place, then the rotated channels regrouped
  const auto pairs = reference_rope(x, range(9, 5), 8, /*interleaved=*/true, 500.0L);
  const auto expected =
      torch::cat({pairs.narrow(3, 0, 8).index({"...", torch::indexing::Slice(0, 8, 2)}),
                  pairs.narrow(3, 0, 8).index({"...", torch::indexing::Slice(1, 8, 2)}),
                  pairs.narrow(3, 8, 4)},
                 3);
  EXPECT_LE(max_abs_difference(rope(x, 9), expected), 1e-6);
  EXPECT_TRUE(torch::equal(rope->forward_positions(x, torch::arange(9, 14)), rope(x, 9)));
  auto [q, k] = rope->forward_qk(x, x.narrow(2, 0, 1), 9);
  EXPECT_TRUE(torch::equal(q, rope(x, 9)));
  EXPECT_TRUE(torch::equal(k, rope(x.narrow(2, 0, 1), 9)));
  // in place, on views of one fused tensor
  auto fused = torch::cat({x, x.narrow(2, 0, 1)}, 2).contiguous();
  auto q_view = fused.narrow(2, 0, 3);
  auto k_view = fused.narrow(2, 3, 1);
  rope->forward_qk_(q_view, k_view, 9);
  EXPECT_TRUE(torch::equal(fused.narrow(2, 0, 3), q));
  EXPECT_TRUE(torch::equal(fused.narrow(2, 3, 1), k));
  auto q_kept = x.clone();
  auto k_kept = x.narrow(2, 0, 1).clone();
  EXPECT_POSENC_ERROR(rope->forward_qk_(q_kept, k_kept, 62), "max_len");
  EXPECT_TRUE(torch::equal(q_kept, x));
  EXPECT_TRUE(torch::equal(k_kept, x.narrow(2, 0, 1)));
  auto k_leaf = x.narrow(2, 0, 1).clone().requires_grad_(true); // (in place on a leaf: refused)
  EXPECT_THROW(rope->forward_qk_(q_kept, k_leaf, 9), c10::Error);
  EXPECT_TRUE(torch::equal(q_kept, x));
  // the TorchScript export rotates alike
  auto exported = posenc::to_torchscript(rope);
  EXPECT_LE(max_abs_difference(exported.forward({x, int64_t{9}}).toTensor(), rope(x, 9)), 1e-6);
  // the output layout needs half_split; the module is refused before anything is built
  EXPECT_POSENC_ERROR(
      RotaryEmbedding(
          RotaryEmbeddingOptions(12, 64).pairing(RotaryPairing::kInterleaved).deinterleave(true)),
      "deinterleave regroups pairs (2i, 2i + 1) into halves (i, i + R/2), the "
      "layout of pairing kHalfSplit, but pairing is interleaved");
}
