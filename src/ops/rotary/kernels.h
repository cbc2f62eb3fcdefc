#pragma once

// The rotary family's kernel bodies, for the CPU and the CUDA kernels alike: the rotation of one
// pair (the arithmetic both backends run), and what one CUDA thread computes for apply_rotary and
// apply_rotary_qk, one body for both (apply_rotary is apply_rotary_qk without keys): which N
// pairs of which head row, its position and cos/sin row, padding, the channels past a partial
// rotation, the inverse rotation. `run_rotary_grid` and `run_rotary_qk_grid` build the body of a
// checked call for the widest loads its pointers and strides allow and the narrowest index type
// its sizes allow, and hand it to an executor: the CUDA launcher (cuda_kernel.cu) or
// the CPU emulation of the grid in the tests.

#include "ops/common/backend_entries.h"
#include "ops/common/kernel_helpers.h"
#include "ops/common/launch.h"
#include "ops/rotary/backend_entries.h"

#include <ATen/Dispatch.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

namespace posenc {
namespace ops {
namespace kernels {

/// The pair (a, b) turned by the angle whose cosine and sine are `c` and `s` (by minus that angle
/// when `inverse`; -s is exact), each result rounded once to scalar_t. Each product and sum rounds
/// on its own (no contraction: -ffp-contract=off, nvcc -fmad=false).
template <typename scalar_t, typename table_t>
C10_HOST_DEVICE C10_ALWAYS_INLINE void rotate_values(scalar_t& a, scalar_t& b, table_t c, table_t s,
                                                     bool inverse) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const acc_t x = load<acc_t>(a);
  const acc_t y = load<acc_t>(b);
  const acc_t cc = static_cast<acc_t>(c);
  const acc_t ss = inverse ? -static_cast<acc_t>(s) : static_cast<acc_t>(s);
  a = store<scalar_t>(x * cc - y * ss);
  b = store<scalar_t>(x * ss + y * cc);
}

/// Rotates the pair (x[ia], x[ib]) into out[ia], out[ib] (rotate_values); out may be x. The CPU
/// kernels' row loops.
template <typename scalar_t, typename table_t>
C10_HOST_DEVICE C10_ALWAYS_INLINE void rotate_pair(const scalar_t* x, scalar_t* out, int64_t ia,
                                                   int64_t ib, table_t c, table_t s, bool inverse) {
  scalar_t a = x[ia];
  scalar_t b = x[ib];
  rotate_values(a, b, c, s, inverse);
  out[ia] = a;
  out[ib] = b;
}

/// Rotates the N pairs k0 .. k0 + N - 1 of the row at x into the row at out (out may be x) by
/// the cos/sin values c[0 .. N), s[0 .. N) (null: padding, copied). The pairs' channels are two
/// runs of N: (k0 .., half + k0 ..) split in halves, the 2N channels from 2 * k0 interleaved, whose
/// pairs are neighbours inside each run (N = 1: the run's one channel each). Each run, and each
/// run of N table values, is one access of N elements (aligned so, when N > 1).
template <int N, typename scalar_t, typename table_t, typename index_t>
C10_HOST_DEVICE C10_ALWAYS_INLINE void rotate_run(const scalar_t* x, scalar_t* out,
                                                  const table_t* c, const table_t* s, index_t half,
                                                  index_t k0, bool interleaved, bool inverse) {
  using Run = Pack<scalar_t, N>;
  using Values = Pack<table_t, N>;
  const index_t first = interleaved ? 2 * k0 : k0;
  const index_t second = interleaved ? 2 * k0 + N : half + k0;
  Run u = *reinterpret_cast<const Run*>(x + first);
  Run v = *reinterpret_cast<const Run*>(x + second);
  if (c == nullptr) { // padding: not rotated
    if (x == out) {
      return;
    }
  } else {
    const Values cc = *reinterpret_cast<const Values*>(c);
    const Values ss = *reinterpret_cast<const Values*>(s);
    if (N > 1 && interleaved) {
      POSENC_UNROLL
      for (int i = 0; i < N / 2; ++i) {
        rotate_values(u.value[2 * i], u.value[2 * i + 1], cc.value[i], ss.value[i], inverse);
        rotate_values(v.value[2 * i], v.value[2 * i + 1], cc.value[N / 2 + i], ss.value[N / 2 + i],
                      inverse);
      }
    } else {
      POSENC_UNROLL
      for (int i = 0; i < N; ++i) {
        rotate_values(u.value[i], v.value[i], cc.value[i], ss.value[i], inverse);
      }
    }
  }
  *reinterpret_cast<Run*>(out + first) = u;
  *reinterpret_cast<Run*>(out + second) = v;
}

/// One CUDA thread's item of apply_rotary_qk (and of apply_rotary, with no key heads). The T
/// tokens (b * L + l) each have S = Hq + Hk head slots (the query heads, then the key heads),
/// and each slot `chunks + rest_width` items: item j < chunks rotates the N pairs from j * N
/// (rotate_run), item chunks + j copies channel 2 * half + j (out of place, partial rotary, for
/// j below the slot's own rest; narrower operands skip). Consecutive items are consecutive runs
/// of one row, so a warp's accesses are contiguous. N > 1 needs half % N == 0 and every row start
/// and table row aligned to N elements (rotary_vector_width).
template <typename scalar_t, typename table_t, typename index_t, int N>
struct RotaryGridBody {
  static constexpr int kWidth = N; // pairs an item rotates
  static constexpr int kIndexBits = 8 * static_cast<int>(sizeof(index_t));
  OperandRows<scalar_t, index_t> q;
  OperandRows<scalar_t, index_t> k;
  const table_t* cos;
  const table_t* sin;
  index_t tokens;
  index_t length;
  index_t half;
  int64_t table_rows;
  RotaryRows where; // the tokens' positions (RotaryRows::tokens_of)
  bool interleaved;
  bool inverse;
  index_t rest_width;

  int64_t work() const {
    return static_cast<int64_t>(tokens) * (q.heads + k.heads) * (half / N + rest_width);
  }

  C10_HOST_DEVICE void operator()(int64_t item) const {
    const index_t slots = q.heads + k.heads;
    const index_t chunks = half / N;
    const index_t index = static_cast<index_t>(item);
    const index_t row = index / (chunks + rest_width);
    const index_t j = index - row * (chunks + rest_width);
    const index_t t = row / slots;
    const index_t slot = row - t * slots;
    const index_t b = t / length;
    const index_t l = t - b * length;
    const bool is_q = slot < q.heads;
    const OperandRows<scalar_t, index_t> side = is_q ? q : k; // selected, not addressed
    const index_t h = is_q ? slot : slot - q.heads;
    const scalar_t* xi = side.in + side.in_rows.row(b, l, h);
    scalar_t* oi = side.out + side.out_rows.row(b, l, h);
    if (j >= chunks) { // out of place: channel 2 * half + (j - chunks) of the head, if it has one
      const index_t c = 2 * half + (j - chunks);
      if (c < side.head_dim) {
        oi[c] = xi[c];
      }
      return;
    }
    const int64_t p = checked_position(where.position_at(b, l), table_rows);
    const index_t k0 = j * N;
    const index_t at = static_cast<index_t>(p) * half + k0;
    rotate_run<N>(xi, oi, p < 0 ? nullptr : cos + at, p < 0 ? nullptr : sin + at, half, k0,
                  interleaved, inverse);
  }
};

/// The widest run (1, 2, 4 or 8 elements, one 16-byte access at most) that every row of the
/// operands and every cos/sin row allow: half a multiple of it, every data pointer and row stride
/// of the operands (of dimensions longer than 1) aligned to it, cos and sin aligned to N table
/// values (host code).
inline int rotary_vector_width(const std::initializer_list<const RotaryOperand*>& operands,
                               const at::Tensor& cos, const at::Tensor& sin, int64_t half) {
  const int64_t element = operands.begin()[0]->in.element_size();
  int n = element >= 16 ? 1 : static_cast<int>(16 / element);
  while (n > 1 && half % n != 0) {
    n /= 2;
  }
  const auto aligned = [&](const at::Tensor& t, int64_t bytes) {
    if (reinterpret_cast<uintptr_t>(t.data_ptr()) % bytes != 0) {
      return false;
    }
    for (int64_t d = 0; d + 1 < t.dim(); ++d) { // the channels are contiguous
      if (t.size(d) > 1 && t.stride(d) % n != 0) {
        return false;
      }
    }
    return true;
  };
  while (n > 1) {
    bool ok = aligned(cos, n * cos.element_size()) && aligned(sin, n * sin.element_size());
    for (const RotaryOperand* operand : operands) {
      ok = ok && (operand->heads == 0 ||
                  (aligned(operand->in, n * element) && aligned(operand->out, n * element)));
    }
    if (ok) {
      return n;
    }
    n /= 2;
  }
  return 1;
}

/// Builds the thread body of a checked rotary call over the operands q and k (k.heads == 0: none;
/// out of place, the channels past R/2 pairs of each head are copied) and runs it with
/// `execute(body, work)`: the CUDA launcher, or the tests' emulated grid.
template <typename Execute>
void run_rotary_operands(const RotaryOperand& q, const RotaryOperand& k, const RotaryCall& call,
                         bool interleaved, bool inverse, const Execute& execute) {
  const int64_t tokens = call.batch * call.length;
  if (tokens == 0 || q.heads + k.heads == 0) {
    return;
  }
  const bool in_place = q.in.is_same(q.out);
  const at::Tensor cos = call.kernel_cos();
  const at::Tensor sin = call.kernel_sin();
  const int64_t rest_width =
      in_place ? 0 : std::max(q.head_dim, k.heads > 0 ? k.head_dim : 0) - 2 * call.half;
  const int n = rotary_vector_width({&q, &k}, cos, sin, call.half);
  const int64_t work = tokens * (q.heads + k.heads) * (call.half / n + rest_width);
  const bool narrow = fits_int32({work, cos.numel(), element_extent(q.in), element_extent(q.out),
                                  element_extent(k.in), element_extent(k.out)});
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, q.in.scalar_type(), "posenc_apply_rotary_grid", [&] {
        with_table_data(cos, [&](const auto* c) {
          using table_t = std::remove_const_t<std::remove_pointer_t<decltype(c)>>;
          with_vector_width<scalar_t>(n, [&](auto width) {
            with_index_type(narrow, [&](auto index) {
              using index_t = decltype(index);
              using Body = RotaryGridBody<scalar_t, table_t, index_t, decltype(width)::value>;
              const Body body{operand_rows<scalar_t, index_t>(q, call.heads_first),
                              operand_rows<scalar_t, index_t>(k, call.heads_first),
                              c,
                              sin.data_ptr<table_t>(),
                              static_cast<index_t>(tokens),
                              static_cast<index_t>(call.length),
                              static_cast<index_t>(call.half),
                              cos.numel() / call.half,
                              RotaryRows::tokens_of(call),
                              interleaved,
                              inverse,
                              static_cast<index_t>(rest_width)};
              execute(body, body.work());
            });
          });
        });
      });
}

/// Builds the thread body of a checked apply_rotary call (x and out contiguous, out may be x) and
/// runs it with `execute`: the queries alone.
template <typename Execute>
void run_rotary_grid(const at::Tensor& x, at::Tensor& out, const RotaryCall& call, bool interleaved,
                     bool inverse, const Execute& execute) {
  const RotaryOperand operand{x, out, call.heads, call.head_dim};
  const RotaryOperand none{x, out, 0, call.head_dim};
  run_rotary_operands(operand, none, call, interleaved, inverse, execute);
}

/// Builds the thread body of a checked apply_rotary_qk call and runs it with `execute`.
template <typename Execute>
void run_rotary_qk_grid(const RotaryOperand& q, const RotaryOperand& k, const RotaryQkCall& call,
                        bool interleaved, bool inverse, const Execute& execute) {
  run_rotary_operands(q, k, call, interleaved, inverse, execute);
}

} // namespace kernels
} // namespace ops
} // namespace posenc
