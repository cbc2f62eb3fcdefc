#include "ops/rotary/bfloat16_rows.h"

#include "ops/common/kernel_helpers.h"

#include <c10/util/Exception.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define POSENC_AVX512_BF16 1
#define POSENC_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
#endif

namespace posenc {
namespace ops {
namespace cpu {

#if defined(POSENC_AVX512_BF16)
namespace {

// 16 bfloat16 values widened to float32 (exact: a 16-bit shift). (The zero-masked forms: GCC 12
// warns about the unmasked ones' undefined pass-through operand.)
POSENC_TARGET_BF16 inline __m512 load16(const c10::BFloat16* p) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __mmask16 all = 0xFFFF;
  return _mm512_castsi512_ps(
      _mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, bits), 16));
}

// The two rows of 16 float32 values rounded to bfloat16 at p and q: in hardware (one conversion
// for both) unless one is NaN or subnormal (fpclass: quiet NaN 0x01, subnormal 0x20, signaling
// NaN 0x80), then as store<BFloat16>.
POSENC_TARGET_BF16 inline void store32(c10::BFloat16* p, __m512 first, c10::BFloat16* q,
                                       __m512 second) {
  constexpr int kNanOrSubnormal = 0xA1;
  if ((_mm512_fpclass_ps_mask(first, kNanOrSubnormal) |
       _mm512_fpclass_ps_mask(second, kNanOrSubnormal)) == 0) {
    // (second's values in the upper half, first's in the lower)
    const __m512i both = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(second, first));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_maskz_extracti64x4_epi64(0xF, both, 0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                        _mm512_maskz_extracti64x4_epi64(0xF, both, 1));
    return;
  }
  alignas(64) float lanes[32];
  _mm512_store_ps(lanes, first);
  _mm512_store_ps(lanes + 16, second);
  for (int i = 0; i < 16; ++i) {
    p[i] = store<c10::BFloat16>(lanes[i]);
    q[i] = store<c10::BFloat16>(lanes[16 + i]);
  }
}

} // namespace

bool bf16_rows_supported() {
  static const bool supported =
      __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return supported;
}

POSENC_TARGET_BF16 void rotate_halves_bf16(const c10::BFloat16* x, c10::BFloat16* out,
                                           int64_t in_step, int64_t out_step, int64_t rows,
                                           const float* cos, const float* sin,
                                           int64_t table_step, int64_t half, bool inverse) {
  TORCH_INTERNAL_ASSERT(half % 16 == 0 && bf16_rows_supported());
  const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32(inverse ? INT32_MIN : 0));
  for (int64_t r = 0; r < rows; ++r) {
    const c10::BFloat16* xi = x + r * in_step;
    c10::BFloat16* oi = out + r * out_step;
    const float* ci = cos + r * table_step;
    const float* si = sin + r * table_step;
    for (int64_t j = 0; j < half; j += 16) {
      const __m512 a = load16(xi + j);
      const __m512 b = load16(xi + half + j);
      const __m512 c = _mm512_loadu_ps(ci + j);
      const __m512 s = _mm512_xor_ps(_mm512_loadu_ps(si + j), sign); // -s: exact
      // (as rotate_values: a * c - b * s and a * s + b * c, each operation rounded on its own)
      store32(oi + j, _mm512_sub_ps(_mm512_mul_ps(a, c), _mm512_mul_ps(b, s)), oi + half + j,
              _mm512_add_ps(_mm512_mul_ps(a, s), _mm512_mul_ps(b, c)));
    }
  }
}

#else

bool bf16_rows_supported() {
  return false;
}

void rotate_halves_bf16(const c10::BFloat16*, c10::BFloat16*, int64_t, int64_t, int64_t,
                        const float*, const float*, int64_t, int64_t, bool) {
  TORCH_INTERNAL_ASSERT(false, "rotate_halves_bf16 needs AVX512-BF16 (bf16_rows_supported)");
}

#endif

} // namespace cpu
} // namespace ops
} // namespace posenc
