#pragma once

// The operator kernels of a backend with hand-written loops (CPU, CUDA), written once: each checks
// its call with the shared prepare_* functions, brings its arguments into the layout the loops
// read (contiguous; a fast kernel has no second, composite path) and runs the backend's loop. A
// backend supplies only its loops and its allocation:
//
//   TORCH_LIBRARY_IMPL(posenc, CPU, m) {
//     m.impl("add_position_table", TORCH_FN((add_position_table_kernel<run_add, empty_cpu>)));
//   }

#include "detail/checks.h"
#include "ops/kernel_helpers.h"
#include "ops/op_arguments.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>

#include <tuple>

namespace posenc {
namespace ops {

/// Allocates an uninitialised contiguous tensor on the backend.
using EmptyFn = at::Tensor (*)(at::IntArrayRef sizes, const at::TensorOptions& options);

/// out = x * scale + table[positions] for a checked call; x and out contiguous, out may be x.
using AddLoop = void (*)(const at::Tensor& x, at::Tensor& out, const TableCall& call);

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

/// out = dropout(weight[tokens] * scale + table[positions]) for a checked call, writing `mask`
/// when `train && dropout > 0`; tokens and weight contiguous.
using TokenLoop = void (*)(const at::Tensor& tokens, const at::Tensor& weight, at::Tensor& out,
                           at::Tensor& mask, const TableCall& call, double dropout, bool drop);

template <AddLoop loop, EmptyFn empty>
at::Tensor add_position_table_kernel(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                                     bool batch_first, OptionalTensor positions, double scale,
                                     OptionalTensor columns) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, "posenc::add_position_table");
  const TableCall call =
      prepare_table_call(x, table, offset, positions, batch_first, scale, columns);
  at::Tensor out = empty(x.sizes(), x.options());
  loop(x.contiguous(), out, call);
  return out;
}

template <AddLoop loop, EmptyFn empty>
void add_position_table_inplace_kernel(at::Tensor& x, const at::Tensor& table, int64_t offset,
                                       bool batch_first, OptionalTensor positions, double scale,
                                       OptionalTensor columns) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, "posenc::add_position_table_");
  const TableCall call =
      prepare_table_call(x, table, offset, positions, batch_first, scale, columns);
  check_no_overlap(x, "x", {{"the table", table}, {"positions", positions}, {"columns", columns}});
  if (x.is_contiguous()) { // (a contiguous tensor cannot overlap itself)
    loop(x, x, call);
    return;
  }
  at::assert_no_internal_overlap(x);
  at::Tensor work = x.contiguous();
  loop(work, work, call);
  x.copy_(work);
}

template <AddLoop loop, EmptyFn empty>
void add_position_table_out_kernel(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                                   bool batch_first, OptionalTensor positions, double scale,
                                   OptionalTensor columns, at::Tensor& out) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{},
                                   "posenc::add_position_table_out");
  const TableCall call =
      prepare_table_call(x, table, offset, positions, batch_first, scale, columns);
  prepare_out(out, x);
  check_no_overlap(out, "out",
                   {{"the table", table}, {"positions", positions}, {"columns", columns}});
  if (out.is_contiguous()) {
    loop(x.contiguous(), out, call);
    return;
  }
  at::Tensor result = empty(x.sizes(), x.options());
  loop(x.contiguous(), result, call);
  out.copy_(result);
}

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

template <TokenLoop loop, EmptyFn empty>
std::tuple<at::Tensor, at::Tensor> token_and_position_embedding_kernel(
    const at::Tensor& tokens, const at::Tensor& weight, const at::Tensor& table, int64_t offset,
    bool batch_first, OptionalTensor positions, double scale, int64_t padding_idx, double dropout,
    bool train, OptionalTensor columns) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{},
                                   "posenc::token_and_position_embedding");
  const TableCall call = prepare_token_call(tokens, weight, table, offset, positions, batch_first,
                                            scale, dropout, columns);
  // (the forward reads every row; padding_idx is the row the backward leaves without gradient)
  check_padding_idx(padding_idx, weight.size(0));
  at::Tensor out = empty({tokens.size(0), tokens.size(1), weight.size(1)}, weight.options());
  const bool drop = train && dropout > 0.0;
  at::Tensor mask =
      empty(drop ? out.sizes() : at::IntArrayRef{0}, weight.options().dtype(at::kBool));
  loop(tokens.contiguous(), weight.contiguous(), out, mask, call, dropout, drop);
  return {out, mask};
}

} // namespace ops
} // namespace posenc
