#pragma once

// The rotary operators' kernels for a backend with hand-written loops (CPU, CUDA), written once:
// the backend supplies its loops and its allocation (ops/common/backend_entries.h); and where a
// rotary input's rows lie, for the loops of every backend.

#include "detail/checks.h"
#include "ops/common/backend_entries.h"
#include "ops/common/kernel_helpers.h"
#include "ops/rotary/arguments.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>

#include <tuple>

namespace posenc {
namespace ops {

/// The position of row `i` of a rotary input `[B, L, H, Dh]` (or `[B, H, L, Dh]` with
/// heads_first) viewed as B*L*H rows of Dh; positions are `[L]` or `[B, L]`.
struct RotaryRows {
  int64_t length;
  int64_t heads;
  bool heads_first;
  int64_t offset;
  const int64_t* positions;
  bool per_sequence;

  /// The rows of a checked rotary call (host code).
  static RotaryRows of(const RotaryCall& call) {
    return {call.length, call.heads,           call.heads_first,
            call.offset, call.position_data(), call.per_sequence()};
  }

  C10_HOST_DEVICE int64_t position(int64_t i) const {
    int64_t b;
    int64_t l;
    if (heads_first) {
      l = i % length;
      b = i / (length * heads);
    } else {
      l = (i / heads) % length;
      b = i / (heads * length);
    }
    if (positions == nullptr) {
      return offset + l;
    }
    return per_sequence ? positions[b * length + l] : positions[l];
  }

  /// The position of token (b, l), for a grid that knows both (index_t: its index type).
  template <typename index_t>
  C10_HOST_DEVICE int64_t position_at(index_t b, index_t l) const {
    if (positions == nullptr) {
      return offset + l;
    }
    return per_sequence ? positions[b * static_cast<index_t>(length) + l] : positions[l];
  }

  /// The positions of a checked rotary call's tokens: position(t) of token t = b * L + l,
  /// whatever the layout of the heads.
  static RotaryRows tokens_of(const RotaryCall& call) {
    return {call.length, 1, false, call.offset, call.position_data(), call.per_sequence()};
  }
};

/// Where the rows of a `[B, L, H, Dh]` (or `[B, H, L, Dh]`) operand whose channels are contiguous
/// lie: row (b, l, h) starts at element b * batch + l * length + h * head, so that views (the
/// queries and keys of a fused qkv projection) are read and written where they are. index_t: the
/// index type of the kernel's arithmetic (a grid's may be 32-bit).
template <typename index_t = int64_t>
struct RowStrides {
  index_t batch;
  index_t length;
  index_t head;

  static RowStrides of(const at::Tensor& t, bool heads_first) {
    return {static_cast<index_t>(t.stride(0)), static_cast<index_t>(t.stride(heads_first ? 2 : 1)),
            static_cast<index_t>(t.stride(heads_first ? 1 : 2))};
  }

  C10_HOST_DEVICE index_t row(index_t b, index_t l, index_t h) const {
    return b * batch + l * length + h * head;
  }
};

/// One operand (queries or keys) of the rotary_qk kernels: the data read and written (the same in
/// place), where each row lies in both, and its heads, with index_t arithmetic.
template <typename scalar_t, typename index_t = int64_t>
struct OperandRows {
  const scalar_t* in;
  scalar_t* out;
  RowStrides<index_t> in_rows;
  RowStrides<index_t> out_rows;
  index_t heads;
  index_t head_dim;
};

/// out = rotate(x) for a checked call; x and out contiguous, out may be x.
using RotaryLoop = void (*)(const at::Tensor& x, at::Tensor& out, const RotaryCall& call,
                            bool interleaved, bool inverse);

/// One operand (queries or keys) of a rotary_qk loop: the tensor read and the one written (the
/// same tensor in place), both with contiguous channels, and its heads.
struct RotaryOperand {
  at::Tensor in;
  at::Tensor out;
  int64_t heads;
  int64_t head_dim;
};

/// The pointers and row strides of `operand` (host code), in index_t (its offsets fit).
template <typename scalar_t, typename index_t = int64_t>
OperandRows<scalar_t, index_t> operand_rows(const RotaryOperand& operand, bool heads_first) {
  return {operand.in.data_ptr<scalar_t>(),
          operand.out.data_ptr<scalar_t>(),
          RowStrides<index_t>::of(operand.in, heads_first),
          RowStrides<index_t>::of(operand.out, heads_first),
          static_cast<index_t>(operand.heads),
          static_cast<index_t>(operand.head_dim)};
}

/// Rotates the queries and keys of one call in one pass: q.out = rotate(q.in), k.out =
/// rotate(k.in) at the call's positions; channels contiguous, other strides free, out may be in.
using RotaryQkLoop = void (*)(const RotaryOperand& q, const RotaryOperand& k,
                              const RotaryQkCall& call, bool interleaved, bool inverse);

template <RotaryLoop loop, EmptyFn empty>
at::Tensor apply_rotary_kernel(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                               int64_t offset, OptionalTensor positions, bool interleaved,
                               bool heads_first, bool inverse, OptionalTensor inv_freq,
                               double attention_factor) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, "posenc::apply_rotary");
  const RotaryCall call =
      prepare_rotary_call(x, cos, sin, offset, positions, heads_first, inv_freq, attention_factor);
  at::Tensor out = empty(x.sizes(), x.options());
  loop(x.contiguous(), out, call, interleaved, inverse);
  return out;
}

template <RotaryLoop loop, EmptyFn empty>
void apply_rotary_inplace_kernel(at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                 int64_t offset, OptionalTensor positions, bool interleaved,
                                 bool heads_first, bool inverse, OptionalTensor inv_freq,
                                 double attention_factor) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, "posenc::apply_rotary_");
  const RotaryCall call =
      prepare_rotary_call(x, cos, sin, offset, positions, heads_first, inv_freq, attention_factor);
  check_no_overlap(x, "x",
                   {{"cos", cos}, {"sin", sin}, {"positions", positions}, {"inv_freq", inv_freq}});
  if (x.is_contiguous()) { // (a contiguous tensor cannot overlap itself)
    loop(x, x, call, interleaved, inverse);
    return;
  }
  at::assert_no_internal_overlap(x);
  at::Tensor work = x.contiguous();
  loop(work, work, call, interleaved, inverse);
  x.copy_(work);
}

/// `t` as the rotary_qk loops read it: itself when its channels are contiguous (any other
/// strides), else a contiguous copy.
inline at::Tensor with_contiguous_channels(const at::Tensor& t) {
  return t.stride(3) == 1 ? t : t.contiguous();
}

template <RotaryQkLoop loop, EmptyFn empty>
std::tuple<at::Tensor, at::Tensor> apply_rotary_qk_kernel(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
    int64_t offset, OptionalTensor positions, bool interleaved, bool heads_first, bool inverse,
    OptionalTensor inv_freq, double attention_factor) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, "posenc::apply_rotary_qk");
  const RotaryQkCall call = prepare_rotary_qk_call(q, k, cos, sin, offset, positions, heads_first,
                                                   inv_freq, attention_factor);
  at::Tensor q_out = empty(q.sizes(), q.options());
  at::Tensor k_out = empty(k.sizes(), k.options());
  loop({with_contiguous_channels(q), q_out, call.heads, call.head_dim},
       {with_contiguous_channels(k), k_out, call.k_heads, call.k_head_dim}, call, interleaved,
       inverse);
  return {q_out, k_out};
}

template <RotaryQkLoop loop, EmptyFn empty>
void apply_rotary_qk_inplace_kernel(at::Tensor& q, at::Tensor& k, const at::Tensor& cos,
                                    const at::Tensor& sin, int64_t offset, OptionalTensor positions,
                                    bool interleaved, bool heads_first, bool inverse,
                                    OptionalTensor inv_freq, double attention_factor) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, "posenc::apply_rotary_qk_");
  const RotaryQkCall call = prepare_rotary_qk_call(q, k, cos, sin, offset, positions, heads_first,
                                                   inv_freq, attention_factor);
  check_no_overlap(
      q, "q",
      {{"k", k}, {"cos", cos}, {"sin", sin}, {"positions", positions}, {"inv_freq", inv_freq}});
  check_no_overlap(k, "k",
                   {{"cos", cos}, {"sin", sin}, {"positions", positions}, {"inv_freq", inv_freq}});
  at::assert_no_internal_overlap(q);
  at::assert_no_internal_overlap(k);
  // Views with contiguous channels (q and k of a fused qkv tensor) are rotated where they lie.
  at::Tensor q_work = with_contiguous_channels(q);
  at::Tensor k_work = with_contiguous_channels(k);
  loop({q_work, q_work, call.heads, call.head_dim}, {k_work, k_work, call.k_heads, call.k_head_dim},
       call, interleaved, inverse);
  if (!q_work.is_same(q)) {
    q.copy_(q_work);
  }
  if (!k_work.is_same(k)) {
    k.copy_(k_work);
  }
}

} // namespace ops
} // namespace posenc
