#pragma once

// The arguments of posenc's operators after validation: every backend's kernel (composite, CPU,
// CUDA) starts with the same prepare_* call, so all of them accept and reject exactly the same
// calls with the same messages, and each call is validated once, at the operator boundary.
//
// Positions past a table (allowed when the caller passes the encoding's definition as data:
// `columns` for a sinusoidal table, `inv_freq` for rotary caches) are handled here too: the call
// is rewritten to a table of exactly the rows used and positions indexing it, so the kernels only
// ever read rows that exist.

#include "detail/rotary.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

namespace posenc {
namespace ops {

using OptionalTensor = const c10::optional<at::Tensor>&;

/// The positions of a `[B, L, ...]` (or `[L, B, ...]`) input, after checking.
struct PositionSource {
  /// Checked contiguous int64 positions, `[L]` (shared) or `[B, L]` / `[L, B]` (per sequence),
  /// -1 for padding; undefined: positions `offset .. offset + L - 1`.
  at::Tensor positions;
  int64_t offset = 0;
  int64_t batch = 0;
  int64_t length = 0;

  bool per_sequence() const {
    return positions.defined() && positions.dim() == 2;
  }

  /// The positions' data, or null in the offset form (host code).
  const int64_t* position_data() const {
    return positions.defined() ? positions.data_ptr<int64_t>() : nullptr;
  }
};

/// A checked call of an operator that adds rows of a position table.
struct TableCall : PositionSource {
  /// The `[rows, D]` table the positions index (the caller's, or the rows used, when some lie past
  /// its end).
  at::Tensor table;
  int64_t width = 0;
  bool batch_first = true;
  double scale = 1.0;

  /// The table as the hand-written kernels read it: contiguous, float32 or float64 (a 16-bit
  /// table is widened, exactly).
  at::Tensor kernel_table() const;
};

/// Checks the arguments of add_position_table and its in-place and out variants.
TableCall prepare_table_call(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                             OptionalTensor positions, bool batch_first, double scale,
                             OptionalTensor columns);

/// Checks the arguments of token_and_position_embedding: int64 token ids `[B, L]` / `[L, B]` in
/// [0, vocab), a floating weight `[vocab, D]`, a table with D columns, positions, dropout.
/// Checks the token embedding's padding_idx: -1 (none) or a row of the weight.
void check_padding_idx(int64_t padding_idx, int64_t vocab_size);

TableCall prepare_token_call(const at::Tensor& tokens, const at::Tensor& weight,
                             const at::Tensor& table, int64_t offset, OptionalTensor positions,
                             bool batch_first, double scale, double dropout,
                             OptionalTensor columns);

/// A checked call of apply_rotary.
struct RotaryCall : PositionSource {
  /// `[rows, R/2]` caches the positions index (the caller's, or the rows used).
  at::Tensor cos;
  at::Tensor sin;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t half = 0;
  bool heads_first = false;

  /// cos and sin as the hand-written kernels read them: contiguous, float32 or float64.
  at::Tensor kernel_cos() const;
  at::Tensor kernel_sin() const;
};

/// Checks the arguments of apply_rotary and apply_rotary_.
RotaryCall prepare_rotary_call(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                               int64_t offset, OptionalTensor positions, bool heads_first,
                               OptionalTensor inv_freq, double attention_factor);

/// A checked call of apply_rotary_qk: the RotaryCall fields describe the queries (their heads and
/// width), the keys share their batch, length and positions.
struct RotaryQkCall : RotaryCall {
  int64_t k_heads = 0;
  int64_t k_head_dim = 0;
};

/// Checks the arguments of apply_rotary_qk and apply_rotary_qk_: q as apply_rotary's x; k of q's
/// dtype, device, batch and length, any number of heads (GQA, MQA), any width >= R.
RotaryQkCall prepare_rotary_qk_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                    const at::Tensor& sin, int64_t offset, OptionalTensor positions,
                                    bool heads_first, OptionalTensor inv_freq,
                                    double attention_factor);

/// The frequencies (and the factor cos/sin carry) in `inv_freq`, checked for caches like `cos`
/// (float64 `[R/2]` on cos's device, finite angles, the factor a finite number of cos's dtype).
detail::RopeFrequencies given_frequencies(const at::Tensor& inv_freq, const at::Tensor& cos,
                                          double attention_factor);

/// A checked call of multimodal_rotary_tables.
struct MultimodalTablesCall {
  /// int64 `[3, N]` positions (temporal, height, width) of the N tokens, on the caches' device.
  at::Tensor positions;
  /// The same on the CPU when some lie past the caches (their rows are then computed from
  /// `frequencies`); undefined otherwise.
  at::Tensor host_positions;
  detail::RopeFrequencies frequencies;
  /// Device-resident positions with inv_freq: the frequencies, on the device (the rows are
  /// computed there, rotary_rows_on_device); undefined otherwise.
  at::Tensor inv_freq;
  /// The axis of each frequency (detail::mrope_axes).
  std::vector<int64_t> axes;
  /// The shape of each output: the positions' `[B, L]` or `[L]`, then R/2.
  std::vector<int64_t> shape;
};

/// cos/sin rows for exactly `positions` (device-resident int64, -1 padding, or float64): the
/// caches' rows where an integer position lies in them, else computed on the device from the
/// float64 frequencies `inv_freq` (angle = position * frequency in float64, times
/// attention_factor, rounded once to the caches' dtype). Nothing is read back to the host.
std::pair<at::Tensor, at::Tensor> rotary_rows_on_device(const at::Tensor& cos,
                                                       const at::Tensor& sin,
                                                       const at::Tensor& positions,
                                                       const at::Tensor& inv_freq,
                                                       double attention_factor);

/// Checks the arguments of multimodal_rotary_tables: caches as in apply_rotary, positions
/// `[3, B, L]` / `[3, L]`, >= 0 and inside the caches unless `inv_freq` is given, mrope_section.
MultimodalTablesCall prepare_multimodal_tables_call(const at::Tensor& cos, const at::Tensor& sin,
                                                    const at::Tensor& positions,
                                                    at::IntArrayRef mrope_section, bool interleaved,
                                                    OptionalTensor inv_freq,
                                                    double attention_factor);

/// Checks the `out` tensor of an out-variant: defined, on the device and of the dtype of `x`.
void check_out(const at::Tensor& out, const at::Tensor& x);

/// Prepares the `out` tensor of an out-variant: checked (check_out), resized to x's shape by
/// PyTorch's rule (silently when empty, else with its deprecation warning), and overlapping
/// neither itself nor `x` in part (`out` may be `x`).
void prepare_out(at::Tensor& out, const at::Tensor& x);

/// An input of a call that writes a tensor, by name ("the table", "positions").
struct NamedInput {
  NamedInput(const char* name, const at::Tensor& tensor) : name(name), tensor(&tensor) {}
  NamedInput(const char* name, OptionalTensor tensor)
      : name(name), tensor(tensor.has_value() ? &*tensor : nullptr) {}
  const char* name;
  const at::Tensor* tensor; // null or undefined: not given
};

/// Checks that `written` (an in-place target or `out`, named `written_name`) shares no memory with
/// any of `inputs` (undefined ones skipped): the kernels read them while writing, so any overlap
/// would give a result that depends on the order of the writes (or, for q and k, rotate an element
/// twice). Raises, as ATen's assert_no_overlap does, and also where ATen cannot decide: strided
/// views of one buffer are compared exactly (detail::tensors_share), and a pair it cannot decide
/// either is refused.
void check_no_overlap(const at::Tensor& written, const char* written_name,
                      std::initializer_list<NamedInput> inputs);

/// Checks that every tensor argument of _token_and_position_embedding_backward lies on the
/// weight's device.
void check_token_backward_devices(const at::Tensor& grad, const at::Tensor& mask,
                                  const at::Tensor& tokens, const at::Tensor& weight,
                                  const at::Tensor& table, OptionalTensor positions);

/// Checks that an optional definition tensor (`columns`, `inv_freq`), when given, lies on the
/// call's `device`.
void check_definition_device(OptionalTensor tensor, const char* what, const c10::Device& device);

/// True when no argument needs autograd: then the forward may skip the autograd layer.
bool below_autograd_suffices(const at::Tensor& a, const at::Tensor& b = at::Tensor());

/// `tensor` or an undefined tensor, and back: saved tensors cannot be optional.
c10::optional<at::Tensor> optional_of(const at::Tensor& tensor);
at::Tensor defined_or_empty(OptionalTensor tensor);

} // namespace ops
} // namespace posenc
