#pragma once

// The CPU row loops of the rotary family, for every CPU kernel that rotates rows (rotary's,
// kv_cache's): one row, or a token's heads, each compiled per instruction set (POSENC_ROW_LOOP),
// float16/bfloat16 converted in registers. Every product and sum rounds on its own, as the CUDA
// threads' (kernels::rotate_pair), so every backend gives the same bits.

#include "detail/row_loop.h"
#include "ops/common/cpu_helpers.h"
#include "ops/rotary/bfloat16_rows.h"
#include "ops/rotary/kernels.h"

#include <c10/util/BFloat16.h>

#include <cstdint>
#include <type_traits>

namespace posenc {
namespace ops {
namespace cpu {
namespace {

// The pairs of one row: (2j, 2j + 1) interleaved, (j, half + j) otherwise, each rotated by the
// arithmetic the CUDA threads run (kernels::rotate_pair); inlined into each clone of rotate_rows,
// so that it is compiled for that clone's instruction set. out may be x: iteration j reads and
// writes only its own pair, in place or not, so no iteration depends on another's stores.
// POSENC_IVDEP says so to the vectorizer, which cannot prove it for x[j] and out[half + j] with
// half unknown.
template <bool kInterleaved, typename scalar_t, typename table_t>
C10_ALWAYS_INLINE void rotate_pairs(const scalar_t* x, scalar_t* out, const table_t* cos,
                                    const table_t* sin, int64_t half, bool inverse) {
  constexpr int64_t kStep = kInterleaved ? 2 : 1;
  const int64_t second = kInterleaved ? 1 : half;
  POSENC_IVDEP
  for (int64_t j = 0; j < half; ++j) {
    kernels::rotate_pair(x, out, kStep * j, kStep * j + second, cos[j], sin[j], inverse);
  }
}

// Whether rows of scalar_t by table_t rows take rotate_halves_bf16 (the same bits, rounded to
// bfloat16 in hardware: bfloat16_rows.h).
template <typename scalar_t, typename table_t>
C10_ALWAYS_INLINE bool rotates_in_bf16_rows(int64_t half, bool interleaved) {
  return std::is_same<scalar_t, c10::BFloat16>::value && std::is_same<table_t, float>::value &&
         !interleaved && half % 16 == 0 && bf16_rows_supported();
}

// `rows` rows, `in_step` and `out_step` elements apart in x and out, row r rotated by the cos/sin
// row `table_step` elements after row r - 1's: a token's heads (table_step 0, one cos/sin row) or
// a head's consecutive positions in the heads-first layout (table_step half). One call per run of
// rows, so that the clone's dispatch and setup are paid once per token (a decoding step: one
// token, tens of heads) or per head's run rather than once per row. Channels past 2 * half
// (partial rotary) are the caller's.
template <typename scalar_t, typename table_t>
POSENC_ROW_LOOP void rotate_rows(const scalar_t* x, scalar_t* out, int64_t in_step,
                                 int64_t out_step, int64_t rows, const table_t* cos,
                                 const table_t* sin, int64_t table_step, int64_t half,
                                 bool interleaved, bool inverse) {
  if (rotates_in_bf16_rows<scalar_t, table_t>(half, interleaved)) {
    rotate_halves_bf16(reinterpret_cast<const c10::BFloat16*>(x),
                       reinterpret_cast<c10::BFloat16*>(out), in_step, out_step, rows,
                       reinterpret_cast<const float*>(cos), reinterpret_cast<const float*>(sin),
                       table_step, half, inverse);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (interleaved) {
      rotate_pairs<true>(x + r * in_step, out + r * out_step, cos + r * table_step,
                         sin + r * table_step, half, inverse);
    } else {
      rotate_pairs<false>(x + r * in_step, out + r * out_step, cos + r * table_step,
                          sin + r * table_step, half, inverse);
    }
  }
}

// One row of Dh channels: rotate_rows of one row (its clone, its bfloat16 rows).
template <typename scalar_t, typename table_t>
C10_ALWAYS_INLINE void rotate_row(const scalar_t* x, scalar_t* out, const table_t* cos,
                                  const table_t* sin, int64_t half, bool interleaved,
                                  bool inverse) {
  rotate_rows(x, out, 0, 0, 1, cos, sin, 0, half, interleaved, inverse);
}

} // namespace
} // namespace cpu
} // namespace ops
} // namespace posenc
