#pragma once

/// Compiles a row loop three times on x86-64 with GCC: for x86-64-v4 (AVX-512: 16 floats a
/// vector), x86-64-v3 (AVX2, which has the 32 -> 16 bit packs that bfloat16 rounding needs) and
/// the baseline; the loader picks one per machine (an ifunc). Every clone rounds each product and
/// sum on its own (-ffp-contract=off), so all give the same bits. GCC 12's SLP vectorizer fuses
/// a*c - b*s, a*s + b*c into fmaddsub in spite of -ffp-contract=off (the float64-input,
/// float32-table interleaved rotations of the v3 and v4 clones came out 1 ulp off the composite
/// kernels), so the clones are compiled without SLP vectorization; their loops still vectorize.
/// Elsewhere (clang, other architectures) the baseline alone.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define POSENC_ROW_LOOP \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), \
                 optimize("no-tree-slp-vectorize")))
#else
#define POSENC_ROW_LOOP
#endif
