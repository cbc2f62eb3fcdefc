// The hand-written kernels against the composite (ATen) ones they replace: values on the four
// dtypes, both layouts, offsets, shared and per-sequence positions with padding, scaled and
// unscaled, contiguous and not; gradients; the in-place and out= variants; the fused token
// embedding with and without dropout.

#include <posenc/posenc.h>

#include "detail/sincos.h"
#include "detail/vision.h"
#include "ops/common/composite_kernels.h"
#include "ops/common/cpu_helpers.h"
#include "ops/rotary/composite_kernel.h"
#include "ops/sequence/composite_kernel.h"
#include "test_util.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace composite = posenc::ops::composite;
namespace F = posenc::functional;

namespace {

class Kernels : public posenc_test::SeededTest {};

const std::vector<torch::Dtype> kDtypes = {
    torch::kHalf, torch::kBFloat16, torch::kFloat, torch::kDouble};

// One unit in the last place of the output dtype at magnitude `m` (relative spacing 2^-(p-1)).
double ulp(torch::Dtype dtype, double m) {
  const int bits = dtype == torch::kHalf       ? 11
                   : dtype == torch::kBFloat16 ? 8
                   : dtype == torch::kFloat    ? 24
                                               : 53;
  return std::ldexp(std::max(m, 1.0), 1 - bits);
}

double max_abs_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// The positions cases: offset (undefined), shared [L], per sequence with padding.
std::vector<torch::Tensor> position_cases(int64_t batch,
                                          int64_t length,
                                          bool batch_first,
                                          int64_t max_len) {
  auto each = torch::randint(
      0,
      max_len,
      batch_first ? std::vector<int64_t>{batch, length} : std::vector<int64_t>{length, batch},
      torch::kLong);
  each.view({-1})[1] = -1;
  return {torch::Tensor(), torch::randint(0, max_len, {length}, torch::kLong), each};
}

} // namespace

TEST_F(Kernels, AddPositionTableMatchesComposite) {
  const auto table = F::sinusoidal_table(64, 24).unsqueeze(0);
  for (const auto dtype : kDtypes) {
    for (const bool batch_first : {true, false}) {
      for (const auto& positions : position_cases(3, 7, batch_first, 64)) {
        for (const double scale : {1.0, 2.5}) {
          const auto x =
              (batch_first ? torch::randn({3, 7, 24}) : torch::randn({7, 3, 24})).to(dtype);
          const int64_t offset = positions.defined() ? 0 : 50;
          const c10::optional<torch::Tensor> given =
              positions.defined() ? c10::optional<torch::Tensor>(positions) : c10::nullopt;
          const auto fused =
              posenc::ops::add_position_table(x, table, offset, batch_first, given, scale);
          const auto reference =
              composite::add_position_table(x, table, offset, batch_first, given, scale);
          ASSERT_EQ(fused.scalar_type(), dtype);
          // scale != 1 too: both round x * scale before the sum
          EXPECT_TRUE(torch::equal(fused, reference))
              << dtype << " batch_first=" << batch_first << " scale=" << scale;
        }
      }
    }
  }
}

TEST_F(Kernels, Float64TableAndNonContiguousInputs) {
  const auto table64 =
      F::sinusoidal_table(32, 8, F::SinusoidalTableFuncOptions().dtype(torch::kDouble));
  const auto x = torch::randn({2, 5, 8});
  EXPECT_TRUE(torch::equal(posenc::ops::add_position_table(x, table64, 3),
                           composite::add_position_table(x, table64, 3, true, c10::nullopt, 1.0)));
  // A transposed view takes the composite path and gives the contiguous input's result.
  const auto base = torch::randn({5, 2, 8});
  const auto view = base.transpose(0, 1);
  ASSERT_FALSE(view.is_contiguous());
  EXPECT_TRUE(torch::equal(posenc::ops::add_position_table(view, table64, 3),
                           posenc::ops::add_position_table(view.contiguous(), table64, 3)));
}

TEST_F(Kernels, ZeroSizedInputsGiveEmptyResults) {
  // Found by the fuzzer: a zero width once divided by zero when sizing the kernel's blocks.
  for (const auto& sizes : std::vector<std::vector<int64_t>>{{2, 3, 0}, {0, 3, 4}, {2, 0, 4}}) {
    const auto x = torch::randn(sizes);
    const auto table = torch::randn({5, sizes[2]});
    for (const bool batch_first : {true, false}) {
      const auto fused = posenc::ops::add_position_table(x, table, 1, batch_first);
      EXPECT_EQ(fused.sizes(), x.sizes());
      EXPECT_TRUE(torch::equal(
          fused, composite::add_position_table(x, table, 1, batch_first, c10::nullopt, 1.0)));
      auto copy = x.clone();
      posenc::ops::add_position_table_(copy, table, 1, batch_first, c10::nullopt, 2.0);
      EXPECT_EQ(copy.sizes(), x.sizes());
    }
  }
  const auto ids = torch::zeros({2, 3}, torch::kLong);
  const auto empty_rows = std::get<0>(posenc::ops::token_and_position_embedding(
      ids, torch::randn({4, 0}), torch::randn({5, 0}), 0, true, c10::nullopt, 1.0, -1, 0.0, false));
  EXPECT_EQ(empty_rows.sizes(), (std::vector<int64_t>{2, 3, 0}));
}

TEST_F(Kernels, IsBitIdenticalForAnyThreadCount) {
  const auto table = F::sinusoidal_table(4096, 64);
  const auto x = torch::randn({16, 512, 64});
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = posenc::ops::add_position_table(x, table, 100);
  at::set_num_threads(std::max(2, threads));
  const auto many = posenc::ops::add_position_table(x, table, 100);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(one, many));
}

TEST_F(Kernels, GradientsMatchAnAtenFormulation) {
  const auto positions = torch::tensor({{1, 4, -1}, {0, 0, 2}}, torch::kLong);
  for (const double scale : {1.0, 0.5}) {
    const auto x = torch::randn({2, 3, 5}, torch::requires_grad());
    const auto table = torch::randn({6, 5}, torch::requires_grad());
    const auto upstream = torch::randn({2, 3, 5});
    posenc::ops::add_position_table(x, table, 0, true, positions, scale).backward(upstream);
    const auto x2 = x.detach().clone().requires_grad_();
    const auto table2 = table.detach().clone().requires_grad_();
    const auto rows = table2.index_select(0, positions.clamp_min(0).view({-1})).view({2, 3, 5}) *
                      positions.ge(0).unsqueeze(-1);
    (x2 * scale + rows).backward(upstream);
    EXPECT_TRUE(torch::allclose(x.grad(), x2.grad(), 0, 1e-6));
    EXPECT_TRUE(torch::allclose(table.grad(), table2.grad(), 0, 1e-5));
  }
}

TEST_F(Kernels, InPlaceEqualsOutOfPlaceAndBumpsVersion) {
  const auto table = F::sinusoidal_table(32, 8);
  for (const auto dtype : kDtypes) {
    auto x = torch::randn({3, 4, 8}).to(dtype);
    const auto expected = posenc::ops::add_position_table(x, table, 9, true, c10::nullopt, 1.0);
    const auto version = x._version();
    auto& result = posenc::ops::add_position_table_(x, table, 9);
    EXPECT_TRUE(result.is_same(x));
    EXPECT_TRUE(torch::equal(x, expected)) << dtype;
    EXPECT_GT(x._version(), version);
  }
}

TEST_F(Kernels, InPlaceAutograd) {
  const auto table = torch::randn({10, 4}, torch::requires_grad());
  const auto leaf = torch::randn({2, 3, 4}, torch::requires_grad());
  auto y = leaf * 2; // a non-leaf: in-place is allowed
  posenc::ops::add_position_table_(y, table, 1, true, c10::nullopt, 3.0);
  const auto upstream = torch::randn({2, 3, 4});
  y.backward(upstream);
  EXPECT_TRUE(torch::allclose(leaf.grad(), upstream * 6));
  auto expected = torch::zeros({10, 4});
  expected.narrow(0, 1, 3).copy_(upstream.sum(0));
  EXPECT_TRUE(torch::allclose(table.grad(), expected));
  auto leaf_again = torch::randn({2, 3, 4}, torch::requires_grad());
  EXPECT_THROW(posenc::ops::add_position_table_(leaf_again, table.detach(), 0), c10::Error);
}

TEST_F(Kernels, OutVariant) {
  const auto table = F::sinusoidal_table(32, 8);
  const auto x = torch::randn({3, 4, 8});
  auto out = torch::empty({3, 4, 8});
  const void* storage = out.data_ptr();
  posenc::ops::add_position_table_out(out, x, table, 2);
  EXPECT_EQ(out.data_ptr(), storage); // no new allocation
  EXPECT_TRUE(torch::equal(out, posenc::ops::add_position_table(x, table, 2)));
  auto empty = torch::empty({0});
  posenc::ops::add_position_table_out(empty, x, table, 2);
  EXPECT_TRUE(torch::equal(empty, out));
  auto wrong = torch::empty({3, 4, 8}, torch::kDouble);
  EXPECT_POSENC_ERROR(
      posenc::ops::add_position_table_out(wrong, x, table),
      "out must have the input's dtype and device (Float, cpu), but has Double, cpu");
  auto shape = torch::empty({3, 4, 7}); // resized, as PyTorch's out= arguments are
  posenc::ops::add_position_table_out(shape, x, table, 2);
  EXPECT_TRUE(torch::equal(shape, out));
  const auto needs_grad = torch::randn({3, 4, 8}, torch::requires_grad());
  EXPECT_POSENC_ERROR(posenc::ops::add_position_table_out(out, needs_grad, table),
                      "the out= variant does not support autograd");
}

TEST_F(Kernels, RotaryMatchesComposite) {
  auto tables = F::rotary_tables(64, 12);
  for (const auto dtype : kDtypes) {
    for (const bool heads_first : {false, true}) {
      for (const bool interleaved : {false, true}) {
        for (const bool inverse : {false, true}) {
          const auto x = torch::randn({2, 5, 3, 16}).to(dtype); // Dh 16, rotated 12
          const auto input = heads_first ? x.transpose(1, 2).contiguous() : x;
          for (const auto& positions :
               {torch::Tensor(),
                torch::tensor({{0, 5, -1, 63, 2}, {1, 1, 1, 1, 1}}, torch::kLong)}) {
            const c10::optional<torch::Tensor> given =
                positions.defined() ? c10::optional<torch::Tensor>(positions) : c10::nullopt;
            const int64_t offset = positions.defined() ? 0 : 40;
            const auto fused = posenc::ops::apply_rotary(input,
                                                         tables.first,
                                                         tables.second,
                                                         offset,
                                                         given,
                                                         interleaved,
                                                         heads_first,
                                                         inverse);
            const auto reference = composite::apply_rotary(input,
                                                           tables.first,
                                                           tables.second,
                                                           offset,
                                                           given,
                                                           interleaved,
                                                           heads_first,
                                                           inverse);
            EXPECT_TRUE(torch::equal(fused, reference))
                << dtype << heads_first << interleaved << inverse;
            auto in_place = input.clone();
            posenc::ops::apply_rotary_(in_place,
                                       tables.first,
                                       tables.second,
                                       offset,
                                       given,
                                       interleaved,
                                       heads_first,
                                       inverse);
            EXPECT_TRUE(torch::equal(in_place, fused));
          }
        }
      }
    }
  }
}

TEST_F(Kernels, RotaryGradientsThroughInPlace) {
  auto tables = F::rotary_tables(32, 8);
  const auto leaf = torch::randn({1, 4, 2, 8}, torch::requires_grad());
  auto y = leaf.clone();
  posenc::ops::apply_rotary_(y, tables.first, tables.second, 3);
  const auto upstream = torch::randn({1, 4, 2, 8});
  y.backward(upstream);
  const auto leaf2 = leaf.detach().clone().requires_grad_();
  composite::apply_rotary(leaf2, tables.first, tables.second, 3, c10::nullopt, false, false, false)
      .backward(upstream);
  EXPECT_TRUE(torch::allclose(leaf.grad(), leaf2.grad(), 0, 1e-6));
}

TEST_F(Kernels, TokenEmbeddingMatchesUnfusedChain) {
  for (const auto dtype : kDtypes) {
    const auto weight = torch::randn({40, 16}).to(dtype);
    const auto table = F::sinusoidal_table(32, 16);
    const auto ids = torch::randint(0, 40, {3, 9}, torch::kLong);
    const auto positions = F::positions_from_tokens(ids, ids[0][0].item<int64_t>());
    for (const double scale : {1.0, 4.0}) {
      const auto fused = std::get<0>(posenc::ops::token_and_position_embedding(
          ids, weight, table, 0, true, positions, scale, -1, 0.0, false));
      const auto unfused = posenc::ops::add_position_table(
          torch::embedding(weight, ids), table, 0, true, positions, scale);
      ASSERT_EQ(fused.scalar_type(), dtype);
      if (scale == 1.0) {
        EXPECT_TRUE(torch::equal(fused, unfused)) << dtype;
      } else {
        EXPECT_LE(max_abs_difference(fused, unfused), ulp(dtype, 32)) << dtype;
      }
    }
  }
}

TEST_F(Kernels, TokenEmbeddingDropoutIsConsistentAndReproducible) {
  const auto weight = torch::randn({50, 64});
  const auto table = F::sinusoidal_table(256, 64);
  const auto ids = torch::randint(0, 50, {8, 200}, torch::kLong);
  torch::manual_seed(7);
  at::Tensor out;
  at::Tensor mask;
  std::tie(out, mask) = posenc::ops::token_and_position_embedding(
      ids, weight, table, 0, true, c10::nullopt, 2.0, -1, 0.25, true);
  ASSERT_EQ(mask.sizes(), out.sizes());
  // 102400 Bernoulli(0.75) draws: the kept fraction is 0.75 +- 0.0014 (1 sigma).
  EXPECT_NEAR(mask.to(torch::kDouble).mean().item<double>(), 0.75, 0.01);
  const auto plain = std::get<0>(posenc::ops::token_and_position_embedding(
      ids, weight, table, 0, true, c10::nullopt, 2.0, -1, 0.25, false));
  EXPECT_TRUE(torch::allclose(out, plain * mask / 0.75, 1e-6, 1e-6));
  torch::manual_seed(7);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto again = posenc::ops::token_and_position_embedding(
      ids, weight, table, 0, true, c10::nullopt, 2.0, -1, 0.25, true);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(std::get<0>(again), out));
  EXPECT_TRUE(torch::equal(std::get<1>(again), mask));
  // No structure across rows or columns: every column and every row keeps ~75%.
  const auto per_column = mask.reshape({-1, 64}).to(torch::kDouble).mean(0);
  const auto per_row = mask.reshape({-1, 64}).to(torch::kDouble).mean(1);
  EXPECT_LT((per_column - 0.75).abs().max().item<double>(), 0.03); // 1600 draws each: sigma 0.011
  EXPECT_NEAR(per_row.std().item<double>(), std::sqrt(0.75 * 0.25 / 64), 0.01);
  // A second call draws a new mask.
  const auto next = std::get<1>(posenc::ops::token_and_position_embedding(
      ids, weight, table, 0, true, c10::nullopt, 2.0, -1, 0.25, true));
  EXPECT_LT(next.eq(mask).to(torch::kDouble).mean().item<double>(), 0.7);
}

TEST_F(Kernels, TokenEmbeddingGradientsMatchUnfusedChain) {
  const auto ids = torch::tensor({{3, 0, 5, 5}, {1, 2, 0, 4}}, torch::kLong);
  for (const double dropout : {0.0, 0.5}) {
    const auto weight = torch::randn({6, 8}, torch::requires_grad());
    const auto table = torch::randn({10, 8}, torch::requires_grad());
    at::Tensor out;
    at::Tensor mask;
    std::tie(out, mask) = posenc::ops::token_and_position_embedding(
        ids, weight, table, 2, true, c10::nullopt, 3.0, /*padding_idx=*/0, dropout, true);
    const auto upstream = torch::randn({2, 4, 8});
    out.backward(upstream);
    const auto weight2 = weight.detach().clone().requires_grad_();
    const auto table2 = table.detach().clone().requires_grad_();
    auto unfused = torch::embedding(weight2, ids, /*padding_idx=*/0) * 3.0 +
                   table2.narrow(0, 2, 4).unsqueeze(0);
    if (dropout > 0) {
      unfused = unfused * mask / (1 - dropout);
    }
    unfused.backward(upstream);
    EXPECT_TRUE(torch::allclose(weight.grad(), weight2.grad(), 1e-5, 1e-5)) << dropout;
    EXPECT_TRUE(torch::allclose(table.grad(), table2.grad(), 1e-5, 1e-5)) << dropout;
    EXPECT_EQ(weight.grad()[0].abs().sum().item<double>(), 0.0); // padding_idx row: no gradient
  }
}

TEST_F(Kernels, ModuleInplaceOptionWritesIntoTheInput) {
  posenc::PositionalEncoding pe(posenc::PositionalEncodingOptions(8, 16).inplace(true));
  posenc::PositionalEncoding reference(8, 16);
  auto x = torch::randn({2, 5, 8});
  const auto expected = reference(x, 3);
  const auto y = pe(x, 3);
  EXPECT_TRUE(y.is_same(x));
  EXPECT_TRUE(torch::equal(x, expected));
}

// --- CUDA kernels against the CPU ones (run where a GPU is present) ----------------------------

namespace {
#define POSENC_REQUIRE_CUDA()         \
  if (!torch::cuda::is_available()) { \
    GTEST_SKIP() << "no CUDA device"; \
  }
} // namespace

// Outputs from kPrefaultBytes on have their pages populated before the kernel writes them: the
// values are those of the composite kernels all the same, on every thread count.
TEST_F(Kernels, LargeOutputsArePrefaultedAndExact) {
  const auto tables = F::rotary_tables(512, 128);
  const auto table = F::sinusoidal_table(512, 1024);
  const auto q = torch::randn({2, 512, 8, 128}); // 4 MiB
  const auto k = torch::randn({2, 512, 2, 128});
  const auto x = torch::randn({2, 512, 1024});
  ASSERT_GE(q.nbytes(), static_cast<size_t>(posenc::ops::cpu::kPrefaultBytes));
  const int threads = at::get_num_threads();
  for (const int n : {1, 2, 3}) {
    at::set_num_threads(n);
    const auto qk = posenc::ops::apply_rotary_qk(q, k, tables.first, tables.second);
    const auto q_ref = composite::apply_rotary(q, tables.first, tables.second, 0, c10::nullopt,
                                               false, false, false);
    const auto k_ref = composite::apply_rotary(k, tables.first, tables.second, 0, c10::nullopt,
                                               false, false, false);
    EXPECT_TRUE(torch::equal(std::get<0>(qk), q_ref)) << n << " threads";
    EXPECT_TRUE(torch::equal(std::get<1>(qk), k_ref)) << n << " threads";
    EXPECT_TRUE(torch::equal(posenc::ops::add_position_table(x, table, 0),
                             composite::add_position_table(x, table, 0, true, c10::nullopt, 1.0)))
        << n << " threads";
  }
  at::set_num_threads(threads);
}

#if defined(__linux__)
// prefault_pages makes fresh anonymous memory resident (mincore) without changing its contents,
// where the kernel has MADV_POPULATE_WRITE (Linux >= 5.14).
TEST_F(Kernels, PrefaultPagesMakesFreshMemoryResident) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t pages = (size_t{9} << 20) / page + 3; // a few 2 MiB chunks and a partial one
  void* memory = mmap(nullptr, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  std::vector<unsigned char> resident(pages);
  const auto resident_pages = [&] {
    EXPECT_EQ(mincore(memory, pages * page, resident.data()), 0);
    size_t count = 0;
    for (const unsigned char r : resident) {
      count += r & 1u;
    }
    return count;
  };
  EXPECT_EQ(resident_pages(), 0u);
  // an empty range or a range inside one page populates nothing
  EXPECT_FALSE(posenc::ops::cpu::prefault_pages(memory, 0));
  EXPECT_FALSE(posenc::ops::cpu::prefault_pages(static_cast<char*>(memory) + 1, 100));
  EXPECT_EQ(resident_pages(), 0u);
  if (!posenc::ops::cpu::prefault_pages(memory, static_cast<int64_t>(pages * page))) {
    munmap(memory, pages * page);
    GTEST_SKIP() << "this kernel refuses madvise(MADV_POPULATE_WRITE) (Linux < 5.14 or a sandbox)";
  }
  EXPECT_EQ(resident_pages(), pages);
  const auto* bytes = static_cast<const unsigned char*>(memory);
  EXPECT_TRUE(std::all_of(bytes, bytes + pages * page, [](unsigned char b) { return b == 0; }));
  munmap(memory, pages * page);
}
#endif

// detail::sincos (one range reduction for both, fdlibm's polynomials, vectorized) against the C
// library's sin and cos: within 2 float64 ulps (each is within one of the exact value), and by
// far the same float32 rounding; around multiples of pi/2 (the reduction's cancellations), up to
// the reduced range and past it (the C library's own values), and NaN for non-finite angles.
TEST(Sincos, WithinTwoUlpsOfTheCLibrary) {
  std::vector<double> angles;
  for (int i = -200000; i <= 200000; ++i) {
    angles.push_back(i * 1e-4 + i * 1e-9);
  }
  for (int n = -1000; n <= 1000; ++n) { // next to multiples of pi/2
    const double multiple = n * 1.5707963267948966;
    angles.push_back(multiple);
    angles.push_back(std::nextafter(multiple, 1e300));
    angles.push_back(std::nextafter(multiple, -1e300));
    angles.push_back(multiple + 1e-7);
  }
  for (double x = 1.0; x < 1e7; x *= 1.0001) { // to the reduced range, and past it
    angles.push_back(x);
    angles.push_back(-x);
  }
  angles.push_back(posenc::detail::kSincosReducedLimit);
  angles.push_back(std::nextafter(posenc::detail::kSincosReducedLimit, 1e300));
  angles.push_back(1e300);
  angles.push_back(-0.0);
  const double inf = std::numeric_limits<double>::infinity();
  angles.push_back(inf);
  angles.push_back(-inf);
  angles.push_back(std::numeric_limits<double>::quiet_NaN());
  std::vector<double> sines(angles.size()), cosines(angles.size());
  posenc::detail::sincos(angles.data(), sines.data(), cosines.data(),
                         static_cast<int64_t>(angles.size()));
  int64_t float_differences = 0;
  for (size_t i = 0; i < angles.size(); ++i) {
    const double x = angles[i];
    const double sine = std::sin(x), cosine = std::cos(x);
    if (!std::isfinite(x)) {
      EXPECT_TRUE(std::isnan(sines[i]) && std::isnan(cosines[i])) << x;
      continue;
    }
    if (std::fabs(x) > posenc::detail::kSincosReducedLimit) { // the C library's
      EXPECT_EQ(sines[i], sine) << x;
      EXPECT_EQ(cosines[i], cosine) << x;
      continue;
    }
    const double tolerance = 2 * std::numeric_limits<double>::epsilon();
    ASSERT_LE(std::fabs(sines[i] - sine), tolerance * std::max(std::fabs(sine), 0x1p-1022)) << x;
    ASSERT_LE(std::fabs(cosines[i] - cosine), tolerance * std::max(std::fabs(cosine), 0x1p-1022))
        << x;
    float_differences += (static_cast<float>(sines[i]) != static_cast<float>(sine)) +
                         (static_cast<float>(cosines[i]) != static_cast<float>(cosine));
  }
  // a float32 rounding can differ only where the value lies within 2 float64 ulps of a float32
  // rounding boundary: about 2^-28 of the values
  EXPECT_LE(float_differences, 2) << "of " << 2 * angles.size();
  EXPECT_TRUE(std::signbit(sines[angles.size() - 5])); // sin(-0) = -0
}

// detail::sincos_scaled (a row's angles, sines and cosines in one pass, float32 out) equals sincos
// of the same rounded products rounded to float32, within the reduced range and past it (libm's).
TEST(Sincos, ScaledRowsEqualTheAnglesOnes) {
  const std::vector<double> frequencies = {1.0, 0.75, 1e-3, 3.0e-7, 2.5, 1.5707963267948966};
  const size_t n = frequencies.size();
  for (const double scale : {0.0, -1.0, 37.25, 999.5, 1e5, 1e6, 1e12}) {
    std::vector<double> angles(n), sines(n), cosines(n);
    for (size_t k = 0; k < n; ++k) {
      angles[k] = scale * frequencies[k];
    }
    posenc::detail::sincos(angles.data(), sines.data(), cosines.data(), static_cast<int64_t>(n));
    std::vector<float> row_sines(n), row_cosines(n);
    posenc::detail::sincos_scaled(scale, frequencies.data(), row_sines.data(), row_cosines.data(),
                                  static_cast<int64_t>(n));
    for (size_t k = 0; k < n; ++k) {
      EXPECT_EQ(row_sines[k], static_cast<float>(sines[k])) << scale << " " << frequencies[k];
      EXPECT_EQ(row_cosines[k], static_cast<float>(cosines[k])) << scale << " " << frequencies[k];
    }
  }
}

// The CPU timestep kernel against the float64 ATen formulation (the composite path other devices
// take): the same float64 angles, rounded once into each dtype; odd widths' zero column.
TEST_F(Kernels, TimestepEmbeddingMatchesTheFloat64Formulation) {
  const torch::Tensor timesteps =
      torch::cat({torch::arange(0, 1000, 7, torch::kFloat), torch::rand({300}) * 1000,
                  torch::tensor({0.5, 1e-3, 999.25, 1e5})});
  for (const int64_t dim : {256, 129, 2}) {
    for (const bool flip : {false, true}) {
      posenc::detail::TimestepSpec spec;
      spec.embedding_dim = dim;
      spec.downscale_freq_shift = 0.5;
      const auto frequencies =
          torch::tensor(posenc::detail::timestep_frequencies(spec), torch::kDouble) * 3.0;
      const auto angles = timesteps.to(torch::kDouble).unsqueeze(1) * frequencies;
      std::vector<torch::Tensor> columns =
          flip ? std::vector<torch::Tensor>{angles.cos(), angles.sin()}
               : std::vector<torch::Tensor>{angles.sin(), angles.cos()};
      if (dim % 2 == 1) {
        columns.push_back(torch::zeros({timesteps.size(0), 1}, torch::kDouble));
      }
      const auto truth = torch::cat(columns, 1);
      for (const auto dtype : kDtypes) {
        SCOPED_TRACE(c10::str(dim, " ", flip, " ", dtype));
        const auto ours =
            posenc::ops::timestep_embedding(timesteps, dim, flip, /*downscale_freq_shift=*/0.5,
                                            /*scale=*/3.0, /*max_period=*/10000, dtype);
        if (dtype == torch::kDouble) {
          // each within a float64 ulp of the exact value (|values| <= 1)
          EXPECT_TRUE(torch::allclose(ours, truth, /*rtol=*/0, /*atol=*/0x1p-51));
        } else {
          EXPECT_TRUE(torch::equal(ours, truth.to(dtype)));
        }
      }
    }
  }
}

TEST_F(Kernels, AddPositionTableOnGpuMatchesCpu_CUDA) {
  POSENC_REQUIRE_CUDA();
  const auto table = F::sinusoidal_table(128, 40).unsqueeze(0);
  for (const auto dtype : kDtypes) {
    for (const bool batch_first : {true, false}) {
      for (const auto& positions : position_cases(4, 9, batch_first, 128)) {
        // Widths 40 (16-byte vectors for every dtype) and 3 (scalar path).
        for (const int64_t width : {int64_t{40}, int64_t{3}}) {
          const auto t = width == 40 ? table : F::sinusoidal_table(128, 3);
          const auto x =
              (batch_first ? torch::randn({4, 9, width}) : torch::randn({9, 4, width})).to(dtype);
          const int64_t offset = positions.defined() ? 0 : 100;
          const c10::optional<torch::Tensor> cpu_positions =
              positions.defined() ? c10::optional<torch::Tensor>(positions) : c10::nullopt;
          const c10::optional<torch::Tensor> gpu_positions =
              positions.defined() ? c10::optional<torch::Tensor>(positions.cuda()) : c10::nullopt;
          const auto cpu =
              posenc::ops::add_position_table(x, t, offset, batch_first, cpu_positions, 1.0);
          const auto gpu = posenc::ops::add_position_table(
              x.cuda(), t.cuda(), offset, batch_first, gpu_positions, 1.0);
          EXPECT_TRUE(torch::equal(gpu.cpu(), cpu)) << dtype << " width " << width;
          auto in_place = x.cuda();
          posenc::ops::add_position_table_(
              in_place, t.cuda(), offset, batch_first, gpu_positions, 1.0);
          EXPECT_TRUE(torch::equal(in_place.cpu(), cpu));
        }
      }
    }
  }
}

TEST_F(Kernels, RotaryOnGpuMatchesCpu_CUDA) {
  POSENC_REQUIRE_CUDA();
  auto tables = F::rotary_tables(64, 12);
  for (const auto dtype : kDtypes) {
    for (const bool interleaved : {false, true}) {
      const auto x = torch::randn({2, 5, 3, 16}).to(dtype);
      const auto positions = torch::tensor({{0, 5, -1, 63, 2}, {1, 1, 1, 1, 1}}, torch::kLong);
      const auto cpu = posenc::ops::apply_rotary(
          x, tables.first, tables.second, 0, positions, interleaved, false, false);
      const auto gpu = posenc::ops::apply_rotary(x.cuda(),
                                                 tables.first.cuda(),
                                                 tables.second.cuda(),
                                                 0,
                                                 positions.cuda(),
                                                 interleaved,
                                                 false,
                                                 false);
      EXPECT_TRUE(torch::equal(gpu.cpu(), cpu)) << dtype << interleaved;
    }
  }
}

TEST_F(Kernels, TokenEmbeddingOnGpu_CUDA) {
  POSENC_REQUIRE_CUDA();
  const auto weight = torch::randn({50, 36});
  const auto table = F::sinusoidal_table(64, 36);
  const auto ids = torch::randint(0, 50, {4, 30}, torch::kLong);
  const auto cpu = std::get<0>(posenc::ops::token_and_position_embedding(
      ids, weight, table, 3, true, c10::nullopt, 1.0, -1, 0.0, false));
  at::Tensor gpu;
  at::Tensor mask;
  std::tie(gpu, mask) = posenc::ops::token_and_position_embedding(
      ids.cuda(), weight.cuda(), table.cuda(), 3, true, c10::nullopt, 1.0, -1, 0.0, false);
  EXPECT_TRUE(torch::equal(gpu.cpu(), cpu));
  std::tie(gpu, mask) = posenc::ops::token_and_position_embedding(
      ids.cuda(), weight.cuda(), table.cuda(), 3, true, c10::nullopt, 1.0, -1, 0.3, true);
  EXPECT_NEAR(mask.to(torch::kDouble).mean().item<double>(), 0.7, 0.02);
  EXPECT_TRUE(torch::allclose(gpu.cpu(), cpu * mask.cpu() / 0.7, 1e-5, 1e-5));
}

TEST_F(Kernels, ModulesRunOnGpu_CUDA) {
  POSENC_REQUIRE_CUDA();
  posenc::RotaryEmbedding rope(16, 64);
  posenc::TokenAndPositionEmbedding embed(
      posenc::TokenAndPositionEmbeddingOptions(30, 16, 64).padding_idx(0));
  const auto q = torch::randn({2, 8, 2, 16});
  const auto ids = torch::randint(0, 30, {2, 8}, torch::kLong);
  torch::NoGradGuard no_grad;
  const auto rope_cpu = rope(q, 5);
  const auto embed_cpu = embed(ids);
  rope->to(torch::kCUDA);
  embed->to(torch::kCUDA);
  EXPECT_TRUE(torch::equal(rope(q.cuda(), 5).cpu(), rope_cpu));
  EXPECT_TRUE(torch::equal(embed(ids.cuda()).cpu(), embed_cpu));
}
