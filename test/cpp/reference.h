#pragma once

// Independent references for the tests: the sinusoidal formula evaluated in long double, written
// from the paper's definition and sharing no code with the library.

#include <cmath>
#include <cstdint>

namespace posenc_test {

/// PE(position, column) for a table of width `d_model` at any real position (fractional ones:
/// position interpolation, timesteps), in long double (x87 80-bit: 64-bit mantissa, so its own
/// error is ~1e-19, far below the float32 and float64 tolerances used).
inline long double reference_pe_at(long double position,
                                   int64_t column,
                                   int64_t d_model,
                                   long double base = 10000.0L) {
  const int64_t pair = column / 2;
  const long double frequency =
      std::pow(base, -static_cast<long double>(2 * pair) / static_cast<long double>(d_model));
  const long double angle = position * frequency;
  return column % 2 == 0 ? std::sin(angle) : std::cos(angle);
}

/// PE(position, column) at an integer position (a table row).
inline long double reference_pe(int64_t position,
                                int64_t column,
                                int64_t d_model,
                                long double base = 10000.0L) {
  return reference_pe_at(static_cast<long double>(position), column, d_model, base);
}

/// The largest error of rounding a value of magnitude <= 1 to float32 once: half a unit in the last
/// place of [0.5, 1), 2^-25 ~= 2.98e-8. A table computed in double and rounded once stays within
/// this plus the double computation's own error (~1e-11 at position 1e5), which is why the tests
/// allow kFloat32TableTolerance = 2^-25 + 1e-10 (tighter than the 6e-8 the specification asks).
constexpr double kFloat32RoundingBound = 2.98023223876953125e-08; // 2^-25
constexpr double kFloat32TableTolerance = kFloat32RoundingBound + 1e-10;

} // namespace posenc_test
