#pragma once

#include <cstdint>

namespace posenc {
namespace detail {

/// The largest |angle| that `sincos` reduces itself (2^19 * pi/2, about 8.2e5 radians); larger or
/// non-finite angles are computed by the C library's sin and cos, one by one.
constexpr double kSincosReducedLimit = 823549.6639806845;

/// sin and cos of `count` float64 angles at once: `sines[i] = sin(angles[i])`,
/// `cosines[i] = cos(angles[i])`, each within one float64 ulp (about 2^-53 relative) of the exact
/// value, as the C library's are. One range reduction serves both (an exact Cody-Waite reduction
/// by pi/2, then fdlibm's polynomials on [-pi/4, pi/4]); the loop is compiled for x86-64-v4 and -v3
/// (POSENC_ROW_LOOP) as well as the baseline and chosen by the CPU it runs on, and gives the same
/// bits on both (no fused multiply-add is used). `angles` may alias neither output.
void sincos(const double* angles, double* sines, double* cosines, int64_t count);

/// sincos of the `count` angles `scale * frequencies[i]` (each product rounded once), rounded once
/// to float32: the row of a timestep or position in one pass, without the angles' buffer.
void sincos_scaled(double scale, const double* frequencies, float* sines, float* cosines,
                   int64_t count);

} // namespace detail
} // namespace posenc
