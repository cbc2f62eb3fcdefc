// Vision and diffusion positions: the timestep embedding and the 2-D sin-cos tables against
// float64 formulations written here, the Timesteps and TimestepEmbedder modules, errors. (Against
// diffusers' and timm's own code: test/python/test_vision.py.)

#include <posenc/posenc.h>

#include "test_util.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

namespace F = posenc::functional;
using posenc_test::printed;

namespace {

class Vision : public posenc_test::SeededTest {};

// The embedding of one timestep, float64: [sin | cos] (or [cos | sin]) of t * scale * f_k, f_k =
// max_period^(-k / (half - shift)), a zero last for odd widths.
std::vector<double> timestep_row(double t, int64_t dim, bool flip, double shift, double scale,
                                 double max_period) {
  const int64_t half = dim / 2;
  std::vector<double> row(static_cast<size_t>(dim), 0.0);
  for (int64_t k = 0; k < half; ++k) {
    const double angle =
        t * scale * std::pow(max_period, -static_cast<double>(k) / (static_cast<double>(half) - shift));
    row[static_cast<size_t>(flip ? half + k : k)] = std::sin(angle);
    row[static_cast<size_t>(flip ? k : half + k)] = std::cos(angle);
  }
  return row;
}

TEST_F(Vision, TimestepEmbeddingIsTheFloat64FormulaRoundedOnce) {
  const auto timesteps = torch::tensor({0.0, 0.5, 1.0, 250.25, 999.0}, torch::kDouble);
  struct Config {
    int64_t dim;
    bool flip;
    double shift, scale;
    int64_t max_period;
  };
  for (const Config& c : {Config{320, true, 0, 1, 10000}, Config{129, false, 1, 1, 10000},
                          Config{64, true, 1, 1000, 10000}, Config{8, false, 0.5, 2, 500}}) {
    const auto ours = F::timestep_embedding(timesteps, posenc::TimestepEmbeddingOptions(c.dim)
                                                           .flip_sin_to_cos(c.flip)
                                                           .downscale_freq_shift(c.shift)
                                                           .scale(c.scale)
                                                           .max_period(c.max_period));
    ASSERT_EQ(ours.sizes(), (std::vector<int64_t>{5, c.dim}));
    ASSERT_EQ(ours.scalar_type(), torch::kFloat);
    for (int64_t n = 0; n < 5; ++n) {
      const auto row = timestep_row(timesteps[n].item<double>(), c.dim, c.flip, c.shift,
                                    c.scale, static_cast<double>(c.max_period));
      // float64 evaluations that may differ in the last bits, then one rounding to float32
      const auto expected = torch::tensor(row, torch::kDouble);
      EXPECT_LE((ours[n].to(torch::kDouble) - expected).abs().max().item<double>(),
                std::ldexp(1.0, -25) + 1e-12);
    }
  }
  // integer timesteps give the same rows as the same values in float
  EXPECT_TRUE(torch::equal(posenc::ops::timestep_embedding(torch::arange(10), 16),
                           posenc::ops::timestep_embedding(torch::arange(10).to(torch::kFloat), 16)));
}

TEST_F(Vision, TimestepsModuleAndDitEmbedder) {
  posenc::Timesteps time_proj(
      posenc::TimestepEmbeddingOptions(320).flip_sin_to_cos(true).downscale_freq_shift(0));
  EXPECT_EQ(printed(*time_proj),
            "posenc::Timesteps(embedding_dim=320, flip_sin_to_cos=true, downscale_freq_shift=0)");
  const auto t = torch::tensor({999, 500, 1}, torch::kLong);
  EXPECT_TRUE(torch::equal(time_proj(t), posenc::ops::timestep_embedding(t, 320, true, 0.0)));
  EXPECT_EQ(time_proj->parameters().size(), 0U);

  posenc::TimestepEmbedder embedder(posenc::TimestepEmbedderOptions(48).frequency_embedding_size(32));
  EXPECT_EQ(printed(*embedder),
            "posenc::TimestepEmbedder(hidden_size=48, frequency_embedding_size=32)");
  std::vector<std::string> names;
  for (const auto& item : embedder->named_parameters()) {
    names.push_back(item.key());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"mlp.0.weight", "mlp.0.bias", "mlp.2.weight",
                                             "mlp.2.bias"}));
  const auto frequencies = posenc::ops::timestep_embedding(t, 32, true, 0.0);
  const auto& first = embedder->mlp->ptr(0)->as<torch::nn::Linear>();
  const auto& second = embedder->mlp->ptr(2)->as<torch::nn::Linear>();
  const auto expected = second->forward(torch::silu(first->forward(frequencies)));
  EXPECT_TRUE(torch::allclose(embedder(t), expected, 0, 0));
  embedder->to(torch::kDouble);
  EXPECT_EQ(embedder(t).scalar_type(), torch::kDouble);
}

// diffusers' 2-D layout, float64: the column coordinate's [sin | cos], then the row coordinate's.
torch::Tensor grid_reference(int64_t dim, int64_t height, int64_t width, double base_size,
                             double scale) {
  const int64_t bands = dim / 4;
  auto table = torch::zeros({height * width, dim}, torch::kDouble);
  for (int64_t i = 0; i < height; ++i) {
    for (int64_t j = 0; j < width; ++j) {
      const double coordinates[2] = {static_cast<double>(j) * base_size / static_cast<double>(width) / scale,
                                     static_cast<double>(i) * base_size / static_cast<double>(height) / scale};
      for (int64_t axis = 0; axis < 2; ++axis) {
        for (int64_t k = 0; k < bands; ++k) {
          const double angle = coordinates[axis] * std::pow(10000.0, -static_cast<double>(k) / static_cast<double>(bands));
          table[i * width + j][axis * 2 * bands + k] = std::sin(angle);
          table[i * width + j][axis * 2 * bands + bands + k] = std::cos(angle);
        }
      }
    }
  }
  return table;
}

TEST_F(Vision, Sincos2dTableFollowsDiffusersLayout) {
  const auto ours = F::sincos_2d_table(posenc::Sincos2dTableOptions(32, {3, 5}).base_size(8).interpolation_scale(2.0));
  ASSERT_EQ(ours.sizes(), (std::vector<int64_t>{15, 32}));
  EXPECT_LE((ours.to(torch::kDouble) - grid_reference(32, 3, 5, 8, 2)).abs().max().item<double>(),
            std::ldexp(1.0, -25) + 1e-12);
  // MAE: integer coordinates (base_size = the grid) and one zero row for the class token
  const auto mae = F::sincos_2d_table(posenc::Sincos2dTableOptions(64, {4}).base_size(4).cls_token(true).extra_tokens(1));
  ASSERT_EQ(mae.sizes(), (std::vector<int64_t>{17, 64}));
  EXPECT_TRUE(torch::equal(mae[0], torch::zeros({64})));
  EXPECT_LE((mae.narrow(0, 1, 16).to(torch::kDouble) - grid_reference(64, 4, 4, 4, 1)).abs().max().item<double>(),
            std::ldexp(1.0, -25) + 1e-12);
  // timm's reverse_coord + interleave_sin_cos has diffusers' columns at integer coordinates, with
  // the tokens in column-major order (its grid runs over (W, H))
  const auto timm = F::sincos_2d_grid_table({4, 4}, 64, 10000.0, /*reverse_coord=*/true, /*interleave_sin_cos=*/true);
  EXPECT_TRUE(torch::equal(timm.view({4, 4, 64}).transpose(0, 1).reshape({16, 64}), mae.narrow(0, 1, 16)));
}

TEST_F(Vision, BadInputsAreClearErrors) {
  const auto t = torch::tensor({1.0, 2.0});
  EXPECT_POSENC_ERROR(posenc::Timesteps(posenc::TimestepEmbeddingOptions(1)), "Timesteps: embedding_dim must be in [2, 2^28]");
  EXPECT_POSENC_ERROR(posenc::Timesteps(posenc::TimestepEmbeddingOptions(8).downscale_freq_shift(4)), "differ from embedding_dim / 2 = 4");
  posenc::Timesteps time_proj(posenc::TimestepEmbeddingOptions(8));
  EXPECT_POSENC_ERROR(time_proj(torch::tensor({1.0, std::nan("")})), "Timesteps: timesteps must be finite");
  EXPECT_POSENC_ERROR(time_proj(t.view({2, 1})), "timesteps must be a 1-D tensor [N]");
  EXPECT_POSENC_ERROR(posenc::TimestepEmbedder(posenc::TimestepEmbedderOptions(0)), "hidden_size must be >= 1");
  EXPECT_POSENC_ERROR(F::sincos_2d_table(posenc::Sincos2dTableOptions(30, {4})), "sincos_2d_table: embed_dim must be a positive multiple of 4");
  EXPECT_POSENC_ERROR(F::sincos_2d_table(posenc::Sincos2dTableOptions(32, {})), "grid_size must be [H, W]");
  EXPECT_POSENC_ERROR(F::sincos_2d_table(posenc::Sincos2dTableOptions(32, {4, -1})), "sizes in [1, 2^28]");
  EXPECT_POSENC_ERROR(F::sincos_2d_grid_table({4, 4}, 32, -1.0), "temperature must be finite and > 0");
}

} // namespace

// Axial RoPE: each axis' columns are the RoPE of that axis' coordinate with the axis' own width,
// against a long-double evaluation; negative and fractional coordinates are plain coordinates.
TEST_F(Vision, AxialRotaryTablesAreEachAxisRope) {
  const std::vector<int64_t> axes{4, 6, 8};
  const auto ids =
      torch::tensor({{0.0, 0.0, 0.0}, {0.0, 3.0, 5.0}, {1.5, -2.0, 40.25}, {-1.0, 7.0, 1000.0}},
                    torch::kDouble);
  const auto tables =
      F::axial_rotary_tables(ids, posenc::AxialRotaryEmbeddingOptions(axes).theta(500), torch::kDouble);
  const auto& cos = std::get<0>(tables);
  const auto& sin = std::get<1>(tables);
  ASSERT_EQ(cos.sizes(), (std::vector<int64_t>{4, 9}));
  double worst = 0;
  for (int64_t n = 0; n < 4; ++n) {
    int64_t column = 0;
    for (size_t a = 0; a < axes.size(); ++a) {
      for (int64_t i = 0; i < axes[a] / 2; ++i, ++column) {
        const long double angle =
            static_cast<long double>(ids[n][static_cast<int64_t>(a)].item<double>()) *
            std::pow(500.0L, -2.0L * i / axes[a]);
        worst = std::max({worst, std::abs(cos[n][column].item<double>() - static_cast<double>(std::cos(angle))),
                          std::abs(sin[n][column].item<double>() - static_cast<double>(std::sin(angle)))});
      }
    }
  }
  // float64 angles up to 1000 rad: a few ulp of the angle
  EXPECT_LE(worst, 1e-12);
  // float32 by default: the float64 values rounded once; integer ids are coordinates too (-1 is
  // not padding here).
  const auto rounded = F::axial_rotary_tables(ids.to(torch::kLong).to(torch::kDouble),
                                              posenc::AxialRotaryEmbeddingOptions(axes).theta(500));
  EXPECT_TRUE(torch::equal(
      std::get<0>(rounded),
      std::get<0>(F::axial_rotary_tables(ids.to(torch::kLong), posenc::AxialRotaryEmbeddingOptions(axes).theta(500)))));
  EXPECT_EQ(std::get<1>(rounded).scalar_type(), torch::kFloat);
}

TEST_F(Vision, AxialRotaryEmbeddingRotatesPairsByTheirAxisAngles) {
  posenc::AxialRotaryEmbedding rope(posenc::AxialRotaryEmbeddingOptions({4, 6, 8}));
  EXPECT_EQ(printed(*rope), "posenc::AxialRotaryEmbedding(axes_dim=[4, 6, 8])");
  const auto ids = torch::tensor({{0, 0, 0}, {0, 1, 2}, {0, 1, 3}, {2, 5, 9}, {3, 0, 11}}, torch::kLong);
  const auto x = torch::randn({2, 5, 3, 20}, torch::kDouble);
  const auto y = rope(x, ids);
  const auto tables = rope->tables(ids, torch::kDouble);
  // interleaved pairs (2i, 2i + 1) turned by the angle of column i; channels 18, 19 untouched
  const auto c = std::get<0>(tables).view({1, 5, 1, 9});
  const auto s = std::get<1>(tables).view({1, 5, 1, 9});
  const auto even = x.narrow(3, 0, 18).slice(3, 0, 18, 2);
  const auto odd = x.narrow(3, 0, 18).slice(3, 1, 18, 2);
  const auto expected = torch::cat(
      {torch::stack({even * c - odd * s, even * s + odd * c}, -1).flatten(3), x.narrow(3, 18, 2)}, 3);
  EXPECT_LE((y - expected).abs().max().item<double>(), 1e-14);
  // norms of every rotated pair are kept; heads_first is the transposed layout
  posenc::AxialRotaryEmbedding heads_first(
      posenc::AxialRotaryEmbeddingOptions({4, 6, 8}).heads_first(true));
  EXPECT_TRUE(torch::allclose(heads_first(x.transpose(1, 2), ids), y.transpose(1, 2), 0, 1e-15));
  EXPECT_EQ(printed(*heads_first), "posenc::AxialRotaryEmbedding(axes_dim=[4, 6, 8], heads_first=true)");
  // float32 inputs rotate by float32 tables: within float32 rounding of the float64 result
  EXPECT_LE((rope(x.to(torch::kFloat), ids).to(torch::kDouble) - y).abs().max().item<double>(), 1e-5);
  // half-split pairs (i, i + 9)
  posenc::AxialRotaryEmbedding split(
      posenc::AxialRotaryEmbeddingOptions({4, 6, 8}).pairing(posenc::RotaryPairing::kHalfSplit));
  const auto first = x.narrow(3, 0, 9);
  const auto second = x.narrow(3, 9, 9);
  EXPECT_LE((split(x, ids) - torch::cat({first * c - second * s, first * s + second * c, x.narrow(3, 18, 2)}, 3))
                .abs()
                .max()
                .item<double>(),
            1e-14);
}

TEST_F(Vision, AxialRotaryErrors) {
  EXPECT_POSENC_ERROR(posenc::AxialRotaryEmbedding(posenc::AxialRotaryEmbeddingOptions({16, 5})),
                      "AxialRotaryEmbedding: every axes_dim must be even and >= 2 (each axis "
                      "rotates pairs of channels) and within posenc's limit of 2^28 channels, but axes_dim[1] = 5");
  EXPECT_POSENC_ERROR(posenc::AxialRotaryEmbedding(posenc::AxialRotaryEmbeddingOptions({})),
                      "axes_dim must name the rotated width of each axis");
  EXPECT_POSENC_ERROR(
      posenc::AxialRotaryEmbedding(posenc::AxialRotaryEmbeddingOptions({4}).theta(-1)),
      "AxialRotaryEmbedding: theta must be finite and >= 5.2e-290");
  posenc::AxialRotaryEmbedding rope(posenc::AxialRotaryEmbeddingOptions({4, 4}));
  const auto x = torch::randn({1, 3, 2, 8});
  EXPECT_POSENC_ERROR(rope(x, torch::zeros({2, 2})),
                      "AxialRotaryEmbedding: ids must hold one row per token, [L, 2] with L = 3, "
                      "but got shape [2, 2]");
  EXPECT_POSENC_ERROR(rope(x.view({3, 2, 8}), torch::zeros({3, 2})),
                      "expected a 4-D query or key tensor of shape [B, L, H, Dh] (heads_first=false)");
  EXPECT_POSENC_ERROR(rope(x, torch::tensor({{0.0, 1.0}, {std::nan(""), 0.0}, {1.0, 1.0}})),
                      "AxialRotaryEmbedding: ids must be finite, but got NaN or infinite coordinates");
  EXPECT_POSENC_ERROR(rope(torch::randn({1, 3, 2, 6}), torch::zeros({3, 2})),
                      "is smaller than the rotated width 8");
  EXPECT_POSENC_ERROR(posenc::ops::axial_rotary_tables(torch::zeros({3, 2}), {4, 4, 4}),
                      "posenc::axial_rotary_tables: ids must be [N, 3] (one coordinate per token "
                      "and axis of axes_dim), but got shape [3, 2]");
  EXPECT_POSENC_ERROR(posenc::ops::axial_rotary_tables(torch::zeros({3, 1}, torch::kBool), {4}),
                      "ids must be a real or integer tensor, but got Bool");
  EXPECT_POSENC_ERROR(posenc::ops::axial_rotary_tables(torch::zeros({3, 1}), {4}, 10000.0, torch::kLong),
                      "posenc::axial_rotary_tables: dtype must be");
}

// Resampling a ViT position table: the prefix rows are kept, the grid goes through ATen's 2-D
// interpolation (identical to torch.nn.functional.interpolate on the [1, D, H, W] image).
TEST_F(Vision, ResamplePositionTableInterpolatesTheGridAndKeepsThePrefix) {
  const auto table = torch::randn({1, 2 + 4 * 6, 8});
  const auto grid = table.narrow(1, 2, 24).reshape({1, 4, 6, 8}).permute({0, 3, 1, 2});
  for (const bool antialias : {true, false}) {
    const auto out = F::resample_position_table(
        table, posenc::ResamplePositionTableOptions({3, 9}).old_size({4, 6}).num_prefix_tokens(2).antialias(antialias));
    ASSERT_EQ(out.sizes(), (std::vector<int64_t>{1, 2 + 27, 8}));
    EXPECT_TRUE(torch::equal(out.narrow(1, 0, 2), table.narrow(1, 0, 2)));
    const auto expected = torch::nn::functional::interpolate(
        grid, torch::nn::functional::InterpolateFuncOptions()
                  .size(std::vector<int64_t>{3, 9})
                  .mode(torch::kBicubic)
                  .align_corners(false)
                  .antialias(antialias));
    EXPECT_TRUE(torch::equal(out.narrow(1, 2, 27), expected.permute({0, 2, 3, 1}).reshape({1, 27, 8})))
        << "antialias=" << antialias;
  }
  // a square grid by default, [N, D] tables, the same size: an unchanged copy
  const auto square = torch::randn({1 + 16, 4}, torch::kDouble);
  const auto same = F::resample_position_table(square, posenc::ResamplePositionTableOptions({4}));
  EXPECT_TRUE(torch::equal(same, square));
  EXPECT_FALSE(same.is_same(square));
  // a constant grid stays constant under every interpolation
  const auto flat = torch::cat({torch::zeros({1, 1, 3}), torch::full({1, 25, 3}, 0.25)}, 1);
  for (const auto mode : {posenc::Interpolation::kBicubic, posenc::Interpolation::kBilinear,
                          posenc::Interpolation::kNearest}) {
    const auto out = F::resample_position_table(
        flat, posenc::ResamplePositionTableOptions({7, 3}).interpolation(mode).antialias(
                  mode != posenc::Interpolation::kNearest));
    EXPECT_LE((out.narrow(1, 1, 21) - 0.25).abs().max().item<double>(), 1e-6) << mode;
  }
  // differentiable: a learned table can be resampled inside a training step
  const auto learned = torch::randn({1, 1 + 9, 4}, torch::requires_grad());
  F::resample_position_table(learned, posenc::ResamplePositionTableOptions({5, 5})).sum().backward();
  ASSERT_TRUE(learned.grad().defined());
  EXPECT_TRUE(torch::equal(learned.grad()[0][0], torch::ones({4})));
}

TEST_F(Vision, ResamplePositionTableErrors) {
  const auto table = torch::randn({1, 11, 4});
  EXPECT_POSENC_ERROR(F::resample_position_table(table, posenc::ResamplePositionTableOptions({4})),
                      "resample_position_table: the table's 10 grid rows (N - num_prefix_tokens = "
                      "11 - 1) are not a square grid; pass old_size {H, W}");
  EXPECT_POSENC_ERROR(
      F::resample_position_table(table, posenc::ResamplePositionTableOptions({4}).old_size({3, 3})),
      "old_size must be {H, W} with H * W = N - num_prefix_tokens = 10, but got [3, 3]");
  EXPECT_POSENC_ERROR(
      F::resample_position_table(table, posenc::ResamplePositionTableOptions({0, 4}).old_size({2, 5})),
      "new_size must be {H, W} (or {S} for a square grid) of sizes >= 1, but got [0, 4]");
  EXPECT_POSENC_ERROR(
      F::resample_position_table(table, posenc::ResamplePositionTableOptions({4}).num_prefix_tokens(12)),
      "num_prefix_tokens must lie in [0, N] = [0, 11], but got 12");
  EXPECT_POSENC_ERROR(
      F::resample_position_table(table, posenc::ResamplePositionTableOptions({4})
                                            .old_size({2, 5})
                                            .interpolation(posenc::Interpolation::kNearest)),
      "antialias applies to bicubic and bilinear interpolation only");
  EXPECT_POSENC_ERROR(
      F::resample_position_table(torch::randn({2, 10, 4}), posenc::ResamplePositionTableOptions({3})),
      "posemb must be a position table [1, N, D] or [N, D], but got shape [2, 10, 4]");
  EXPECT_POSENC_ERROR(
      F::resample_position_table(torch::ones({1, 10, 4}, torch::kLong),
                                 posenc::ResamplePositionTableOptions({3}).num_prefix_tokens(1)),
      "posemb's dtype must be float16, bfloat16, float32 or float64, but got Long");
  EXPECT_POSENC_ERROR(posenc::ops::resample_position_table(table, {4}, {2, 5}, 1, "area"),
                      "interpolation must be \"bicubic\", \"bilinear\" or \"nearest\", but got \"area\"");
  EXPECT_POSENC_ERROR(
      F::resample_position_table(table, posenc::ResamplePositionTableOptions({1 << 20, 1 << 20}).old_size({2, 5})),
      "is over posenc's limit of 2^28 elements");
}


// diffusers' get_3d_sincos_pos_embed: a quarter of the columns encode the frame, the rest the
// column then the row coordinate; spatial_size is {W, H}. Against std::sin/std::cos in float64.
TEST_F(Vision, Sincos3dTableFollowsDiffusersLayout) {
  const int64_t dim = 32;
  const int64_t width = 5;
  const int64_t height = 3;
  const int64_t frames = 4;
  const auto ours = F::sincos_3d_table(posenc::Sincos3dTableOptions(dim, {width, height}, frames)
                                           .spatial_interpolation_scale(1.5)
                                           .temporal_interpolation_scale(2.0));
  ASSERT_EQ(ours.sizes(), (std::vector<int64_t>{frames, height * width, dim}));
  ASSERT_EQ(ours.scalar_type(), torch::kFloat);
  // [sin | cos] of `bands` frequencies 10000^(-k / bands) of a coordinate, at `first`
  const auto expect_sincos = [&](const torch::Tensor& row, int64_t first, int64_t bands, double coordinate) {
    for (int64_t k = 0; k < bands; ++k) {
      const double angle = coordinate * std::pow(10000.0, -static_cast<double>(k) / static_cast<double>(bands));
      EXPECT_NEAR(row[first + k].item<double>(), std::sin(angle), std::ldexp(1.0, -24));
      EXPECT_NEAR(row[first + bands + k].item<double>(), std::cos(angle), std::ldexp(1.0, -24));
    }
  };
  for (int64_t t = 0; t < frames; ++t) {
    for (int64_t i = 0; i < height; ++i) {
      for (int64_t j = 0; j < width; ++j) {
        const auto row = ours[t][i * width + j];
        expect_sincos(row, 0, dim / 8, static_cast<double>(t) / 2.0);
        expect_sincos(row, dim / 4, 3 * dim / 16, static_cast<double>(j) / 1.5);
        expect_sincos(row, dim / 4 + 3 * dim / 8, 3 * dim / 16, static_cast<double>(i) / 1.5);
      }
    }
  }
  // one value: a square grid; float64 rounds to the float32 table
  const auto square = F::sincos_3d_table(posenc::Sincos3dTableOptions(16, {4}, 2));
  EXPECT_EQ(square.sizes(), (std::vector<int64_t>{2, 16, 16}));
  EXPECT_TRUE(torch::equal(
      posenc::ops::sincos_3d_table(16, {4, 4}, 2, 1.0, 1.0, torch::kDouble).to(torch::kFloat), square));
  EXPECT_POSENC_ERROR(F::sincos_3d_table(posenc::Sincos3dTableOptions(24, {4}, 2)),
                      "sincos_3d_table: embed_dim must be a positive multiple of 16");
  EXPECT_POSENC_ERROR(F::sincos_3d_table(posenc::Sincos3dTableOptions(16, {4}, 0)),
                      "temporal_size must be in [1, 2^28], but got 0");
  EXPECT_POSENC_ERROR(
      F::sincos_3d_table(posenc::Sincos3dTableOptions(16, {4}, 2).spatial_interpolation_scale(0)),
      "spatial_interpolation_scale must be finite and > 0, but got 0");
  EXPECT_POSENC_ERROR(F::sincos_3d_table(posenc::Sincos3dTableOptions(16, {4, 4, 4}, 2)),
                      "spatial_size must be [H, W]");
}

// SD3's cropped_pos_embed: the centre of the grid (floor for odd margins), prefix rows kept.
TEST_F(Vision, CropPositionTableTakesTheCentreOfTheGrid) {
  const auto table = F::sincos_2d_table(posenc::Sincos2dTableOptions(16, {8}));  // [64, 16]
  const auto crop = F::crop_position_table(table.unsqueeze(0), posenc::CropPositionTableOptions({3, 6}));
  ASSERT_EQ(crop.sizes(), (std::vector<int64_t>{1, 18, 16}));
  // top = (8 - 3) / 2 = 2, left = (8 - 6) / 2 = 1
  EXPECT_TRUE(torch::equal(crop[0].view({3, 6, 16}), table.view({8, 8, 16}).slice(0, 2, 5).slice(1, 1, 7)));
  EXPECT_TRUE(torch::equal(F::crop_position_table(table, posenc::CropPositionTableOptions({8})), table));
  const auto learned = torch::randn({2 + 4 * 6, 8}, torch::requires_grad());
  const auto kept = F::crop_position_table(
      learned, posenc::CropPositionTableOptions({2, 3}).old_size({4, 6}).num_prefix_tokens(2));
  ASSERT_EQ(kept.sizes(), (std::vector<int64_t>{2 + 6, 8}));
  EXPECT_TRUE(torch::equal(kept.narrow(0, 0, 2), learned.narrow(0, 0, 2)));
  EXPECT_TRUE(torch::equal(kept.narrow(0, 2, 6).view({2, 3, 8}),
                           learned.narrow(0, 2, 24).view({4, 6, 8}).slice(0, 1, 3).slice(1, 1, 4)));
  kept.sum().backward();  // differentiable: the kept rows get gradient 1, the rest 0
  EXPECT_EQ(learned.grad().sum().item<double>(), 8.0 * 8.0);
  EXPECT_POSENC_ERROR(F::crop_position_table(table, posenc::CropPositionTableOptions({9, 2})),
                      "crop_position_table: new_size must hold sizes >= 1 within the table's grid "
                      "[8, 8], but got [9, 2]; a crop cannot add positions");
  EXPECT_POSENC_ERROR(F::crop_position_table(table.narrow(0, 0, 60), posenc::CropPositionTableOptions({2})),
                      "are not a square grid; pass old_size {H, W}");
  EXPECT_POSENC_ERROR(F::crop_position_table(table, posenc::CropPositionTableOptions({0, 2})),
                      "new_size must hold sizes >= 1 within the table's grid [8, 8], but got [0, 2]");
}

// timm's RotaryEmbeddingCat(in_pixels=False) (EVA-02): axial RoPE of (row, column) grid
// coordinates, rescaled to the pretraining grid; prefix tokens unrotated.
TEST_F(Vision, VisionRotaryEmbeddingRotatesThePatchesByTheirGridCoordinates) {
  posenc::VisionRotaryEmbedding rope(posenc::VisionRotaryEmbeddingOptions(16).ref_feat_shape({4, 4}));
  EXPECT_EQ(printed(*rope), "posenc::VisionRotaryEmbedding(dim=16, ref_feat_shape=[4, 4])");
  // a 2 x 3 grid rescaled to 4 x 4: rows i * 4 / 2, columns j * 4 / 3
  std::vector<double> ids;
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      ids.push_back(static_cast<double>(i) * 2.0);
      ids.push_back(static_cast<double>(j) / 3.0 * 4.0);
    }
  }
  const auto coordinates = torch::tensor(ids, torch::kDouble).view({6, 2});
  const auto expected = F::axial_rotary_tables(coordinates, posenc::AxialRotaryEmbeddingOptions({8, 8}), torch::kDouble);
  const auto tables = rope->tables({2, 3}, torch::kDouble);
  EXPECT_LE((std::get<0>(tables) - std::get<0>(expected)).abs().max().item<double>(), 1e-15);
  EXPECT_LE((std::get<1>(tables) - std::get<1>(expected)).abs().max().item<double>(), 1e-15);
  // EVA's attention layout [B, heads, 1 + h * w, Dh]: the class token passes, channels past dim too
  const auto q = torch::randn({2, 3, 1 + 6, 20}, torch::kDouble);
  const auto y = rope->forward(q, {2, 3});
  EXPECT_TRUE(torch::equal(y.narrow(2, 0, 1), q.narrow(2, 0, 1)));
  const auto rotated = posenc::ops::apply_rotary(q.narrow(2, 1, 6), std::get<0>(tables), std::get<1>(tables), 0,
                                                 c10::nullopt, /*interleaved=*/true, /*heads_first=*/true);
  EXPECT_TRUE(torch::equal(y.narrow(2, 1, 6), rotated));
  EXPECT_TRUE(torch::equal(y.narrow(3, 16, 4), q.narrow(3, 16, 4)));
  // xy swaps the two coordinates: the column's frequencies first
  posenc::VisionRotaryEmbedding xy(posenc::VisionRotaryEmbeddingOptions(16)
                                       .ref_feat_shape({4, 4})
                                       .grid_indexing(posenc::GridIndexing::kXY)
                                       .num_prefix_tokens(0)
                                       .heads_first(false)
                                       .pairing(posenc::RotaryPairing::kHalfSplit));
  EXPECT_EQ(printed(*xy),
            "posenc::VisionRotaryEmbedding(dim=16, ref_feat_shape=[4, 4], grid_indexing=xy, "
            "pairing=half_split, num_prefix_tokens=0, heads_first=false)");
  const auto swapped = xy->tables({2, 3}, torch::kDouble);
  EXPECT_TRUE(torch::equal(std::get<0>(swapped).narrow(1, 0, 4), std::get<0>(tables).narrow(1, 4, 4)));
  EXPECT_TRUE(torch::equal(std::get<1>(swapped).narrow(1, 4, 4), std::get<1>(tables).narrow(1, 0, 4)));
  const auto x = torch::randn({2, 6, 3, 16});
  EXPECT_TRUE(torch::equal(xy->forward(x, {2, 3}),
                           posenc::ops::apply_rotary(x, std::get<0>(xy->tables({2, 3})), std::get<1>(xy->tables({2, 3})),
                                                     0, c10::nullopt, /*interleaved=*/false, /*heads_first=*/false)));
  // without ref_feat_shape and with an offset: coordinates i + offset, j + offset
  const auto plain = F::grid_rotary_tables({2, 2}, posenc::VisionRotaryEmbeddingOptions(4).grid_offset(0.5), torch::kDouble);
  const auto offsets = torch::tensor({0.5, 0.5, 0.5, 1.5, 1.5, 0.5, 1.5, 1.5}, torch::kDouble).view({4, 2});
  EXPECT_TRUE(torch::allclose(std::get<0>(plain), torch::cos(offsets), 0, 1e-15));
}

TEST_F(Vision, VisionRotaryEmbeddingErrors) {
  EXPECT_POSENC_ERROR(posenc::VisionRotaryEmbedding(posenc::VisionRotaryEmbeddingOptions(18)),
                      "VisionRotaryEmbedding: dim must be a positive multiple of 4");
  EXPECT_POSENC_ERROR(posenc::VisionRotaryEmbedding(posenc::VisionRotaryEmbeddingOptions(16).ref_feat_shape({4})),
                      "ref_feat_shape must be empty or the pretraining grid [H, W] of sizes >= 1, but got [4]");
  EXPECT_POSENC_ERROR(posenc::VisionRotaryEmbedding(posenc::VisionRotaryEmbeddingOptions(16).num_prefix_tokens(-1)),
                      "num_prefix_tokens must be in [0, 2^28]");
  EXPECT_POSENC_ERROR(
      posenc::VisionRotaryEmbedding(posenc::VisionRotaryEmbeddingOptions(16).grid_offset(std::nan(""))),
      "grid_offset must be finite");
  posenc::VisionRotaryEmbedding rope(posenc::VisionRotaryEmbeddingOptions(16));
  EXPECT_POSENC_ERROR(rope->forward(torch::randn({1, 2, 7, 16}), {2, 2}),
                      "VisionRotaryEmbedding: expected 1 prefix tokens + 2 x 2 = 5 tokens along dimension 2, "
                      "but got 7");
  EXPECT_POSENC_ERROR(rope->forward(torch::randn({1, 2, 5, 12}), {2, 2}), "the head width 12 is smaller than the rotated width dim = 16");
  EXPECT_POSENC_ERROR(rope->forward(torch::randn({1, 2, 5, 16}), {4}), "feat_shape must be the patch grid [H, W]");
  EXPECT_POSENC_ERROR(rope->forward(torch::randn({2, 5, 16}), {2, 2}), "expected a 4-D query or key tensor");
  EXPECT_POSENC_ERROR(posenc::ops::grid_ids({2, 2}, {}, 0.0, "yx"),
                      "posenc::grid_ids: grid_indexing must be \"ij\" (row, column) or \"xy\"");
  EXPECT_POSENC_ERROR(F::grid_rotary_tables({2, 2}, posenc::VisionRotaryEmbeddingOptions(6)),
                      "grid_rotary_tables: dim must be a positive multiple of 4");
}
