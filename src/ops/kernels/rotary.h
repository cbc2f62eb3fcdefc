#pragma once

// The rotary family's kernel bodies, for the CPU and the CUDA kernels alike: the rotation of one
// pair (the arithmetic both backends run), and what one CUDA thread computes for apply_rotary and
// apply_rotary_qk (which pair of which row, its position and cos/sin row, padding, the channels
// past a partial rotation, the inverse rotation). `run_rotary_grid` and `run_rotary_qk_grid` build
// the thread bodies of a checked call and hand them to an executor: the CUDA launcher
// (../cuda/rotary_kernel.cu) or the CPU emulation of the grid in the tests.

#include "ops/backend_entries.h"
#include "ops/kernel_helpers.h"
#include "ops/kernels/launch.h"

#include <ATen/Dispatch.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace posenc {
namespace ops {
namespace kernels {

/// Rotates the pair (x[ia], x[ib]) by the angle whose cosine and sine are `c` and `s` (by minus
/// that angle when `inverse`; -s is exact) into out[ia], out[ib]; out may be x. Each product and
/// sum rounds on its own (no contraction: -ffp-contract=off, nvcc -fmad=false).
template <typename scalar_t, typename table_t>
C10_HOST_DEVICE C10_ALWAYS_INLINE void rotate_pair(const scalar_t* x, scalar_t* out, int64_t ia,
                                                   int64_t ib, table_t c, table_t s, bool inverse) {
  using acc_t = acc_type_t<scalar_t, table_t>;
  const acc_t a = load<acc_t>(x[ia]);
  const acc_t b = load<acc_t>(x[ib]);
  const acc_t cc = static_cast<acc_t>(c);
  const acc_t ss = inverse ? -static_cast<acc_t>(s) : static_cast<acc_t>(s);
  out[ia] = store<scalar_t>(a * cc - b * ss);
  out[ib] = store<scalar_t>(a * ss + b * cc);
}

/// The channels of pair k of a row of `half` pairs: (2k, 2k + 1) interleaved, (k, half + k)
/// otherwise.
C10_HOST_DEVICE C10_ALWAYS_INLINE int64_t first_of_pair(int64_t k, bool interleaved) {
  return interleaved ? 2 * k : k;
}
C10_HOST_DEVICE C10_ALWAYS_INLINE int64_t second_of_pair(int64_t k, int64_t half,
                                                         bool interleaved) {
  return interleaved ? 2 * k + 1 : k + half;
}

/// Rotates pair k of the row at x (out) by cos/sin row p of a [rows, half] table (p = -1,
/// padding: copied, out of place). The pair of a thread, and of each iteration of a CPU row loop.
template <typename scalar_t, typename table_t>
C10_HOST_DEVICE C10_ALWAYS_INLINE void rotate_pair_at(const scalar_t* x, scalar_t* out,
                                                      const table_t* cos, const table_t* sin,
                                                      int64_t p, int64_t half, int64_t k,
                                                      bool interleaved, bool inverse) {
  const int64_t ia = first_of_pair(k, interleaved);
  const int64_t ib = second_of_pair(k, half, interleaved);
  if (p < 0) { // padding: not rotated
    out[ia] = x[ia];
    out[ib] = x[ib];
    return;
  }
  rotate_pair(x, out, ia, ib, cos[p * half + k], sin[p * half + k], inverse);
}

/// One CUDA thread's item of apply_rotary over `rows` contiguous rows of `head_dim` channels:
/// items [0, rows * half) rotate pair (item % half) of row (item / half); items past them (out of
/// place, partial rotary) copy channel 2 * half + j of a row.
template <typename scalar_t, typename table_t>
struct RotaryBody {
  const scalar_t* x;
  scalar_t* out;
  const table_t* cos;
  const table_t* sin;
  int64_t rows;
  int64_t head_dim;
  int64_t half;
  int64_t table_rows;
  RotaryRows where;
  bool interleaved;
  bool inverse;
  bool copy_rest;

  int64_t work() const {
    return rows * half + (copy_rest ? rows * (head_dim - 2 * half) : 0);
  }

  C10_HOST_DEVICE void operator()(int64_t item) const {
    const int64_t pairs = rows * half;
    if (item >= pairs) { // channels past the rotated ones (out of place only)
      const int64_t rest = head_dim - 2 * half;
      const int64_t index = item - pairs;
      const int64_t row = index / rest;
      const int64_t c = row * head_dim + 2 * half + (index - row * rest);
      out[c] = x[c];
      return;
    }
    const int64_t row = item / half;
    const int64_t k = item - row * half;
    const int64_t p = checked_position(where.position(row), table_rows);
    rotate_pair_at(x + row * head_dim, out + row * head_dim, cos, sin, p, half, k, interleaved,
                   inverse);
  }
};

/// One CUDA thread's item of apply_rotary_qk: items [0, T * S * half), for T = B * L tokens and
/// S = Hq + Hk head slots (the query heads, then the key heads), rotate pair (item % half) of
/// slot (item / half) % S of token item / (half * S); items past them (out of place) copy channel
/// 2 * half + j of a head, for j < rest_width (the widest operand's rest; narrower ones skip).
template <typename scalar_t, typename table_t>
struct RotaryQkBody {
  OperandRows<scalar_t> q;
  OperandRows<scalar_t> k;
  const table_t* cos;
  const table_t* sin;
  int64_t tokens;
  int64_t length;
  int64_t half;
  int64_t table_rows;
  RotaryRows where; // the tokens' positions (RotaryRows::tokens_of)
  bool interleaved;
  bool inverse;
  int64_t rest_width;

  int64_t slots() const {
    return q.heads + k.heads;
  }

  int64_t work() const {
    return tokens * slots() * (half + rest_width);
  }

  C10_HOST_DEVICE void operator()(int64_t item) const {
    const int64_t slots = q.heads + k.heads;
    const int64_t pairs = tokens * slots * half;
    const bool rotating = item < pairs;
    const int64_t index = rotating ? item : item - pairs;
    const int64_t per_slot = rotating ? half : rest_width;
    const int64_t j = index % per_slot;
    const int64_t slot = (index / per_slot) % slots;
    const int64_t t = index / (per_slot * slots);
    const bool is_q = slot < q.heads;
    const OperandRows<scalar_t>& side = is_q ? q : k;
    const int64_t h = is_q ? slot : slot - q.heads;
    const int64_t b = t / length;
    const int64_t l = t - b * length;
    const scalar_t* xi = side.in + side.in_rows.row(b, l, h);
    scalar_t* oi = side.out + side.out_rows.row(b, l, h);
    if (!rotating) { // out of place: channel 2 * half + j of the head, if it has one
      const int64_t c = 2 * half + j;
      if (c < side.head_dim) {
        oi[c] = xi[c];
      }
      return;
    }
    const int64_t p = checked_position(where.position(t), table_rows);
    rotate_pair_at(xi, oi, cos, sin, p, half, j, interleaved, inverse);
  }
};

/// Builds the thread body of a checked apply_rotary call (x and out contiguous, out may be x)
/// and runs it with `execute(body, work)`: the CUDA launcher, or the tests' emulated grid.
template <typename Execute>
void run_rotary_grid(const at::Tensor& x, at::Tensor& out, const RotaryCall& call, bool interleaved,
                     bool inverse, const Execute& execute) {
  const int64_t rows = call.batch * call.length * call.heads;
  if (rows == 0) {
    return;
  }
  const at::Tensor cos = call.kernel_cos();
  const at::Tensor sin = call.kernel_sin();
  const bool copy_rest = !x.is_same(out) && 2 * call.half < call.head_dim;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "posenc_apply_rotary_grid", [&] {
        with_table_data(cos, [&](const auto* c) {
          using table_t = std::remove_const_t<std::remove_pointer_t<decltype(c)>>;
          const RotaryBody<scalar_t, table_t> body{x.data_ptr<scalar_t>(),
                                                   out.data_ptr<scalar_t>(),
                                                   c,
                                                   sin.data_ptr<table_t>(),
                                                   rows,
                                                   call.head_dim,
                                                   call.half,
                                                   cos.numel() / call.half,
                                                   RotaryRows::of(call),
                                                   interleaved,
                                                   inverse,
                                                   copy_rest};
          execute(body, body.work());
        });
      });
}

/// Builds the thread body of a checked apply_rotary_qk call and runs it with `execute`.
template <typename Execute>
void run_rotary_qk_grid(const RotaryOperand& q, const RotaryOperand& k, const RotaryQkCall& call,
                        bool interleaved, bool inverse, const Execute& execute) {
  const int64_t tokens = call.batch * call.length;
  if (tokens == 0 || q.heads + k.heads == 0) {
    return;
  }
  const bool in_place = q.in.is_same(q.out);
  const at::Tensor cos = call.kernel_cos();
  const at::Tensor sin = call.kernel_sin();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, q.in.scalar_type(), "posenc_apply_rotary_qk_grid", [&] {
        with_table_data(cos, [&](const auto* c) {
          using table_t = std::remove_const_t<std::remove_pointer_t<decltype(c)>>;
          const RotaryQkBody<scalar_t, table_t> body{
              operand_rows<scalar_t>(q, call.heads_first),
              operand_rows<scalar_t>(k, call.heads_first),
              c,
              sin.data_ptr<table_t>(),
              tokens,
              call.length,
              call.half,
              cos.numel() / call.half,
              RotaryRows::tokens_of(call),
              interleaved,
              inverse,
              in_place ? 0 : std::max(q.head_dim, k.head_dim) - 2 * call.half};
          execute(body, body.work());
        });
      });
}

} // namespace kernels
} // namespace ops
} // namespace posenc
