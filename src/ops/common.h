#pragma once

// Argument handling shared by the kernels of every backend (composite, CPU, CUDA), so that all of
// them accept and reject exactly the same calls with the same messages.

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>

namespace posenc {
namespace ops {

using OptionalTensor = const c10::optional<at::Tensor>&;

/// Where the rows of an addition come from, after checking.
struct TableCall {
  at::Tensor table; // as given: [max_len, D] or [1, max_len, D]
  int64_t max_len = 0;
  int64_t width = 0;    // D
  at::Tensor positions; // checked int64 positions ([L] or per sequence), or undefined: offset form
  int64_t length = 0;   // L
  int64_t batch = 0;    // B

  /// The table as a [max_len, D] view.
  at::Tensor rows() const {
    return table.dim() == 3 ? table.select(0, 0) : table;
  }
};

/// Checks the arguments of add_position_table and its variants.
TableCall prepare_table_call(const char* who,
                             const at::Tensor& x,
                             const at::Tensor& table,
                             int64_t offset,
                             OptionalTensor positions,
                             bool batch_first,
                             double scale);

/// Checked arguments of apply_rotary and its variants.
struct RotaryCall {
  at::Tensor positions; // checked int64 positions ([L] or [B, L]), or undefined
  int64_t batch = 0, length = 0, heads = 0, head_dim = 0, half = 0;
};

/// Checks the arguments of apply_rotary and its variants.
RotaryCall prepare_rotary_call(const char* who,
                               const at::Tensor& x,
                               const at::Tensor& cos,
                               const at::Tensor& sin,
                               int64_t offset,
                               OptionalTensor positions,
                               bool heads_first);

/// Checks the arguments of token_and_position_embedding: token ids `[B, L]` / `[L, B]` in
/// [0, vocab), a floating weight `[vocab, D]`, a table with D columns, positions, dropout.
TableCall prepare_token_call(const char* who,
                             const at::Tensor& tokens,
                             const at::Tensor& weight,
                             const at::Tensor& table,
                             int64_t offset,
                             OptionalTensor positions,
                             bool batch_first,
                             double scale,
                             double dropout);

/// Prepares the `out` tensor of an out-variant: checks that it is defined, on the device and of the
/// dtype of `x`, and either of x's shape or empty (then resizes it to x's shape), and that it
/// overlaps neither itself nor `x` in part.
void prepare_out(const char* who, at::Tensor& out, const at::Tensor& x);

/// True when the hand-written CPU and CUDA kernels read `table` directly: contiguous, float32 or
/// float64. Other tables go to the composite kernels.
bool hand_kernels_read(const at::Tensor& table);

/// True when no argument needs autograd: then the forward may skip the autograd layer.
bool below_autograd_suffices(const at::Tensor& a, const at::Tensor& b = at::Tensor());

} // namespace ops
} // namespace posenc
