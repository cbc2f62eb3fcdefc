// The sinusoidal table: golden values, the long-double reference, dtypes, options and errors.

#include <posenc/functional/positional_encoding.h>

#include "reference.h"
#include "test_util.h"

#include <ATen/Parallel.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace F = posenc::functional;
using posenc_test::kFloat32TableTolerance;
using posenc_test::reference_pe;

namespace {

// Largest |table[r, c] - reference_pe(offset + r, c)| over the whole table.
double max_error_vs_reference(const at::Tensor& table,
                              int64_t offset = 0,
                              long double base = 10000.0L) {
  const at::Tensor t = table.to(at::kDouble).contiguous();
  const double* data = t.data_ptr<double>();
  const int64_t rows = t.size(0);
  const int64_t cols = t.size(1);
  long double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const long double diff = std::fabs(static_cast<long double>(data[r * cols + c]) -
                                         reference_pe(offset + r, c, cols, base));
      worst = std::max(worst, diff);
    }
  }
  return static_cast<double>(worst);
}

} // namespace

// The expected output printed in the first seed document (max_len = 8, d_model = 6), to the 4
// decimals it shows: the rounding to 4 decimals is at most 5e-5, so 1e-4 is a safe bound.
TEST(SinusoidalTable, MatchesSeedGoldenTable8x6) {
  const std::vector<double> golden = {0.0000,  1.0000,  0.0000, 1.0000, 0.0000, 1.0000, //
                                      0.8415,  0.5403,  0.0464, 0.9989, 0.0022, 1.0000, //
                                      0.9093,  -0.4161, 0.0927, 0.9957, 0.0043, 1.0000, //
                                      0.1411,  -0.9900, 0.1388, 0.9903, 0.0065, 1.0000, //
                                      -0.7568, -0.6536, 0.1846, 0.9828, 0.0086, 1.0000, //
                                      -0.9589, 0.2837,  0.2300, 0.9732, 0.0108, 0.9999, //
                                      -0.2794, 0.9602,  0.2749, 0.9615, 0.0129, 0.9999, //
                                      0.6570,  0.7539,  0.3192, 0.9477, 0.0151, 0.9999};
  const at::Tensor expected = at::tensor(golden, at::kDouble).reshape({8, 6}).to(at::kFloat);
  const at::Tensor table = F::sinusoidal_table(8, 6);
  ASSERT_EQ(table.sizes(), (std::vector<int64_t>{8, 6}));
  ASSERT_EQ(table.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::allclose(table, expected, /*rtol=*/0.0, /*atol=*/1e-4));
}

// d_model = 512 at the positions the specification names, against long double.
TEST(SinusoidalTable, Width512MatchesLongDoubleAtSelectedPositions) {
  const at::Tensor table = F::sinusoidal_table(4096, 512);
  for (const int64_t position : {0, 1, 2, 100, 4095}) {
    const at::Tensor row = table.narrow(0, position, 1);
    EXPECT_LE(max_error_vs_reference(row, position), kFloat32TableTolerance)
        << "position " << position;
  }
  EXPECT_LE(max_error_vs_reference(table), kFloat32TableTolerance);
}

// An odd width: the last column is a sine, and position 3, column 1 is cos(3) = -0.98999 (the
// third seed's worked table prints +0.990 there; the formula is the authority).
TEST(SinusoidalTable, OddWidthFiveEndsWithSine) {
  const at::Tensor table =
      F::sinusoidal_table(4, 5, F::SinusoidalTableFuncOptions().dtype(at::kDouble));
  ASSERT_EQ(table.sizes(), (std::vector<int64_t>{4, 5}));
  EXPECT_LE(max_error_vs_reference(table), 1e-15);
  EXPECT_NEAR(table[3][1].item<double>(), std::cos(3.0), 1e-15);
  EXPECT_NEAR(table[3][1].item<double>(), -0.9899924966004454, 1e-15);
  EXPECT_NEAR(table[1][4].item<double>(), std::sin(std::pow(10000.0, -4.0 / 5.0)), 1e-15);
  EXPECT_NEAR(table[1][2].item<double>(), std::sin(std::pow(10000.0, -2.0 / 5.0)), 1e-15);
}

TEST(SinusoidalTable, WidthOneIsASingleSine) {
  const at::Tensor table =
      F::sinusoidal_table(3, 1, F::SinusoidalTableFuncOptions().dtype(at::kDouble));
  EXPECT_NEAR(table[2][0].item<double>(), std::sin(2.0), 1e-15);
}

// A float32 table computed naively in float32 drifts by ~pos * 6e-8; ours stays at float32
// rounding all the way to position 100000.
TEST(SinusoidalTable, FarPositionsStayWithinFloat32Rounding) {
  const at::Tensor table = F::sinusoidal_table(100001, 16);
  EXPECT_LE(max_error_vs_reference(table), kFloat32TableTolerance);
  const at::Tensor wide =
      F::sinusoidal_table(16, 512, F::SinusoidalTableFuncOptions().offset(99985));
  EXPECT_LE(max_error_vs_reference(wide, 99985), kFloat32TableTolerance);
}

TEST(SinusoidalTable, Float64TableMatchesLongDouble) {
  const at::Tensor table =
      F::sinusoidal_table(2048, 64, F::SinusoidalTableFuncOptions().dtype(at::kDouble));
  ASSERT_EQ(table.scalar_type(), at::kDouble);
  // double sin/cos are within 1 ulp and the angle carries ~position * 2^-53 of error.
  EXPECT_LE(max_error_vs_reference(table), 1e-12);
}

// float16 and bfloat16 tables are the float64 table rounded once (not via float32).
TEST(SinusoidalTable, HalfTablesAreRoundedOnceFromFloat64) {
  const at::Tensor reference =
      F::sinusoidal_table(300, 24, F::SinusoidalTableFuncOptions().dtype(at::kDouble));
  for (const auto dtype : {at::kHalf, at::kBFloat16}) {
    const at::Tensor table =
        F::sinusoidal_table(300, 24, F::SinusoidalTableFuncOptions().dtype(dtype));
    ASSERT_EQ(table.scalar_type(), dtype);
    EXPECT_TRUE(at::equal(table, reference.to(dtype))) << dtype;
  }
}

TEST(SinusoidalTable, OffsetShiftsPositions) {
  const at::Tensor full = F::sinusoidal_table(12, 6);
  const at::Tensor shifted = F::sinusoidal_table(5, 6, F::SinusoidalTableFuncOptions().offset(7));
  EXPECT_TRUE(at::equal(shifted, full.narrow(0, 7, 5)));
}

TEST(SinusoidalTable, BaseSetsTheWavelengths) {
  const at::Tensor table = F::sinusoidal_table(
      50, 10, F::SinusoidalTableFuncOptions().base(500000.0).dtype(at::kDouble));
  EXPECT_LE(max_error_vs_reference(table, 0, 500000.0L), 1e-13);
  EXPECT_NEAR(table[7][2].item<double>(), std::sin(7.0 * std::pow(500000.0, -0.2)), 1e-15);
}

TEST(SinusoidalTable, IsBitIdenticalForAnyThreadCount) {
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor one = F::sinusoidal_table(777, 130);
  at::set_num_threads(std::max(2, threads));
  const at::Tensor many = F::sinusoidal_table(777, 130);
  at::set_num_threads(threads);
  EXPECT_TRUE(at::equal(one, many));
}

TEST(SinusoidalTable, RejectsWidthBelowOne) {
  EXPECT_POSENC_ERROR(F::sinusoidal_table(8, 0),
                      "sinusoidal_table: d_model must be >= 1, but got 0");
}

TEST(SinusoidalTable, RejectsLengthBelowOne) {
  EXPECT_POSENC_ERROR(F::sinusoidal_table(-3, 6),
                      "sinusoidal_table: max_len must be >= 1, but got -3");
}

TEST(SinusoidalTable, RejectsNonPositiveOrNonFiniteBase) {
  for (const double base : {0.0,
                            -2.0,
                            std::numeric_limits<double>::infinity(),
                            std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_POSENC_ERROR(F::sinusoidal_table(8, 6, F::SinusoidalTableFuncOptions().base(base)),
                        "sinusoidal_table: base must be finite and >= 5.2e-290");
  }
}

TEST(SinusoidalTable, RejectsIntegerDtype) {
  EXPECT_POSENC_ERROR(
      F::sinusoidal_table(8, 6, F::SinusoidalTableFuncOptions().dtype(at::kLong)),
      "sinusoidal_table: dtype must be float16, bfloat16, float32 or float64, but got Long");
}

TEST(SinusoidalTable, RejectsNegativeOffset) {
  EXPECT_POSENC_ERROR(F::sinusoidal_table(8, 6, F::SinusoidalTableFuncOptions().offset(-1)),
                      "sinusoidal_table: offset must be >= 0, but got -1");
}

// Rejected before allocating: the product would overflow int64 (or need exabytes).
TEST(SinusoidalTable, RejectsAbsurdSizesBeforeAllocating) {
  const int64_t huge = std::numeric_limits<int64_t>::max() / 2;
  for (const auto& shape : std::vector<std::pair<int64_t, int64_t>>{
           {huge, 4}, {4, huge}, {int64_t{1} << 20, int64_t{1} << 12}}) {
    EXPECT_POSENC_ERROR(F::sinusoidal_table(shape.first, shape.second),
                        "is over posenc's limit of 2^28 elements");
  }
}
