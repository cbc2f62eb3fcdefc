#pragma once

// The arguments of posenc's operators after validation: every backend's kernel (composite, CPU,
// CUDA) starts with the same prepare_* call, so all of them accept and reject exactly the same
// calls with the same messages, and each call is validated once, at the operator boundary.
//
// Positions past a table (allowed when the caller passes the encoding's definition as data:
// `columns` for a sinusoidal table, `inv_freq` for rotary caches) are handled here too: the call
// is rewritten to a table of exactly the rows used and positions indexing it, so the kernels only
// ever read rows that exist.

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

// --- The positions and tables of a call, for the families' prepare_* functions ------------------

/// True when an optional tensor argument is given (has a value that is defined).
bool given(OptionalTensor tensor);

/// The smallest and largest value of an int64 CPU tensor ({0, -1} when empty).
std::pair<int64_t, int64_t> whole_range(const at::Tensor& host);

/// What resolving a call's positions found out.
struct Resolved {
  bool past = false; // some position lies at or past the table's end (only when extendable)
  at::Tensor host;   // then: every position on the host, int64, of the positions' shape
  std::pair<int64_t, int64_t> ids{0, -1}; // the range of `ids`, when given
  // Device-resident positions whose rows are computed on the device (a call that may reach past
  // the table: it has the definition); `past` is then true. Never read on the host.
  at::Tensor device;
};

/// Checks the positions of a call (offset form or explicit) against a table of `max_len` rows and
/// fills `source`. Reads from the device at most once: the extremes of `ids` (token ids) and of the
/// positions, or, when positions may lie past the table (`extendable`), all positions.
Resolved resolve_positions(PositionSource& source, OptionalTensor positions, int64_t offset,
                           at::IntArrayRef per_sequence, const char* per_sequence_name,
                           const c10::Device& device, int64_t max_len, bool extendable,
                           const char* definition, const at::Tensor& ids = at::Tensor());

/// Positions 0 .. N-1 over the N positions of `host` (-1 kept for integer padding), on `device`:
/// they index a table of exactly the rows used.
at::Tensor index_positions(const at::Tensor& host, const c10::Device& device);

/// index_positions for device-resident positions, computed there.
at::Tensor index_positions_on_device(const at::Tensor& positions);

/// The rows of exactly `positions` (device-resident, int64 with -1 for padding or float64): a row
/// of `table` ([max_len, W]) where an integer position lies in it, else the row `computed` holds
/// for it ([N, W], computed from the definition), on the device, in the table's dtype.
at::Tensor rows_on_device(const at::Tensor& table, const at::Tensor& positions,
                          const at::Tensor& computed);

/// Rows past a sinusoidal table, for device-resident positions, from the column plan `columns`
/// on the device: the call is rewritten to those rows and positions indexing them.
void extend_table_on_device(TableCall& call, const at::Tensor& positions,
                            const at::Tensor& columns);

/// Rows past a sinusoidal table: the rows of exactly the positions used (`host`), gathered from
/// the table where they exist and computed from the column plan where they do not; the call is
/// rewritten to those rows and positions indexing them.
void extend_table(TableCall& call, const at::Tensor& host, const at::Tensor& columns,
                  int64_t max_len);

/// A table call over `sizes` ([B, L, ...] or [L, B, ...]) before its positions are resolved.
TableCall table_call(const at::Tensor& table, int64_t width, at::IntArrayRef sizes,
                     bool batch_first, double scale);

/// A table (or cos/sin cache) as the hand-written kernels read it: contiguous float32 or float64,
/// as given when it is, else widened (float16/bfloat16 to float32, exactly) and made contiguous.
at::Tensor kernel_readable(const at::Tensor& table);

// --- Written tensors, devices, autograd -------------------------------------------------------

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
