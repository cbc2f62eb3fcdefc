// RoPE scaling variants (linear, dynamic NTK, YaRN, LongRoPE, LLaMA 3, freq factors), the module's
// per-call frequencies for dynamic and longrope, and options from a Hugging Face config.json.
// The frequencies are compared with references written here in long double from the variants'
// definitions (the papers and transformers' modeling_rope_utils.py); test/python/test_rope_hf.py
// compares with transformers' own functions.

#include <posenc/export.h>
#include <posenc/io/hf_config.h>
#include <posenc/posenc.h>

#include "test_util.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

namespace F = posenc::functional;
using posenc::RopeScalingOptions;
using posenc::RopeType;
using posenc::RotaryEmbedding;
using posenc::RotaryEmbeddingOptions;
using posenc_test::printed;

namespace {

using LD = long double;
constexpr LD kPi = 3.141592653589793238462643383279502884L;

std::vector<LD> plain(LD base, int64_t dim) {
  std::vector<LD> inv(static_cast<size_t>(dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) {
    inv[i] = std::pow(base, -static_cast<LD>(2 * i) / static_cast<LD>(dim));
  }
  return inv;
}

// The variants, from their definitions.
std::vector<LD> yarn_reference(LD base, int64_t dim, LD factor, LD original, LD beta_fast,
                               LD beta_slow, bool truncate) {
  const auto correction = [&](LD rotations) {
    return static_cast<LD>(dim) * std::log(original / (rotations * 2 * kPi)) / (2 * std::log(base));
  };
  LD low = correction(beta_fast), high = correction(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max<LD>(low, 0);
  high = std::min<LD>(high, dim - 1);
  if (low == high) {
    high += 0.001L;
  }
  std::vector<LD> inv = plain(base, dim);
  for (size_t i = 0; i < inv.size(); ++i) {
    const LD ramp = std::clamp<LD>((static_cast<LD>(i) - low) / (high - low), 0, 1);
    inv[i] = inv[i] / factor * ramp + inv[i] * (1 - ramp);
  }
  return inv;
}

std::vector<LD> llama3_reference(LD base, int64_t dim, LD factor, LD low, LD high, LD original) {
  std::vector<LD> inv = plain(base, dim);
  for (LD& f : inv) {
    const LD wavelength = 2 * kPi / f;
    if (wavelength > original / low) {
      f /= factor;
    } else if (wavelength >= original / high) {
      const LD smooth = (original / wavelength - low) / (high - low);
      f = (1 - smooth) * f / factor + smooth * f;
    }
  }
  return inv;
}

void expect_frequencies(const torch::Tensor& got, const std::vector<LD>& expected) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(expected.size()));
  const auto values = got.contiguous();
  for (size_t i = 0; i < expected.size(); ++i) {
    // float64 evaluation of the same formula: a few ulp.
    EXPECT_NEAR(values.data_ptr<double>()[i], static_cast<double>(expected[i]),
                4e-16 * std::abs(static_cast<double>(expected[i])) + 1e-300)
        << "frequency " << i;
  }
}

RotaryEmbeddingOptions options_with(RopeScalingOptions scaling, int64_t max_len = 64,
                                    int64_t head_dim = 16) {
  return RotaryEmbeddingOptions(head_dim, max_len).base(10000.0).scaling(std::move(scaling));
}

TEST(RopeScaling, LinearDividesEveryFrequency) {
  RotaryEmbedding rope(options_with(RopeScalingOptions(RopeType::kLinear).factor(4.0)));
  std::vector<LD> expected = plain(10000, 16);
  for (LD& f : expected) {
    f /= 4;
  }
  expect_frequencies(rope->inv_freq(), expected);
  EXPECT_DOUBLE_EQ(rope->attention_factor(), 1.0);
  // The caches are cos/sin of p * inv_freq.
  const auto angle = torch::arange(64, torch::kDouble).unsqueeze(1) * rope->inv_freq().unsqueeze(0);
  EXPECT_TRUE(torch::allclose(rope->cos.to(torch::kDouble), angle.cos(), 0, 1e-7));
}

TEST(RopeScaling, Llama3MatchesItsDefinition) {
  auto scaling = RopeScalingOptions(RopeType::kLlama3)
                     .factor(8.0)
                     .low_freq_factor(1.0)
                     .high_freq_factor(4.0)
                     .original_max_position_embeddings(8192);
  RotaryEmbedding rope(RotaryEmbeddingOptions(128, 16).base(500000.0).scaling(scaling));
  const std::vector<LD> expected = llama3_reference(500000, 128, 8, 1, 4, 8192);
  expect_frequencies(rope->inv_freq(), expected);
  // All three regimes occur for LLaMA 3.1's parameters.
  const std::vector<LD> unscaled = plain(500000, 128);
  int kept = 0, divided = 0, smoothed = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    kept += expected[i] == unscaled[i];
    divided += std::abs(expected[i] - unscaled[i] / 8) < 1e-30L;
    smoothed += expected[i] != unscaled[i] && std::abs(expected[i] - unscaled[i] / 8) >= 1e-30L;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
}

TEST(RopeScaling, YarnFrequenciesAndAttentionFactor) {
  for (const bool truncate : {true, false}) {
    auto scaling = RopeScalingOptions(RopeType::kYarn)
                       .factor(4.0)
                       .original_max_position_embeddings(32768)
                       .truncate(truncate);
    RotaryEmbedding rope(RotaryEmbeddingOptions(128, 8).base(1000000.0).scaling(scaling));
    expect_frequencies(rope->inv_freq(), yarn_reference(1000000, 128, 4, 32768, 32, 1, truncate));
    EXPECT_NEAR(rope->attention_factor(), 0.1 * std::log(4.0) + 1.0, 1e-15);
    // cos/sin carry the factor.
    EXPECT_NEAR(rope->cos[0][0].item<double>(), 0.1 * std::log(4.0) + 1.0, 1e-6);
  }
  // DeepSeek: mscale / mscale_all_dim, and the factor left to the softmax scale.
  auto deepseek = RopeScalingOptions(RopeType::kYarn)
                      .factor(40.0)
                      .original_max_position_embeddings(4096)
                      .mscale(0.707)
                      .mscale_all_dim(1.0)
                      .beta_fast(32)
                      .beta_slow(1);
  RotaryEmbedding rope(
      RotaryEmbeddingOptions(64, 8).scaling(deepseek).attention_factor_in_cos_sin(false));
  const double expected = (0.1 * 0.707 * std::log(40.0) + 1) / (0.1 * std::log(40.0) + 1);
  EXPECT_NEAR(rope->attention_factor(), expected, 1e-15);
  EXPECT_EQ(rope->cos[0][0].item<double>(), 1.0);
  // Without a factor: max_position_embeddings / original.
  RotaryEmbedding implied(
      RotaryEmbeddingOptions(64, 8).scaling(RopeScalingOptions(RopeType::kYarn)
                                                .max_position_embeddings(131072)
                                                .original_max_position_embeddings(32768)));
  EXPECT_NEAR(implied->attention_factor(), 0.1 * std::log(4.0) + 1.0, 1e-15);
}

TEST(RopeScaling, DynamicNtkDependsOnTheCallsLength) {
  auto scaling = RopeScalingOptions(RopeType::kDynamic).factor(2.0).max_position_embeddings(32);
  RotaryEmbedding rope(RotaryEmbeddingOptions(8, 128).scaling(scaling));
  // Within max_position_embeddings: the plain frequencies.
  expect_frequencies(rope->inv_freq(), plain(10000, 8));
  expect_frequencies(rope->inv_freq(32), plain(10000, 8));
  // A call ending at position 99: base * (2 * 100 / 32 - 1)^(8 / 6).
  const LD base = 10000.0L * std::pow(2.0L * 100 / 32 - 1, 8.0L / 6);
  expect_frequencies(rope->inv_freq(100), plain(base, 8));

  rope->to(torch::kDouble);
  const auto x = torch::randn({2, 100, 3, 8}, torch::kDouble);
  const auto y = rope(x);
  // Every position of that call turns with the call's frequencies, including those < 32.
  RotaryEmbedding plain_rope(RotaryEmbeddingOptions(8, 128).base(static_cast<double>(base)));
  plain_rope->to(torch::kDouble);
  EXPECT_TRUE(torch::allclose(y, plain_rope(x), 0, 1e-12));
  // A call within 32 positions uses the caches (the plain base).
  const auto short_x = x.narrow(1, 0, 20);
  RotaryEmbedding reference(RotaryEmbeddingOptions(8, 128));
  reference->to(torch::kDouble);
  EXPECT_TRUE(torch::equal(rope(short_x), reference(short_x)));
  // Decoding one token at position 99 (offset form and explicit positions) uses the frequencies of
  // length 100, as the whole call above did for its last position.
  const auto step = x.narrow(1, 99, 1);
  EXPECT_TRUE(torch::allclose(rope(step, 99), y.narrow(1, 99, 1), 0, 1e-12));
  EXPECT_TRUE(torch::allclose(rope->forward_positions(step, torch::tensor({99}, torch::kLong)),
                              y.narrow(1, 99, 1), 0, 1e-12));
  // Past max_len (128) the usual rule applies.
  EXPECT_POSENC_ERROR(rope(step, 128), "max_len");
}

TEST(RopeScaling, LongRopeSwitchesFactorsPastTheOriginalContext) {
  std::vector<double> short_factor = {1.0, 1.1, 1.3, 1.7};
  std::vector<double> long_factor = {1.0, 2.0, 4.0, 16.0};
  auto scaling = RopeScalingOptions(RopeType::kLongRope)
                     .short_factor(short_factor)
                     .long_factor(long_factor)
                     .max_position_embeddings(128)
                     .original_max_position_embeddings(32);
  RotaryEmbedding rope(RotaryEmbeddingOptions(8, 128).scaling(scaling));
  std::vector<LD> expected_short = plain(10000, 8), expected_long = plain(10000, 8);
  for (size_t i = 0; i < 4; ++i) {
    expected_short[i] /= short_factor[i];
    expected_long[i] /= long_factor[i];
  }
  expect_frequencies(rope->inv_freq(), expected_short);
  expect_frequencies(rope->inv_freq(32), expected_short);
  expect_frequencies(rope->inv_freq(33), expected_long);
  const double factor = std::sqrt(1 + std::log(4.0) / std::log(32.0));
  EXPECT_NEAR(rope->attention_factor(), factor, 1e-15);

  rope->to(torch::kDouble);
  const auto x = torch::randn({1, 40, 2, 8}, torch::kDouble);
  const auto y = rope(x);
  // Reference: rotate with the long frequencies, times the attention factor.
  const auto angle =
      torch::arange(40, torch::kDouble).unsqueeze(1) * rope->inv_freq(40).unsqueeze(0);
  const auto c = (angle.cos() * factor).view({1, 40, 1, 4});
  const auto s = (angle.sin() * factor).view({1, 40, 1, 4});
  const auto a = x.narrow(3, 0, 4), b = x.narrow(3, 4, 4);
  const auto expected = torch::cat({a * c - b * s, a * s + b * c}, 3);
  EXPECT_TRUE(torch::allclose(y, expected, 0, 1e-12));
  // Short calls: the caches (short factors).
  EXPECT_TRUE(torch::equal(rope(x.narrow(1, 0, 32)).narrow(1, 0, 5), rope(x.narrow(1, 0, 5))));
}

TEST(RopeScaling, FreqFactorsDivideAfterTheScaling) {
  RotaryEmbedding rope(options_with(RopeScalingOptions(RopeType::kLinear).factor(2.0), 8, 8)
                           .freq_factors({1.0, 2.0, 4.0, 8.0}));
  std::vector<LD> expected = plain(10000, 8);
  for (size_t i = 0; i < 4; ++i) {
    expected[i] /= 2 * std::pow(2.0L, static_cast<LD>(i));
  }
  expect_frequencies(rope->inv_freq(), expected);
  EXPECT_NE(printed(*rope).find("freq_factors=[4]"), std::string::npos);
}

TEST(RopeScaling, FunctionalFormsAgreeWithTheModule) {
  auto scaling =
      RopeScalingOptions(RopeType::kYarn).factor(8.0).original_max_position_embeddings(64);
  RotaryEmbedding rope(RotaryEmbeddingOptions(16, 32).scaling(scaling));
  const auto tables = F::rotary_tables(
      32, 16, F::RotaryTablesFuncOptions().scaling(scaling.max_position_embeddings(32)));
  EXPECT_TRUE(torch::equal(tables.first, rope->cos));
  EXPECT_TRUE(torch::equal(tables.second, rope->sin));
  EXPECT_TRUE(torch::equal(F::rotary_inv_freq(16, F::RotaryTablesFuncOptions().scaling(scaling)),
                           rope->inv_freq()));
  EXPECT_DOUBLE_EQ(F::rotary_attention_factor(16, F::RotaryTablesFuncOptions().scaling(scaling)),
                   rope->attention_factor());
  EXPECT_POSENC_ERROR(
      F::rotary_inv_freq(16, F::RotaryTablesFuncOptions().scaling(
                                 RopeScalingOptions(RopeType::kDynamic).factor(2.0))),
      "set scaling.max_position_embeddings");
}

TEST(RopeScaling, PrettyPrintNamesTheVariant) {
  RotaryEmbedding rope(options_with(
      RopeScalingOptions(RopeType::kYarn).factor(4.0).original_max_position_embeddings(16)));
  const std::string text = printed(*rope);
  EXPECT_NE(text.find("rope_type=yarn, factor=4, original_max_position_embeddings=16, "
                      "attention_factor=1.13"),
            std::string::npos)
      << text;
  // proportional: what it shows comes from its table entry (detail/rope_types.cpp)
  RotaryEmbedding proportional(options_with(
      RopeScalingOptions(RopeType::kProportional).partial_rotary_factor(0.25)));
  EXPECT_NE(printed(*proportional).find("rope_type=proportional, partial_rotary_factor=0.25)"),
            std::string::npos)
      << printed(*proportional);
}

// Gemma 4's proportional RoPE (transformers' _compute_proportional_rope_parameters, compared with
// transformers itself by test_rope_hf.py): the first int(partial * R // 2) pairs turn with the
// default frequencies divided by factor, the others have frequency 0 (cos 1, sin 0: no rotation).
TEST(RopeScaling, ProportionalTurnsAShareOfThePairs) {
  RotaryEmbedding rope(RotaryEmbeddingOptions(16, 8).base(10000.0).scaling(
      RopeScalingOptions(RopeType::kProportional).partial_rotary_factor(0.3).factor(2.0)));
  const torch::Tensor inv_freq = rope->inv_freq();
  ASSERT_EQ(inv_freq.numel(), 8);
  for (int64_t i = 0; i < 8; ++i) {
    // int(0.3 * 16 // 2) = int(4.8 // 2) = 2 pairs turn
    const double expected =
        i < 2 ? 1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i) / 16.0) / 2.0 : 0.0;
    EXPECT_EQ(inv_freq[i].item<double>(), expected) << i;
  }
  EXPECT_TRUE(torch::equal(rope->cos.narrow(1, 2, 6), torch::ones({8, 6})));
  EXPECT_TRUE(torch::equal(rope->sin.narrow(1, 2, 6), torch::zeros({8, 6})));
  EXPECT_POSENC_ERROR((void)RotaryEmbedding(RotaryEmbeddingOptions(16, 8).scaling(
                          RopeScalingOptions(RopeType::kProportional).partial_rotary_factor(1.5))),
                      "partial_rotary_factor must lie in [0, 1], but got 1.5");
}

// Hunyuan's NTK-alpha: the plain frequencies of base * alpha^(R / (R - 2)), at every call length
// (no switch, no attention factor); and the config reader's Hunyuan rule.
TEST(RopeScaling, NtkAlphaStretchesTheBaseAtEveryLength) {
  RotaryEmbedding rope(options_with(RopeScalingOptions(RopeType::kNtkAlpha).alpha(1000.0), 64, 16));
  const std::vector<LD> expected = plain(10000.0L * std::pow(1000.0L, 16.0L / 14.0L), 16);
  expect_frequencies(rope->inv_freq(), expected);
  expect_frequencies(rope->inv_freq(1000000), expected);
  EXPECT_DOUBLE_EQ(rope->attention_factor(), 1.0);
  EXPECT_EQ(printed(*rope),
            "posenc::RotaryEmbedding(head_dim=16, max_len=64, rotary_dim=16, base=10000, "
            "pairing=half_split, heads_first=false, rope_type=ntk_alpha, alpha=1000)");
  EXPECT_POSENC_ERROR((void)RotaryEmbedding(options_with(RopeScalingOptions(RopeType::kNtkAlpha))),
                      "RotaryEmbedding: rope type 'ntk_alpha' needs alpha");
  EXPECT_POSENC_ERROR(
      RotaryEmbedding(options_with(RopeScalingOptions(RopeType::kNtkAlpha).alpha(-2.0))),
      "RotaryEmbedding: ntk_alpha's alpha must be a finite number > 0, but got -2");
  const std::string hunyuan =
      R"({"model_type": "hunyuan_v1_dense", "hidden_size": 64, "num_attention_heads": 4,
          "head_dim": 16, "max_position_embeddings": 64,
          "rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0, "beta_fast": 32},
          "rope_theta": 10000.0})";
  const auto read = posenc::io::read_hf_rope_config(hunyuan);
  EXPECT_EQ(read.options.scaling().type(), RopeType::kNtkAlpha);
  EXPECT_TRUE(torch::equal(RotaryEmbedding(read.options)->inv_freq(), rope->inv_freq()));
  // Hunyuan-VL's text config (model_type hunyuan_vl_text, in text_config) too.
  const std::string vl = R"({"model_type": "hunyuan_vl", "text_config": {"model_type":
      "hunyuan_vl_text", "hidden_size": 64, "num_attention_heads": 4, "head_dim": 16,
      "max_position_embeddings": 64, "rope_theta": 10000.0,
      "rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0}}})";
  EXPECT_EQ(posenc::io::read_hf_rope_config(vl).options.scaling().type(), RopeType::kNtkAlpha);
  // Other model types keep transformers' dynamic NTK, which does not read alpha.
  std::string llama = hunyuan;
  llama.replace(llama.find("hunyuan_v1_dense"), 16, "llama");
  EXPECT_EQ(posenc::io::read_hf_rope_config(llama).options.scaling().type(), RopeType::kDynamic);
}

TEST(RopeScaling, BadParametersAreClearErrors) {
  using O = RopeScalingOptions;
  EXPECT_POSENC_ERROR((void)RotaryEmbedding(options_with(O(RopeType::kLinear))),
                      "rope type 'linear' needs a scaling factor");
  EXPECT_POSENC_ERROR((void)RotaryEmbedding(options_with(O(RopeType::kLinear).factor(0.0))),
                      "finite number > 0, but got 0");
  EXPECT_POSENC_ERROR(RotaryEmbedding(options_with(O(RopeType::kLinear).factor(std::nan("")))),
                      "finite number > 0");
  EXPECT_POSENC_ERROR((void)RotaryEmbedding(
                          RotaryEmbeddingOptions(2, 8).scaling(O(RopeType::kDynamic).factor(2.0))),
                      "R >= 4");
  EXPECT_POSENC_ERROR(
      (void)RotaryEmbedding(options_with(O(RopeType::kYarn).factor(2.0).beta_fast(0))),
      "beta_fast and beta_slow must be finite numbers > 0");
  EXPECT_POSENC_ERROR((void)RotaryEmbedding(options_with(O(RopeType::kYarn).factor(2.0)).base(1.0)),
                      "base must be > 1");
  EXPECT_POSENC_ERROR(RotaryEmbedding(options_with(
                          O(RopeType::kLongRope).short_factor({1, 1}).long_factor({1, 1}))),
                      "one value per frequency (R / 2 = 8)");
  EXPECT_POSENC_ERROR(
      (void)RotaryEmbedding(options_with(
          O(RopeType::kLlama3).factor(8.0).low_freq_factor(4.0).high_freq_factor(1.0))),
      "0 < low_freq_factor <= high_freq_factor");
  EXPECT_POSENC_ERROR((void)RotaryEmbedding(options_with(O()).freq_factors({1.0, -1.0})),
                      "freq_factors must be empty or hold one divisor per frequency");
  EXPECT_POSENC_ERROR(RotaryEmbedding(options_with(O()).freq_factors(std::vector<double>(8, 0.0))),
                      "freq_factors must hold finite numbers > 0");
  EXPECT_POSENC_ERROR((void)RotaryEmbedding(options_with(
                          O(RopeType::kYarn).factor(2.0).original_max_position_embeddings(0))),
                      "must be >= 1");
  EXPECT_POSENC_ERROR(
      RotaryEmbedding(options_with(O(RopeType::kYarn).factor(2.0).attention_factor(-1.0))),
      "attention_factor must be a finite number > 0");
  // A frequency that is not a number (a huge factor underflows nothing, but freq_factors can
  // overflow): rejected with the variant's name.
  EXPECT_POSENC_ERROR((void)RotaryEmbedding(options_with(O(RopeType::kLinear).factor(1e-300))
                                                .freq_factors(std::vector<double>(8, 1e-300))),
                      "rope type 'linear' with these parameters");
}

TEST(RopeScaling, ExportedDynamicAndLongRopeSwitchLikeTheModule) {
  torch::manual_seed(0);
  auto dynamic = RopeScalingOptions(RopeType::kDynamic).factor(3.0).max_position_embeddings(16);
  auto longrope = RopeScalingOptions(RopeType::kLongRope)
                      .short_factor({1.0, 1.5, 2.0, 3.0})
                      .long_factor({1.0, 3.0, 9.0, 27.0})
                      .original_max_position_embeddings(16);
  for (const auto& scaling : {dynamic, longrope}) {
    RotaryEmbedding rope(
        RotaryEmbeddingOptions(10, 48).rotary_dim(8).scaling(scaling).beyond_max_len(
            posenc::BeyondMaxLen::kExtrapolate));
    auto exported = posenc::to_torchscript(*rope);
    const auto x = torch::randn({2, 40, 3, 10});
    for (int64_t offset : {0, 10, 30, 70}) {
      const auto part = x.narrow(1, 0, 10);
      const auto expected = rope(part, offset);
      const auto got = exported.forward({part, offset}).toTensor();
      EXPECT_TRUE(torch::allclose(got, expected, 0, 2e-6))
          << scaling.type() << " offset " << offset;
    }
    const auto positions = torch::tensor({{0, 5, 17, 3}, {1, 2, 3, 4}}, torch::kLong);
    const auto part = x.narrow(1, 0, 4);
    EXPECT_TRUE(
        torch::allclose(exported.run_method("forward_positions", part, positions).toTensor(),
                        rope->forward_positions(part, positions), 0, 2e-6))
        << scaling.type();
  }
}

// --- config.json -------------------------------------------------------------------------------

TEST(HfConfig, Llama31BothForms) {
  const std::string v4 = R"({"hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 8, "max_position_embeddings": 131072, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})";
  const std::string v5 = R"({"hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 8, "max_position_embeddings": 131072,
    "rope_parameters": {"rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}})";
  for (const auto& text : {v4, v5}) {
    const auto config = posenc::io::read_hf_rope_config(text);
    const auto& options = config.options;
    EXPECT_EQ(options.head_dim(), 128);
    EXPECT_EQ(options.rotated_width(), 128);
    EXPECT_EQ(options.max_len(), 131072);
    EXPECT_EQ(options.base(), 500000.0);
    EXPECT_EQ(options.scaling().type(), RopeType::kLlama3);
    EXPECT_EQ(*options.scaling().factor(), 8.0);
    EXPECT_EQ(*options.scaling().original_max_position_embeddings(), 8192);
    EXPECT_EQ(config.num_attention_heads, 32);
    EXPECT_EQ(config.num_key_value_heads, 8);
    expect_frequencies(
        F::rotary_inv_freq(
            128, F::RotaryTablesFuncOptions().base(options.base()).scaling(options.scaling())),
        llama3_reference(500000, 128, 8, 1, 4, 8192));
  }
}

// The audit: every key that bears on positions, with how it was read. Keys posenc cannot apply
// that change the rotation (unknown rope parameters, a model's own rules) are refused when
// strict (and warned about otherwise: test_rope_hf.py sees the warning of the CLI).
TEST(HfConfig, AuditNamesEveryKeyAndStrictRefusesWhatIsNotApplied) {
  using Status = posenc::io::HfConfigKey::Status;
  const std::string text = R"({"hidden_size": 512, "num_attention_heads": 8,
    "max_position_embeddings": 4096, "rope_theta": 1000.0, "partial_rotary_factor": 0.5,
    "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
      "low_freq_factor": 2.0, "beta_fast": null}})";
  const auto config = posenc::io::read_hf_rope_config(text);
  const auto status_of = [&](const std::string& key) {
    for (const auto& entry : config.audit) {
      if (entry.key == key) {
        return std::string(posenc::io::to_string(entry.status)) + " " + entry.value;
      }
    }
    return std::string("absent");
  };
  EXPECT_EQ(status_of("rope_parameters"), "used {...}");
  EXPECT_EQ(status_of("num_key_value_heads"), "default 8");
  EXPECT_EQ(status_of("head_dim"), "default 64");
  EXPECT_EQ(status_of("rope_parameters.factor"), "used 4.0");
  EXPECT_EQ(status_of("rope_parameters.rope_theta"), "used 10000.0");
  EXPECT_EQ(status_of("rope_theta"), "ignored 1000.0");  // the block's own wins
  EXPECT_EQ(status_of("partial_rotary_factor"), "used 0.5");
  EXPECT_EQ(status_of("rope_parameters.low_freq_factor"), "ignored 2.0");  // yarn does not read it
  EXPECT_EQ(status_of("rope_parameters.beta_fast"), "default null");
  EXPECT_EQ(status_of("rope_parameters.beta_slow"), "default 1.0");
  EXPECT_EQ(status_of("rope_parameters.truncate"), "default true");
  EXPECT_EQ(status_of("original_max_position_embeddings"), "default 4096");
  EXPECT_EQ(config.options.base(), 10000.0);
  EXPECT_EQ(config.options.rotated_width(), 32);
  for (const auto& entry : config.audit) {
    EXPECT_NE(entry.status, Status::kUnknown) << entry.key;
    EXPECT_FALSE(entry.reason.empty()) << entry.key;
  }
  // Read the same with strict: nothing unapplied, the same options.
  posenc::io::HfConfigReadOptions strict;
  strict.strict = true;
  EXPECT_EQ(posenc::io::read_hf_rope_config(text, "config.json", strict).audit.size(),
            config.audit.size());

  // An unknown rope parameter and two of the models' own rules.
  const std::string gpt_neox = R"({"hidden_size": 512, "num_attention_heads": 8,
    "max_position_embeddings": 2048, "rotary_pct": 0.25, "rope_local_base_freq": 10000.0,
    "rope_scaling": {"rope_type": "linear", "factor": 2.0, "fudge": 3}})";
  const auto read = posenc::io::read_hf_rope_config(gpt_neox);
  for (const auto& entry : read.audit) {
    if (entry.key == "rope_scaling.fudge") {
      EXPECT_EQ(entry.status, Status::kUnknown);
    } else if (entry.key == "rotary_pct" || entry.key == "rope_local_base_freq") {
      EXPECT_EQ(entry.status, Status::kIgnored);
      EXPECT_NE(entry.reason.find(entry.key == "rotary_pct" ? "GPT-NeoX" : "Gemma 3"),
                std::string::npos)
          << entry.reason;
    }
  }
  EXPECT_POSENC_ERROR(posenc::io::read_hf_rope_config(gpt_neox, "neox.json", strict),
                      "neox.json: posenc does not apply rope_scaling.fudge, rope_local_base_freq, "
                      "rotary_pct (an unknown rope parameter, or a rule of the model's "
                      "own code)");
}

TEST(HfConfig, Phi3LongRopeQwenYarnAndPartialRotary) {
  std::string factors = "[";
  for (int i = 0; i < 48; ++i) {
    factors += (i ? "," : "") + std::to_string(1.0 + i * 0.01);
  }
  factors += "]";
  // Phi-3: the top-level original_max_position_embeddings wins; "type" is the v4 key; a
  // partial_rotary_factor of 0.75 rotates 96 of 128 channels.
  const std::string phi = R"({"hidden_size": 4096, "num_attention_heads": 32,
    "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
    "partial_rotary_factor": 0.75, "rope_theta": 10000.0,
    "rope_scaling": {"type": "longrope", "short_factor": )" +
                          factors + R"(, "long_factor": )" + factors +
                          R"(, "original_max_position_embeddings": 1}})";
  const auto config = posenc::io::read_hf_rope_config(phi);
  EXPECT_EQ(config.options.rotated_width(), 96);
  EXPECT_EQ(config.options.scaling().type(), RopeType::kLongRope);
  EXPECT_EQ(*config.options.scaling().original_max_position_embeddings(), 4096);
  EXPECT_EQ(config.options.scaling().short_factor().size(), 48u);
  // Qwen: yarn with beta 0 = default, explicit head_dim, text_config of a VL config.
  const auto qwen = posenc::io::read_hf_rope_config(R"({"model_type": "x", "text_config": {
    "hidden_size": 2048, "head_dim": 128, "num_attention_heads": 16, "num_key_value_heads": 2,
    "max_position_embeddings": 40960, "rope_theta": 1000000,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 0,
                     "original_max_position_embeddings": 32768}}})");
  EXPECT_EQ(qwen.options.head_dim(), 128);
  EXPECT_EQ(qwen.options.scaling().beta_fast(), 32.0);
  EXPECT_TRUE(qwen.options.scaling().truncate());
  EXPECT_EQ(qwen.num_key_value_heads, 2);
  // No rope block at all: the plain RoPE, rope_theta default 10000.
  const auto plain_config = posenc::io::read_hf_rope_config(
      R"({"hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 32,
          "rope_scaling": null})");
  EXPECT_EQ(plain_config.options.scaling().type(), RopeType::kDefault);
  EXPECT_EQ(plain_config.options.base(), 10000.0);
  EXPECT_EQ(plain_config.options.head_dim(), 16);
}

TEST(HfConfig, MalformedConfigsAreClearErrors) {
  using posenc::io::read_hf_rope_config;
  const std::string heads = R"("hidden_size": 64, "num_attention_heads": 4, )";
  EXPECT_POSENC_ERROR(read_hf_rope_config("{"), "not valid JSON");
  EXPECT_POSENC_ERROR(read_hf_rope_config("[]"), "expected a JSON object");
  EXPECT_POSENC_ERROR(read_hf_rope_config(R"({"hidden_size": 64, "max_position_embeddings": 8})"),
                      "num_attention_heads must be a whole number >= 1, but is missing");
  EXPECT_POSENC_ERROR(read_hf_rope_config("{" + heads + R"("max_position_embeddings": "8"})"),
                      "max_position_embeddings must be a number, but is a string");
  EXPECT_POSENC_ERROR(read_hf_rope_config("{" + heads + R"("max_position_embeddings": 8.5})"),
                      "must be a whole number");
  EXPECT_POSENC_ERROR(read_hf_rope_config("{" + heads + R"("rope_theta": 1e4})"),
                      "max_position_embeddings must be a whole number >= 1");
  EXPECT_POSENC_ERROR(
      read_hf_rope_config("{" + heads +
                          R"("max_position_embeddings": 8, "rope_scaling": {"rope_type": "su"}})"),
      "unknown rope_scaling.rope_type 'su'");
  EXPECT_POSENC_ERROR(read_hf_rope_config("{" + heads +
                                          R"("max_position_embeddings": 8,
      "rope_scaling": {"rope_type": "linear"}})"),
                      "factor is needed by rope type 'linear'");
  EXPECT_POSENC_ERROR(read_hf_rope_config("{" + heads +
                                          R"("max_position_embeddings": 8,
      "rope_scaling": {"rope_type": "llama3", "factor": 8}})"),
                      "rope_scaling.low_freq_factor is needed by rope type 'llama3' (LLaMA 3.1: "
                      "factor 8, low_freq_factor 1, high_freq_factor 4)");
  EXPECT_POSENC_ERROR(read_hf_rope_config("{" + heads +
                                          R"("max_position_embeddings": 8,
      "rope_scaling": {"rope_type": "longrope", "short_factor": [1, "a"]}})"),
                      "short_factor must hold numbers only");
  EXPECT_POSENC_ERROR(read_hf_rope_config("{" + heads +
                                          R"("max_position_embeddings": 8,
      "rope_scaling": {"type": "mrope", "mrope_section": [2, 3.5, 3]}})"),
                      "mrope_section must hold whole numbers in [0, 9e15), but holds 3.5");
  EXPECT_POSENC_ERROR(read_hf_rope_config("{" + heads +
                                          R"("max_position_embeddings": 8,
      "rope_scaling": {"type": "mrope"}})"),
                      "rope type 'mrope' needs mrope_section");
  EXPECT_POSENC_ERROR(read_hf_rope_config("{" + heads +
                                          R"("max_position_embeddings": 8,
      "rope_scaling": {"mrope_section": [2, 3, 3], "mrope_interleaved": 1}})"),
                      "mrope_interleaved must be true or false");
  EXPECT_POSENC_ERROR(read_hf_rope_config("{" + heads +
                                          R"("max_position_embeddings": 8,
      "rope_parameters": {"full_attention": {"rope_type": "default"}}})"),
                      "config.json: rope_parameters holds one set per layer type (full_attention); "
                      "choose a layer (C++: HfConfigReadOptions::layer; posenc rope/export "
                      "--layer N; Python: layer=N) or a layer type (layer_type)");
  EXPECT_POSENC_ERROR(read_hf_rope_config("{" + heads +
                                          R"("max_position_embeddings": 8,
      "partial_rotary_factor": 0.33})"),
                      "must be even and >= 2");
  EXPECT_POSENC_ERROR(read_hf_rope_config("{" + heads +
                                          R"("max_position_embeddings": 8,
      "rope_scaling": {"rope_type": "yarn", "factor": 2, "truncate": "yes"}})"),
                      "truncate must be true or false");
  EXPECT_POSENC_ERROR(posenc::io::read_hf_rope_config_file("/nonexistent/config.json"),
                      "cannot open");
}

} // namespace

// --- packed sequences and context-parallel shards ---------------------------------------------

namespace {

TEST(PackedPositions, RestartOrStartWhereGiven) {
  const auto cu = torch::tensor({0, 3, 3, 5}, torch::kInt);
  EXPECT_TRUE(
      torch::equal(F::packed_positions(cu, 5), torch::tensor({0, 1, 2, 0, 1}, torch::kLong)));
  EXPECT_TRUE(torch::equal(
      F::packed_positions(cu.to(torch::kLong), 5, torch::tensor({4, 7, 10}, torch::kLong)),
      torch::tensor({4, 5, 6, 10, 11}, torch::kLong)));
  EXPECT_EQ(F::packed_positions(torch::tensor({0}, torch::kLong).repeat({2}), 0).numel(), 0);
}

TEST(PackedPositions, BadArgumentsAreClearErrors) {
  EXPECT_POSENC_ERROR(F::packed_positions(torch::tensor({1, 3}, torch::kLong), 3),
                      "must start at 0 and end at the number of packed tokens T = 3");
  EXPECT_POSENC_ERROR(F::packed_positions(torch::tensor({0, 4, 3}, torch::kLong), 3),
                      "cu_seqlens must not decrease");
  EXPECT_POSENC_ERROR(F::packed_positions(torch::tensor({0, 2}, torch::kLong), 3),
                      "end at the number of packed tokens T = 3");
  EXPECT_POSENC_ERROR(F::packed_positions(torch::tensor({0.0, 2.0}), 2),
                      "cu_seqlens must be a 1-D int32 or int64 tensor");
  EXPECT_POSENC_ERROR(F::packed_positions(torch::tensor({0}, torch::kLong), 0),
                      "at least 2 entries");
  EXPECT_POSENC_ERROR(F::packed_positions(torch::tensor({0, 2}, torch::kLong), 2,
                                          torch::tensor({0, 0}, torch::kLong)),
                      "start_positions must hold one position per sequence (1)");
  EXPECT_POSENC_ERROR(F::packed_positions(torch::tensor({0, 2}, torch::kLong), 2,
                                          torch::tensor({-1}, torch::kLong)),
                      "start_positions must be >= 0");
  EXPECT_POSENC_ERROR(
      F::packed_positions(torch::tensor({0, 2}, torch::kLong), 2,
                          torch::tensor({std::numeric_limits<int64_t>::max()}, torch::kLong)),
      "past the int64 range");
  EXPECT_POSENC_ERROR(F::packed_positions(torch::tensor({0, 2}, torch::kLong), -1),
                      "total (the number of packed tokens) must be in [0, 2^28]");
}

TEST(PackedPositions, ForwardPackedRotatesEachSequenceFromItsStart) {
  torch::manual_seed(0);
  for (const bool heads_first : {false, true}) {
    RotaryEmbedding rope(RotaryEmbeddingOptions(8, 64).heads_first(heads_first));
    const auto packed = torch::randn({7, 3, 8}); // sequences of 4 and 3 tokens
    const auto cu = torch::tensor({0, 4, 7}, torch::kInt);
    const auto start = torch::tensor({0, 20}, torch::kLong);
    const auto out = rope->forward_packed(packed, cu, start);
    ASSERT_EQ(out.sizes(), packed.sizes());
    const auto as_batch = [&](const torch::Tensor& t) { // [L, H, D] -> the module's layout
      return heads_first ? t.transpose(0, 1).unsqueeze(0) : t.unsqueeze(0);
    };
    const auto back = [&](const torch::Tensor& t) {
      return heads_first ? t.squeeze(0).transpose(0, 1) : t.squeeze(0);
    };
    EXPECT_TRUE(torch::equal(out.narrow(0, 0, 4), back(rope(as_batch(packed.narrow(0, 0, 4)), 0))));
    EXPECT_TRUE(
        torch::equal(out.narrow(0, 4, 3), back(rope(as_batch(packed.narrow(0, 4, 3)), 20))));
  }
  RotaryEmbedding rope(RotaryEmbeddingOptions(8, 64));
  EXPECT_POSENC_ERROR(rope->forward_packed(torch::randn({2, 7, 3, 8}), torch::tensor({0, 7})),
                      "forward_packed expects packed queries or keys [T, H, head_dim]");
  EXPECT_POSENC_ERROR(rope->forward_packed(torch::randn({7, 3, 8}), torch::tensor({0, 6})),
                      "RotaryEmbedding: cu_seqlens must start at 0 and end");
}

TEST(ContextParallel, ShardsCoverTheSequenceAndRotateLikeIt) {
  EXPECT_TRUE(torch::equal(F::context_parallel_positions(8, 2, 1),
                           torch::tensor({4, 5, 6, 7}, torch::kLong)));
  EXPECT_TRUE(torch::equal(F::context_parallel_positions(8, 2, 0, true),
                           torch::tensor({0, 1, 6, 7}, torch::kLong)));
  EXPECT_TRUE(torch::equal(F::context_parallel_positions(8, 2, 1, true),
                           torch::tensor({2, 3, 4, 5}, torch::kLong)));
  torch::manual_seed(0);
  RotaryEmbedding rope(RotaryEmbeddingOptions(16, 64));
  const auto x = torch::randn({2, 24, 2, 16});
  const auto whole = rope(x);
  for (const bool zigzag : {false, true}) {
    for (const int64_t world : {1, 2, 3}) {
      std::vector<int64_t> seen;
      for (int64_t rank = 0; rank < world; ++rank) {
        const auto positions = F::context_parallel_positions(24, world, rank, zigzag);
        const auto shard = x.index_select(1, positions);
        EXPECT_TRUE(torch::equal(rope->forward_positions(shard, positions),
                                 whole.index_select(1, positions)));
        for (int64_t i = 0; i < positions.numel(); ++i) {
          seen.push_back(positions[i].item<int64_t>());
        }
      }
      std::sort(seen.begin(), seen.end());
      std::vector<int64_t> all(24);
      for (int64_t i = 0; i < 24; ++i) {
        all[static_cast<size_t>(i)] = i;
      }
      EXPECT_EQ(seen, all);
    }
  }
  EXPECT_POSENC_ERROR(F::context_parallel_positions(10, 3, 0), "multiple of world_size = 3");
  EXPECT_POSENC_ERROR(F::context_parallel_positions(12, 2, 0, true).sum();
                      F::context_parallel_positions(10, 2, 0, true),
                      "multiple of 2 * world_size = 4");
  EXPECT_POSENC_ERROR(F::context_parallel_positions(8, 2, 2), "0 <= rank < world_size");
  EXPECT_POSENC_ERROR(F::context_parallel_positions(8, 0, 0), "world_size >= 1");
}

// Packed sequences split sequence by sequence: the module's forward_packed of the whole batch,
// taken at each rank's indices, is the rank's tokens rotated at its positions.
TEST(ContextParallel, PackedShardsRotateLikeTheWholeBatch) {
  torch::manual_seed(0);
  RotaryEmbedding rope(RotaryEmbeddingOptions(16, 64));
  const auto cu = torch::tensor({0, 12, 12, 36, 48}, torch::kInt);
  const auto packed = torch::randn({48, 3, 16});
  const auto whole = rope->forward_packed(packed, cu);
  for (const bool zigzag : {false, true}) {
    for (const int64_t world : {1, 2, 3, 6}) {
      std::vector<int64_t> held;
      for (int64_t rank = 0; rank < world; ++rank) {
        const auto [positions, indices] =
            F::context_parallel_packed_positions(cu, 48, world, rank, zigzag);
        ASSERT_EQ(positions.numel(), 48 / world);
        EXPECT_TRUE(torch::equal(
            rope->forward_positions(packed.index_select(0, indices).unsqueeze(0),
                                    positions)
                .squeeze(0),
            whole.index_select(0, indices)));
        const auto values = indices.contiguous();
        held.insert(held.end(), values.data_ptr<int64_t>(),
                    values.data_ptr<int64_t>() + values.numel());
      }
      std::sort(held.begin(), held.end());
      std::vector<int64_t> all(48);
      std::iota(all.begin(), all.end(), int64_t{0});
      EXPECT_EQ(held, all);
    }
  }
  EXPECT_POSENC_ERROR(F::context_parallel_packed_positions(torch::tensor({0, 6, 12}), 12, 2, 0,
                                                           true),
                      "context_parallel_packed_positions: sequence 0 has 6 tokens, which must be "
                      "a multiple of 2 * world_size = 4");
}

} // namespace

// transformers 5's per-layer-type rope parameters (Gemma 3, OLMo 3, ModernBERT) and Gemma 4's
// per_layer_config: read for the layer (or layer type) asked for, never picked silently.
TEST(HfConfig, PerLayerRopeParameters) {
  using posenc::io::HfConfigReadOptions;
  using posenc::io::read_hf_rope_config;
  const std::string config = R"({"model_type": "gemma3_text", "hidden_size": 64,
      "num_attention_heads": 4, "head_dim": 16, "max_position_embeddings": 32,
      "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
      "per_layer_config": {"2": {"head_dim": 32}},
      "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                          "full_attention": {"rope_type": "linear", "factor": 8.0,
                                             "rope_theta": 1000000.0}}})";
  HfConfigReadOptions read;
  read.layer = 0;
  const auto sliding = read_hf_rope_config(config, "config.json", read);
  EXPECT_EQ(sliding.layer_type, "sliding_attention");
  EXPECT_EQ(sliding.layer_types.size(), 3u);
  EXPECT_EQ(sliding.options.base(), 10000.0);
  EXPECT_EQ(sliding.options.head_dim(), 16);
  EXPECT_EQ(sliding.options.scaling().type(), RopeType::kDefault);
  read.layer = 2;
  const auto full = read_hf_rope_config(config, "config.json", read);
  EXPECT_EQ(full.layer_type, "full_attention");
  EXPECT_EQ(full.options.base(), 1000000.0);
  EXPECT_EQ(full.options.head_dim(), 32); // per_layer_config
  EXPECT_EQ(full.options.scaling().type(), RopeType::kLinear);
  const auto status_of = [](const posenc::io::HfRopeConfig& read_config, const std::string& key) {
    for (const auto& entry : read_config.audit) {
      if (entry.key == key) {
        return std::string(posenc::io::to_string(entry.status));
      }
    }
    return std::string("absent");
  };
  EXPECT_EQ(status_of(full, "rope_parameters.full_attention"), "used");
  EXPECT_EQ(status_of(full, "rope_parameters.sliding_attention"), "ignored");
  EXPECT_EQ(status_of(full, "per_layer_config"), "used");
  EXPECT_EQ(status_of(full, "rope_parameters.full_attention.factor"), "used");
  read.layer = 3;
  EXPECT_POSENC_ERROR(read_hf_rope_config(config, "config.json", read),
                      "config.json: layer 3 is not a layer of this model (layer_types has 3 "
                      "layers: 0 .. 2)");
  read.layer = 0;
  read.layer_type = "full_attention";
  EXPECT_POSENC_ERROR(read_hf_rope_config(config, "config.json", read),
                      "config.json: layer 0 is a sliding_attention layer, but layer type "
                      "full_attention was asked for; give one of the two");
  read.layer.reset();
  EXPECT_POSENC_ERROR(read_hf_rope_config(config, "config.json", read),
                      "per_layer_config gives some layers fields of their own, so a layer type "
                      "does not say which; choose the layer by its index (layer) (per_layer_config "
                      "gives layers 2 fields of their own; the full_attention layers are 2; the "
                      "sliding_attention layers are 0, 1)");
  {
    // the indices to choose from, as ranges
    std::string six = config;
    six.replace(six.find(R"(["sliding_attention", "sliding_attention", "full_attention"])"),
                std::string(R"(["sliding_attention", "sliding_attention", "full_attention"])").size(),
                R"(["sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
                    "sliding_attention", "full_attention"])");
    six.replace(six.find(R"({"2": {"head_dim": 32}})"), std::string(R"({"2": {"head_dim": 32}})").size(),
                R"({"5": {"head_dim": 32}, "3": {"head_dim": 32}})");
    HfConfigReadOptions by_type;
    by_type.layer_type = "sliding_attention";
    EXPECT_POSENC_ERROR(read_hf_rope_config(six, "config.json", by_type),
                        "(per_layer_config gives layers 3, 5 fields of their own; the "
                        "sliding_attention layers are 0 .. 2, 4; the full_attention layers are 3, 5)");
    by_type.layer_type = "chunked_attention";
    EXPECT_POSENC_ERROR(read_hf_rope_config(six, "config.json", by_type),
                        "(per_layer_config gives layers 3, 5 fields of their own; layer_types has "
                        "no chunked_attention layer; the sliding_attention layers are 0 .. 2, 4; "
                        "the full_attention layers are 3, 5)");
  }
  // Without per_layer_config, a layer type is enough; an unknown one is named.
  std::string plain = config;
  plain.erase(plain.find(R"("per_layer_config")"), std::string(R"("per_layer_config": {"2": {"head_dim": 32}},)").size());
  EXPECT_EQ(read_hf_rope_config(plain, "config.json", read).options.base(), 1000000.0);
  read.layer_type = "chunked_attention";
  EXPECT_POSENC_ERROR(read_hf_rope_config(plain, "config.json", read),
                      "rope_parameters has no set for layer type 'chunked_attention' (it has "
                      "full_attention, sliding_attention)");
}

// Gemma 4 without per_layer_config: its configuration class gives full-attention layers
// global_head_dim (default 512); transformers 4's per-layer bases are refused for one layer.
TEST(HfConfig, LayerRulesOfGemma4AndOlderForms) {
  using posenc::io::HfConfigReadOptions;
  using posenc::io::read_hf_rope_config;
  const std::string gemma4 = R"({"model_type": "gemma4_text", "hidden_size": 64,
      "num_attention_heads": 4, "head_dim": 16, "max_position_embeddings": 32,
      "layer_types": ["sliding_attention", "full_attention"],
      "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                          "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0,
                                             "partial_rotary_factor": 0.25}}})";
  HfConfigReadOptions read;
  read.layer = 1;
  EXPECT_EQ(read_hf_rope_config(gemma4, "config.json", read).options.head_dim(), 512);
  std::string given = gemma4;
  given.insert(1, R"("global_head_dim": 64, )");
  EXPECT_EQ(read_hf_rope_config(given, "config.json", read).options.head_dim(), 64);
  read.layer = 0;
  EXPECT_EQ(read_hf_rope_config(given, "config.json", read).options.head_dim(), 16);
  // per_layer_config keys as transformers writes them for 10 or more layers: zero-padded.
  std::string padded = gemma4;
  padded.insert(1, R"("per_layer_config": {"01": {"head_dim": 48}}, )");
  read.layer = 1;
  EXPECT_EQ(read_hf_rope_config(padded, "config.json", read).options.head_dim(), 48);
  const std::string gemma3_v4 = R"({"model_type": "gemma3_text", "hidden_size": 64,
      "num_attention_heads": 4, "head_dim": 16, "max_position_embeddings": 32,
      "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
      "rope_scaling": {"rope_type": "linear", "factor": 8.0}})";
  read.layer = 0;
  EXPECT_POSENC_ERROR(read_hf_rope_config(gemma3_v4, "config.json", read),
                      "config.json: rope_local_base_freq gives this model's layer types different "
                      "rotary bases in transformers 4's form");
}

TEST(HfConfig, MultimodalRope) {
  // Qwen2-VL (transformers 4 form: type "mrope") and Qwen3-VL (text_config, interleaved).
  const auto qwen2 = posenc::io::read_hf_rope_config(R"({
      "hidden_size": 1536, "num_attention_heads": 12, "num_key_value_heads": 2,
      "max_position_embeddings": 32768, "rope_theta": 1000000.0,
      "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}})");
  EXPECT_EQ(qwen2.options.head_dim(), 128);
  EXPECT_EQ(qwen2.options.scaling().type(), posenc::RopeType::kDefault);
  EXPECT_EQ(qwen2.options.mrope_section(), (std::vector<int64_t>{16, 24, 24}));
  EXPECT_FALSE(qwen2.options.mrope_interleaved());
  const auto qwen3 = posenc::io::read_hf_rope_config(R"({"text_config": {
      "hidden_size": 2048, "head_dim": 128, "num_attention_heads": 16, "num_key_value_heads": 8,
      "max_position_embeddings": 262144, "rope_theta": 5000000,
      "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20],
                       "mrope_interleaved": true}}})");
  EXPECT_EQ(qwen3.options.mrope_section(), (std::vector<int64_t>{24, 20, 20}));
  EXPECT_TRUE(qwen3.options.mrope_interleaved());
  EXPECT_EQ(qwen3.options.base(), 5000000.0);
  // A module built from it takes [3, B, L] positions.
  auto options = qwen3.options;
  posenc::RotaryEmbedding rope(options.max_len(64));
  const auto q = torch::randn({1, 4, 2, 128});
  const auto positions = torch::randint(0, 64, {3, 1, 4}, torch::kLong);
  EXPECT_EQ(rope->forward_positions(q, positions).sizes(), q.sizes());
}
