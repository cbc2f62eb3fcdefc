#pragma once

// The checked calls of the rotary operators (apply_rotary, apply_rotary_qk and their in-place
// variants, multimodal_rotary_tables): every backend starts with them, so all accept and reject
// the same calls with the same messages (ops/common/arguments.h has the positions they read).

#include "ops/common/arguments.h"
#include "detail/rotary.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace posenc {
namespace ops {

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

} // namespace ops
} // namespace posenc
