// posenc::to_torchscript of the vision and diffusion modules (Timesteps, TimestepEmbedder,
// AxialRotaryEmbedding, VisionRotaryEmbedding): the exported methods give the C++ modules'
// results (bit for bit, or within the stated last-bit tolerances), survive save + torch::jit::load,
// and raise the modules' error messages. (In plain PyTorch and against diffusers and timm:
// test/python/test_export.py.)

#include <posenc/export.h>
#include <posenc/posenc.h>

#include "test_util.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/torch.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace {

using posenc_test::any_error;
using posenc_test::printed;

class VisionExport : public posenc_test::SeededTest {};

// The module's message (which must exist) is part of the export's.
void expect_same_error(const std::string& module_error, const std::string& exported_error) {
  EXPECT_NE(module_error, "<no error>");
  EXPECT_NE(exported_error.find(module_error), std::string::npos)
      << "the module raised\n  " << module_error << "\nthe export\n  " << exported_error;
}

double max_abs_difference(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  EXPECT_EQ(a.scalar_type(), b.scalar_type());
  return a.numel() == 0 ? 0.0
                        : (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// Tables of cos/sin: the export's float64 angles are the module's bit for bit, but its cos/sin are
// PyTorch's (SLEEF-vectorized, within 1 ulp) and the module's the C library's: they may differ by
// one float64 ulp (<= 2^-53 for |value| <= 1, twice that allowed), which can move the float32
// rounding by one float32 ulp (<= 2^-24 for |value| <= 1).
double table_tolerance(torch::ScalarType dtype) {
  return dtype == torch::kDouble ? std::ldexp(1.0, -52) : std::ldexp(1.0, -24);
}

// Rotated outputs: a * c - b * s with c and s each off by the table tolerance t changes the exact
// result by <= (|a| + |b|) t <= 2 max|x| t, and the rounding of the result by one ulp of its
// magnitude (<= 2 max|x| u): bound 2 max|x| (t + u), u = 2^-24 (float32) or 2^-53 (float64).
double rotation_tolerance(const torch::Tensor& x) {
  const double largest = x.abs().max().item<double>();
  const bool dbl = x.scalar_type() == torch::kDouble;
  const double ulp = dbl ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  return 2.0 * largest * (table_tolerance(x.scalar_type()) + ulp);
}

std::tuple<torch::Tensor, torch::Tensor> tables_of(const torch::IValue& value) {
  const auto tuple = value.toTuple();
  return {tuple->elements()[0].toTensor(), tuple->elements()[1].toTensor()};
}

torch::jit::Module saved_and_loaded(const torch::jit::Module& exported, const std::string& name) {
  const std::string path = testing::TempDir() + name + "_" + std::to_string(::getpid()) + ".pt";
  exported.save(path);
  auto loaded = torch::jit::load(path);
  std::remove(path.c_str());
  return loaded;
}

// ---- Timesteps ----------------------------------------------------------------------------------

TEST_F(VisionExport, TimestepsEqualTheModuleBitForBit) {
  // default options, and every option changed (an odd width: the zero column)
  for (const auto& options :
       {posenc::TimestepEmbeddingOptions(64), posenc::TimestepEmbeddingOptions(129)
                                                  .flip_sin_to_cos(true)
                                                  .downscale_freq_shift(0.5)
                                                  .scale(2.5)
                                                  .max_period(500)}) {
    posenc::Timesteps module(options);
    auto exported = posenc::to_torchscript(module);
    EXPECT_EQ(exported.attr("embedding_dim").toInt(), options.embedding_dim());
    EXPECT_TRUE(exported.named_buffers().size() == 0 && exported.named_parameters().size() == 0);
    for (const auto& t : {torch::tensor({0.0, 0.5, 1.0, 250.25, 999.0}),
                          torch::tensor({0.0, 1e-3, 123.456}, torch::kDouble),
                          torch::arange(0, 1000, 37), torch::arange(0, 1000, 111).to(torch::kInt),
                          torch::tensor({3.0, 999.5}).to(torch::kHalf), torch::empty({0})}) {
      const auto expected = module(t);
      const auto got = exported.forward({t}).toTensor();
      EXPECT_EQ(got.scalar_type(), torch::kFloat);
      EXPECT_TRUE(torch::equal(got, expected)) << printed(*module) << " " << t.scalar_type();
    }
  }
}

TEST_F(VisionExport, TimestepsRaiseTheModulesErrors) {
  posenc::Timesteps module(posenc::TimestepEmbeddingOptions(8).scale(1e300));
  auto exported = posenc::to_torchscript(module);
  for (const auto& t : {torch::zeros({2, 3}), torch::zeros({3}, torch::kBool),
                        torch::tensor({1.0, std::nan("")}), torch::tensor({1.0e10})}) {
    expect_same_error(any_error([&] { module(t); }), any_error([&] { exported.forward({t}); }));
  }
  // over 2^28 elements: (2^18 + 1) timesteps * 1024
  posenc::Timesteps wide(posenc::TimestepEmbeddingOptions(1024));
  auto exported_wide = posenc::to_torchscript(wide);
  const auto many = torch::zeros({(int64_t{1} << 18) + 1});
  expect_same_error(any_error([&] { wide(many); }),
                    any_error([&] { exported_wide.forward({many}); }));
  EXPECT_NE(any_error([&] {
              exported.forward({torch::zeros({2, 3})});
            })
                .find("Timesteps: timesteps must be a 1-D tensor [N] (one timestep per batch "
                      "element), but got shape [2, 3]"),
            std::string::npos);
}

// ---- DiT's TimestepEmbedder --------------------------------------------------------------------

TEST_F(VisionExport, TimestepEmbedderHoldsTheMlpAndMatchesTheModule) {
  posenc::TimestepEmbedder module(
      posenc::TimestepEmbedderOptions(24).frequency_embedding_size(17).max_period(1000));
  auto exported = posenc::to_torchscript(module);
  // the state dict of the C++ module (DiT's names), the same values
  std::map<std::string, torch::Tensor> ours;
  for (const auto& parameter : exported.named_parameters()) {
    ours[parameter.name] = parameter.value;
  }
  const auto theirs = module->named_parameters();
  ASSERT_EQ(ours.size(), theirs.size());
  for (const auto& parameter : theirs) {
    ASSERT_EQ(ours.count(parameter.key()), 1U) << parameter.key();
    EXPECT_TRUE(torch::equal(ours[parameter.key()], parameter.value())) << parameter.key();
  }
  const auto t = torch::tensor({0.0, 1.0, 250.5, 999.0});
  // The frequency embedding (cos first, no shift) bit for bit ...
  const auto frequencies = posenc::functional::timestep_embedding(
      t,
      posenc::TimestepEmbeddingOptions(17).flip_sin_to_cos(true).downscale_freq_shift(0).max_period(
          1000));
  EXPECT_TRUE(torch::equal(exported.run_method("_timestep_embedding", t).toTensor(), frequencies));
  // ... then Linear (the same addmm), SiLU as x * sigmoid(x) where the module calls aten::silu:
  // each hidden value within 2 float32 ulps (relative 2^-22), summed by the second Linear:
  // |difference| <= sum_j |W2_ij| |h_j| 2^-22, plus one ulp of the output.
  const auto& first = module->mlp->ptr<torch::nn::LinearImpl>(0);
  const auto& second = module->mlp->ptr<torch::nn::LinearImpl>(2);
  const auto hidden = torch::silu(first->forward(frequencies));
  const auto expected = module(t);
  const double bound =
      (hidden.abs().matmul(second->weight.abs().t()) * std::ldexp(1.0, -22)).max().item<double>() +
      expected.abs().max().item<double>() * std::ldexp(1.0, -23);
  const auto got = exported.forward({t}).toTensor();
  EXPECT_EQ(got.sizes(), (std::vector<int64_t>{4, 24}));
  EXPECT_LE(max_abs_difference(got, expected), bound);
  // (and the bound is tight enough to mean something: far below the outputs' scale)
  EXPECT_LT(bound, 1e-5);
  // float64 parameters (a module moved with .to(double)) give float64 outputs, as in C++
  exported.to(torch::kDouble);
  module->to(torch::kDouble);
  EXPECT_LE(max_abs_difference(exported.forward({t}).toTensor(), module(t)), 1e-14);
}

TEST_F(VisionExport, TimestepEmbedderRaisesTheModulesErrors) {
  posenc::TimestepEmbedder module(posenc::TimestepEmbedderOptions(8).frequency_embedding_size(6));
  auto exported = posenc::to_torchscript(module);
  for (const auto& t : {torch::zeros({3}, torch::TensorOptions().device(torch::kMeta)),
                        torch::zeros({2, 2}), torch::zeros({2}, torch::kBool)}) {
    expect_same_error(any_error([&] { module(t); }), any_error([&] { exported.forward({t}); }));
  }
}

// ---- AxialRotaryEmbedding ----------------------------------------------------------------------

TEST_F(VisionExport, AxialRotaryEmbeddingMatchesTheModule) {
  const std::vector<posenc::AxialRotaryEmbeddingOptions> configs = {
      posenc::AxialRotaryEmbeddingOptions({4, 6, 2}),
      posenc::AxialRotaryEmbeddingOptions({4, 6, 2})
          .theta(500.0)
          .pairing(posenc::RotaryPairing::kHalfSplit)
          .heads_first(true),
  };
  for (const auto& options : configs) {
    posenc::AxialRotaryEmbedding module(options);
    auto exported = posenc::to_torchscript(module);
    const int64_t length = 5;
    // fractional, negative and large coordinates; integer ones
    const auto fractional = torch::tensor({0.0, 0.0, 0.0, 0.5, -1.0, 2.25, 3.0, 4.0, 5.0, 100.75,
                                           -7.5, 0.125, 1e3, 2.0, 3.0},
                                          torch::kDouble)
                                .view({length, 3});
    const auto integer = torch::randint(-20, 64, {length, 3}, torch::kLong);
    for (const auto& ids :
         {fractional, integer, integer.to(torch::kInt), fractional.to(torch::kFloat)}) {
      for (const auto dtype : {torch::kFloat, torch::kDouble}) {
        const auto expected = module->tables(ids, dtype);
        const auto got = tables_of(exported.run_method("tables", ids, dtype));
        EXPECT_LE(max_abs_difference(std::get<0>(got), std::get<0>(expected)),
                  table_tolerance(dtype));
        EXPECT_LE(max_abs_difference(std::get<1>(got), std::get<1>(expected)),
                  table_tolerance(dtype));
      }
      // the default dtype: float32
      EXPECT_EQ(std::get<0>(tables_of(exported.run_method("tables", ids))).scalar_type(),
                torch::kFloat);
      // channels past sum(axes_dim) = 12 pass through
      const auto x = options.heads_first() ? torch::randn({2, 3, length, 16})
                                           : torch::randn({2, length, 3, 16});
      for (const auto& input : {x, x.to(torch::kDouble)}) {
        const auto expected = module(input, ids);
        const auto got = exported.forward({input, ids}).toTensor();
        EXPECT_LE(max_abs_difference(got, expected), rotation_tolerance(input));
        EXPECT_TRUE(torch::equal(got.narrow(3, 12, 4), input.narrow(3, 12, 4)));
      }
    }
  }
}

TEST_F(VisionExport, AxialRotaryEmbeddingRaisesTheModulesErrors) {
  posenc::AxialRotaryEmbedding module(posenc::AxialRotaryEmbeddingOptions({4, 6, 2}));
  auto exported = posenc::to_torchscript(module);
  const auto x = torch::randn({1, 5, 2, 16});
  const auto ids = torch::zeros({5, 3});
  const std::vector<std::pair<torch::Tensor, torch::Tensor>> calls = {
      {torch::randn({5, 2, 16}), ids},         // a 3-D input
      {x, torch::zeros({4, 3})},               // one row per token
      {x, torch::zeros({5, 2})},               // one column per axis
      {x, torch::zeros({5, 3}, torch::kBool)}, // not a real or integer tensor
      {x, torch::full({5, 3}, std::numeric_limits<double>::infinity())},
      {x, torch::zeros({5, 3}, torch::TensorOptions().device(torch::kMeta))},
      {x.to(torch::kLong), ids},         // not a floating input
      {torch::randn({1, 5, 2, 8}), ids}, // narrower than 12
  };
  for (const auto& call : calls) {
    expect_same_error(any_error([&] { module(call.first, call.second); }), any_error([&] {
                        exported.forward({call.first, call.second});
                      }));
  }
  expect_same_error(any_error([&] { module->tables(ids, torch::kLong); }),
                    any_error([&] { exported.run_method("tables", ids, torch::kLong); }));
}

// ---- VisionRotaryEmbedding ---------------------------------------------------------------------

TEST_F(VisionExport, VisionRotaryEmbeddingMatchesTheModule) {
  const std::vector<posenc::VisionRotaryEmbeddingOptions> configs = {
      posenc::VisionRotaryEmbeddingOptions(8),
      posenc::VisionRotaryEmbeddingOptions(16)
          .ref_feat_shape({4, 4})
          .grid_offset(0.5)
          .grid_indexing(posenc::GridIndexing::kXY)
          .pairing(posenc::RotaryPairing::kHalfSplit)
          .num_prefix_tokens(2)
          .heads_first(false),
      posenc::VisionRotaryEmbeddingOptions(12)
          .temperature(100.0)
          .ref_feat_shape({7, 3})
          .num_prefix_tokens(0),
  };
  for (const auto& options : configs) {
    posenc::VisionRotaryEmbedding module(options);
    auto exported = posenc::to_torchscript(module);
    for (const std::vector<int64_t>& grid :
         {std::vector<int64_t>{2, 3}, std::vector<int64_t>{5, 5}, std::vector<int64_t>{1, 7}}) {
      // the coordinates: posenc's grid_ids bit for bit
      const auto ids =
          exported.run_method("_grid_ids", grid, torch::Device(torch::kCPU)).toTensor();
      EXPECT_TRUE(torch::equal(
          ids, posenc::ops::grid_ids(grid, options.ref_feat_shape(), options.grid_offset(),
                                     posenc::grid_indexing_name(options.grid_indexing()))));
      for (const auto dtype : {torch::kFloat, torch::kDouble}) {
        const auto expected = module->tables(grid, dtype);
        const auto got = tables_of(exported.run_method("tables", grid, dtype));
        EXPECT_LE(max_abs_difference(std::get<0>(got), std::get<0>(expected)),
                  table_tolerance(dtype));
        EXPECT_LE(max_abs_difference(std::get<1>(got), std::get<1>(expected)),
                  table_tolerance(dtype));
      }
      const auto default_tables = tables_of(exported.run_method("tables", grid));
      EXPECT_EQ(std::get<0>(default_tables).scalar_type(), torch::kFloat);
      EXPECT_EQ(std::get<0>(default_tables).device(), torch::Device(torch::kCPU));
      const int64_t tokens = options.num_prefix_tokens() + grid[0] * grid[1];
      const int64_t length_dim = options.heads_first() ? 2 : 1;
      const auto x = options.heads_first() ? torch::randn({2, 3, tokens, options.dim() + 4})
                                           : torch::randn({2, tokens, 3, options.dim() + 4});
      for (const auto& input : {x, x.to(torch::kDouble)}) {
        const auto expected = module->forward(input, grid);
        const auto got = exported.forward({input, grid}).toTensor();
        EXPECT_LE(max_abs_difference(got, expected), rotation_tolerance(input));
        // the prefix tokens and the channels past dim pass through
        EXPECT_TRUE(torch::equal(got.narrow(length_dim, 0, options.num_prefix_tokens()),
                                 input.narrow(length_dim, 0, options.num_prefix_tokens())));
        EXPECT_TRUE(
            torch::equal(got.narrow(3, options.dim(), 4), input.narrow(3, options.dim(), 4)));
      }
    }
  }
}

TEST_F(VisionExport, VisionRotaryEmbeddingRaisesTheModulesErrors) {
  posenc::VisionRotaryEmbedding module(posenc::VisionRotaryEmbeddingOptions(16));
  auto exported = posenc::to_torchscript(module);
  const std::vector<std::pair<torch::Tensor, std::vector<int64_t>>> calls = {
      {torch::randn({1, 2, 7, 16}), {2, 2}},                  // 1 + 4 tokens expected
      {torch::randn({1, 2, 5, 12}), {2, 2}},                  // narrower than dim
      {torch::randn({1, 2, 5, 16}), {4}},                     // not [H, W]
      {torch::randn({1, 2, 5, 16}), {0, 2}},                  // sizes >= 1
      {torch::randn({2, 5, 16}), {2, 2}},                     // a 3-D input
      {torch::randn({1, 2, 5, 16}).to(torch::kLong), {2, 2}}, // not a floating input
  };
  for (const auto& call : calls) {
    expect_same_error(any_error([&] { module->forward(call.first, call.second); }), any_error([&] {
                        exported.forward({call.first, call.second});
                      }));
  }
  expect_same_error(any_error([&] { module->tables({3}); }),
                    any_error([&] { exported.run_method("tables", std::vector<int64_t>{3}); }));
  expect_same_error(any_error([&] {
                      module->tables({2, 2}, torch::kInt);
                    }),
                    any_error([&] {
                      exported.run_method("tables", std::vector<int64_t>{2, 2}, torch::kInt);
                    }));
  // heads_first=false names its layout
  posenc::VisionRotaryEmbedding tokens_first(
      posenc::VisionRotaryEmbeddingOptions(16).heads_first(false));
  auto exported_tokens_first = posenc::to_torchscript(tokens_first);
  const auto flat = torch::randn({5, 16});
  expect_same_error(any_error([&] {
                      tokens_first->forward(flat, {2, 2});
                    }),
                    any_error([&] {
                      exported_tokens_first.forward({flat, std::vector<int64_t>{2, 2}});
                    }));
}

// ---- save + torch::jit::load ------------------------------------------------------------------

TEST_F(VisionExport, SavedAndLoadedExportsGiveTheSameResults) {
  const auto t = torch::tensor({0.0, 10.0, 999.0});
  auto timesteps = posenc::to_torchscript(posenc::Timesteps(posenc::TimestepEmbeddingOptions(33)));
  EXPECT_TRUE(torch::equal(saved_and_loaded(timesteps, "timesteps").forward({t}).toTensor(),
                           timesteps.forward({t}).toTensor()));

  posenc::TimestepEmbedder embedder(
      posenc::TimestepEmbedderOptions(16).frequency_embedding_size(8));
  auto exported_embedder = posenc::to_torchscript(embedder);
  auto loaded_embedder = saved_and_loaded(exported_embedder, "embedder");
  EXPECT_TRUE(torch::equal(loaded_embedder.forward({t}).toTensor(),
                           exported_embedder.forward({t}).toTensor()));
  EXPECT_EQ(loaded_embedder.named_parameters().size(), 4U);

  auto axial = posenc::to_torchscript(
      posenc::AxialRotaryEmbedding(posenc::AxialRotaryEmbeddingOptions({4, 4}).heads_first(true)));
  const auto q = torch::randn({1, 2, 3, 8});
  const auto ids = torch::tensor({0, 0, 1, 2, 3, 4}).view({3, 2});
  EXPECT_TRUE(torch::equal(saved_and_loaded(axial, "axial").forward({q, ids}).toTensor(),
                           axial.forward({q, ids}).toTensor()));

  auto vision = posenc::to_torchscript(posenc::VisionRotaryEmbedding(
      posenc::VisionRotaryEmbeddingOptions(8).ref_feat_shape({2, 2}).grid_offset(0.25)));
  auto loaded_vision = saved_and_loaded(vision, "vision");
  const auto k = torch::randn({2, 2, 1 + 6, 8});
  const std::vector<int64_t> grid{3, 2};
  EXPECT_TRUE(torch::equal(loaded_vision.forward({k, grid}).toTensor(),
                           vision.forward({k, grid}).toTensor()));
  const auto loaded_tables = tables_of(loaded_vision.run_method("tables", grid, torch::kDouble));
  const auto tables = tables_of(vision.run_method("tables", grid, torch::kDouble));
  EXPECT_TRUE(torch::equal(std::get<1>(loaded_tables), std::get<1>(tables)));
}

} // namespace
