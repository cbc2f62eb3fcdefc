#pragma once

// Row loops of the CPU kernels written for one instruction set where the compiler's vectorized
// loops are far from it: bfloat16 rounding with AVX512-BF16.

#include <c10/util/BFloat16.h>

#include <cstdint>

namespace posenc {
namespace ops {
namespace cpu {

/// Whether rotate_halves_bf16 can run here: an x86-64 CPU with AVX512-BF16, whose VCVTNEPS2BF16
/// rounds 16 float32 values to bfloat16 (to nearest, ties to even) in one instruction, where the
/// row loops' integer rounding takes about seven (the step that makes a bfloat16 decoding step
/// compute-bound).
bool bf16_rows_supported();

/// Rotates `rows` rows of bfloat16 pairs split in halves, (j, half + j), by float32 cos/sin rows
/// (by minus their angle when `inverse`): out row r (`out_step` elements apart) from x row r
/// (`in_step` apart) by the cos/sin row at `cos + r * table_step` (0: one row for all, a token's
/// heads; half: consecutive positions), out may be x. The arithmetic of kernels::rotate_values,
/// each product and sum rounded on its own in float32, then each result rounded once to bfloat16
/// as store<c10::BFloat16> does: to nearest even, NaN as 0x7FC0. The hardware conversion flushes
/// subnormal float32 values to zero, so a group of 16 holding a NaN or a subnormal result is
/// rounded by that integer arithmetic instead: the same bits as the row loops in every case.
/// `half` a multiple of 16; only where bf16_rows_supported().
void rotate_halves_bf16(const c10::BFloat16* x, c10::BFloat16* out, int64_t in_step,
                        int64_t out_step, int64_t rows, const float* cos, const float* sin,
                        int64_t table_step, int64_t half, bool inverse);

} // namespace cpu
} // namespace ops
} // namespace posenc
