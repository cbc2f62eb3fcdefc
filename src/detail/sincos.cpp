#include "detail/sincos.h"

#include "detail/row_loop.h"

#include <cmath>
#include <cstring>

namespace posenc {
namespace detail {
namespace {

// pi/2 in three parts of 33 significant bits each, and the tail beyond them (fdlibm's pio2_1,
// pio2_2, pio2_3 and pio2_3t): for |n| < 2^20, n times a part is exact.
constexpr double kPio2Part1 = 1.57079632673412561417e+00;
constexpr double kPio2Part2 = 6.07710050630396597660e-11;
constexpr double kPio2Part3 = 2.02226624871116645580e-21;
constexpr double kPio2Tail = 8.47842766036889956997e-32;
constexpr double kTwoOverPi = 6.36619772367581382433e-01;
// 1.5 * 2^52: adding it rounds a double of magnitude below 2^51 to an integer (to nearest even),
// held in the low bits of the sum's significand.
constexpr double kRoundingShift = 6755399441055744.0;

// fdlibm's __kernel_sin and __kernel_cos coefficients, for |r| <= pi/4.
constexpr double kS1 = -1.66666666666666324348e-01;
constexpr double kS2 = 8.33333333332248946124e-03;
constexpr double kS3 = -1.98412698298579493134e-04;
constexpr double kS4 = 2.75573137070700676789e-06;
constexpr double kS5 = -2.50507602534068634195e-08;
constexpr double kS6 = 1.58969099521155010221e-10;
constexpr double kC1 = 4.16666666666666019037e-02;
constexpr double kC2 = -1.38888888888741095749e-03;
constexpr double kC3 = 2.48015872894767294178e-05;
constexpr double kC4 = -2.75573143513906633035e-07;
constexpr double kC5 = 2.08757232129817482790e-09;
constexpr double kC6 = -1.13596475577881948265e-11;

inline uint64_t bits_of(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline double double_of(uint64_t bits) {
  double value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// sin and cos of one angle, branch-free (so that loops of it vectorize); meaningless beyond the
// reduced range, where the callers recompute.
inline void sincos_one(double x, double& sine_out, double& cosine_out) {
  // n = round(x * 2/pi); x - n pi/2 in [-pi/4, pi/4] up to the rounding of x * 2/pi
  const double shifted = x * kTwoOverPi + kRoundingShift;
  const uint64_t quadrant = bits_of(shifted);
  const double n = shifted - kRoundingShift;
  // x - n * part1 is exact (Sterbenz); the later parts are small corrections
  const double r = ((x - n * kPio2Part1) - n * kPio2Part2) - (n * kPio2Part3 + n * kPio2Tail);
  const double z = r * r;
  const double sine = r + z * r * (kS1 + z * (kS2 + z * (kS3 + z * (kS4 + z * (kS5 + z * kS6)))));
  const double polynomial = z * (kC1 + z * (kC2 + z * (kC3 + z * (kC4 + z * (kC5 + z * kC6)))));
  const double half_z = 0.5 * z;
  const double w = 1.0 - half_z;
  const double cosine = w + (((1.0 - w) - half_z) + z * polynomial);
  // quadrant q: sin x = (s, c, -s, -c)[q], cos x = (c, -s, -c, s)[q]
  const uint64_t swap = 0 - (quadrant & 1);
  const uint64_t sine_bits = (bits_of(sine) & ~swap) | (bits_of(cosine) & swap);
  const uint64_t cosine_bits = (bits_of(cosine) & ~swap) | (bits_of(sine) & swap);
  sine_out = double_of(sine_bits ^ ((quadrant & 2) << 62));
  cosine_out = double_of(cosine_bits ^ (((quadrant + 1) & 2) << 62));
}

inline bool beyond_reduced(double x) {
  return !(std::fabs(x) <= kSincosReducedLimit); // also NaN
}

// The loops; each returns whether an angle lay beyond the reduced range.
POSENC_ROW_LOOP
bool sincos_reduced(const double* __restrict angles, double* __restrict sines,
                    double* __restrict cosines, int64_t count) {
  uint64_t beyond = 0;
  for (int64_t i = 0; i < count; ++i) {
    beyond |= static_cast<uint64_t>(beyond_reduced(angles[i]));
    sincos_one(angles[i], sines[i], cosines[i]);
  }
  return beyond != 0;
}

POSENC_ROW_LOOP
bool sincos_scaled_reduced(double scale, const double* __restrict frequencies,
                           float* __restrict sines, float* __restrict cosines, int64_t count) {
  uint64_t beyond = 0;
  for (int64_t i = 0; i < count; ++i) {
    const double x = scale * frequencies[i];
    beyond |= static_cast<uint64_t>(beyond_reduced(x));
    double sine, cosine;
    sincos_one(x, sine, cosine);
    sines[i] = static_cast<float>(sine);
    cosines[i] = static_cast<float>(cosine);
  }
  return beyond != 0;
}

} // namespace

void sincos(const double* angles, double* sines, double* cosines, int64_t count) {
  if (!sincos_reduced(angles, sines, cosines, count)) {
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    if (beyond_reduced(angles[i])) {
      sines[i] = std::sin(angles[i]);
      cosines[i] = std::cos(angles[i]);
    }
  }
}

void sincos_scaled(double scale, const double* frequencies, float* sines, float* cosines,
                   int64_t count) {
  if (!sincos_scaled_reduced(scale, frequencies, sines, cosines, count)) {
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    const double x = scale * frequencies[i];
    if (beyond_reduced(x)) {
      sines[i] = static_cast<float>(std::sin(x));
      cosines[i] = static_cast<float>(std::cos(x));
    }
  }
}

} // namespace detail
} // namespace posenc
