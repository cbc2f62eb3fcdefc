#include "ops/rotary/arguments.h"


#include "detail/checks.h"
#include "detail/rotary.h"
#include "detail/sinusoidal.h"
#include "detail/device_checks.h"
#include "detail/memory_overlap.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIndexing.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/where.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

namespace posenc {
namespace ops {

using detail::caller_hint;

at::Tensor RotaryCall::kernel_cos() const {
  return kernel_readable(cos);
}

at::Tensor RotaryCall::kernel_sin() const {
  return kernel_readable(sin);
}

namespace {

// cos and sin: [max_len, R/2] tables of one floating dtype on one device.
void check_caches(const at::Tensor& cos, const at::Tensor& sin) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(cos.defined() && sin.defined() && cos.dim() == 2 && cos.sizes() == sin.sizes() &&
                  cos.size(1) >= 1 && cos.size(1) <= detail::kMaxTableElements,
              who, ": cos and sin must be [max_len, R/2] tables of the same shape (R/2 <= 2^28), "
              "but got ",
              cos.defined() ? cos.sizes() : at::IntArrayRef{}, " and ",
              sin.defined() ? sin.sizes() : at::IntArrayRef{});
  detail::check_float_dtype("the dtype of cos and sin", cos.scalar_type());
  TORCH_CHECK(cos.scalar_type() == sin.scalar_type() && cos.device() == sin.device(), who,
              ": cos and sin must share dtype and device, but cos is ", cos.scalar_type(), " on ",
              cos.device(), " and sin ", sin.scalar_type(), " on ", sin.device());
}

} // namespace

detail::RopeFrequencies given_frequencies(const at::Tensor& inv_freq, const at::Tensor& cos,
                                          double attention_factor) {
  static constexpr detail::CallerName who{};
  const int64_t half = cos.size(1);
  TORCH_CHECK(inv_freq.dim() == 1 && inv_freq.size(0) == half &&
                  inv_freq.scalar_type() == at::kDouble,
              who, ": inv_freq must be a float64 [R/2] = [", half,
              "] tensor of frequencies, but got ", inv_freq.scalar_type(), " of shape ",
              inv_freq.sizes());
  check_definition_device(inv_freq, "inv_freq", cos.device());
  // cos/sin carry the factor, so it must be a finite number in their dtype.
  const double largest = cos.scalar_type() == at::kDouble ? std::numeric_limits<double>::max()
                         : cos.scalar_type() == at::kHalf ? 65504.0
                                                          : std::numeric_limits<float>::max();
  TORCH_CHECK(attention_factor > 0.0 && attention_factor <= largest, who,
              ": attention_factor must be > 0 and at most ", largest, " (the largest ",
              cos.scalar_type(), " of the cos/sin caches that carry it), but got ",
              attention_factor);
  detail::RopeFrequencies frequencies;
  frequencies.attention_factor = attention_factor;
  if (detail::checks_on_device(inv_freq.device())) {
    // Checked where it lies; the rows are computed there (rotary_rows_on_device).
    detail::check_on_device(detail::within(inv_freq, -detail::kMaxFrequency, detail::kMaxFrequency),
                            inv_freq, detail::DeviceCheck::kFrequencies);
    return frequencies;
  }
  const at::Tensor host = inv_freq.to(at::kCPU).contiguous();
  frequencies.inv_freq.assign(host.data_ptr<double>(), host.data_ptr<double>() + half);
  for (const double frequency : frequencies.inv_freq) {
    TORCH_CHECK(std::abs(frequency) <= detail::kMaxFrequency, who,
                ": inv_freq must hold frequencies in [-1.9e289, 1.9e289] (so that every angle "
                "is a finite number), but holds ",
                frequency);
  }
  frequencies.attention_factor = attention_factor;
  return frequencies;
}

std::pair<at::Tensor, at::Tensor> rotary_rows_on_device(const at::Tensor& cos,
                                                       const at::Tensor& sin,
                                                       const at::Tensor& positions,
                                                       const at::Tensor& inv_freq,
                                                       double attention_factor) {
  const auto computed =
      detail::rotary_rows_from(positions, inv_freq, attention_factor, cos.scalar_type());
  return {rows_on_device(cos, positions, computed.first),
          rows_on_device(sin, positions, computed.second)};
}

RotaryCall prepare_rotary_call(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                               int64_t offset, OptionalTensor positions, bool heads_first,
                               OptionalTensor inv_freq, double attention_factor) {
  check_caches(cos, sin);
  detail::check_rotary_input(x, 2 * cos.size(1), heads_first, cos.device());
  RotaryCall call;
  call.cos = cos;
  call.sin = sin;
  call.heads_first = heads_first;
  call.batch = x.size(0);
  call.length = x.size(heads_first ? 2 : 1);
  call.heads = x.size(heads_first ? 1 : 2);
  call.head_dim = x.size(3);
  call.half = cos.size(1);
  const detail::RopeFrequencies frequencies =
      given(inv_freq) ? given_frequencies(*inv_freq, cos, attention_factor)
                      : detail::RopeFrequencies();
  const int64_t batch_and_length[] = {call.batch, call.length};
  const Resolved resolved = resolve_positions(call, positions, offset, batch_and_length, "[B, L]",
                                              x.device(), cos.size(0), given(inv_freq), "inv_freq");
  if (resolved.device.defined()) {
    // On the device: the caches' rows where they exist, computed from inv_freq elsewhere.
    std::tie(call.cos, call.sin) =
        rotary_rows_on_device(cos, sin, resolved.device, *inv_freq, attention_factor);
    call.positions = index_positions_on_device(resolved.device);
    call.offset = 0;
  } else if (resolved.past) {
    // cos/sin for exactly the positions used, computed from the frequencies (identical to the
    // cached values where both exist), and positions indexing them.
    // In the offset form, the rows of offset .. offset + L - 1 in that order: row l is position
    // l of the rows, the offset form from 0 (a decoding step past the caches builds no position
    // or index tensor).
    const auto rows =
        given(positions)
            ? detail::rotary_rows(resolved.host.reshape({-1}), frequencies, cos.scalar_type())
            : detail::rotary_rows_range(offset, call.length, frequencies, cos.scalar_type());
    call.cos = rows.first.to(cos.device());
    call.sin = rows.second.to(cos.device());
    call.positions = given(positions) ? index_positions(resolved.host, x.device()) : at::Tensor();
    call.offset = 0;
  }
  return call;
}

MultimodalTablesCall prepare_multimodal_tables_call(const at::Tensor& cos, const at::Tensor& sin,
                                                    const at::Tensor& positions,
                                                    at::IntArrayRef mrope_section, bool interleaved,
                                                    OptionalTensor inv_freq,
                                                    double attention_factor) {
  static constexpr detail::CallerName who{};
  check_caches(cos, sin);
  const int64_t half = cos.size(1);
  MultimodalTablesCall call;
  call.axes = detail::mrope_axes(mrope_section.vec(), interleaved, half);
  TORCH_CHECK(positions.defined() && (positions.dim() == 2 || positions.dim() == 3) &&
                  positions.size(0) == 3,
              who,
              ": multimodal positions must be [3, B, L] or [3, L] (temporal, height and width "
              "position of each token, as Qwen2-VL's get_rope_index gives them), but got ",
              positions.defined() ? positions.sizes() : at::IntArrayRef{});
  TORCH_CHECK(at::isIntegralType(positions.scalar_type(), /*includeBool=*/false), who,
              ": positions must be an integer tensor (int64 or int32), but got ",
              positions.scalar_type());
  detail::check_positions_device(positions, cos.device());
  if (given(inv_freq)) {
    call.frequencies = given_frequencies(*inv_freq, cos, attention_factor);
  }
  call.shape = positions.sizes().slice(1).vec();
  call.shape.push_back(half);
  call.positions = positions.to(at::kLong).reshape({3, -1});
  if (detail::checks_on_device(positions.device())) {
    // Nothing is read back: the range is checked on the device, and with inv_freq every row is
    // taken from the caches or computed on the device (call.inv_freq).
    const at::Tensor ok = given(inv_freq) ? call.positions.ge(0)
                                          : call.positions.ge(0) & call.positions.lt(cos.size(0));
    detail::check_on_device(ok, call.positions, detail::DeviceCheck::kMultimodalPositions);
    if (given(inv_freq)) {
      call.inv_freq = *inv_freq;
    }
    return call;
  }
  // One read: all positions when rows past the caches may have to be computed, else their range.
  const detail::HostValues host = given(inv_freq) ? detail::host_read({}, positions)
                                                  : detail::host_read({positions});
  const std::pair<int64_t, int64_t> range =
      given(inv_freq) ? whole_range(host.whole) : host.ranges[0];
  TORCH_CHECK(range.first >= 0 || range.second < range.first, who,
              ": multimodal positions must be >= 0, but got ", range.first,
              " (M-RoPE has no padding value: mask padded tokens in the attention)");
  detail::check_positions_range(range.first, range.second, given(inv_freq) ? -1 : cos.size(0),
                                caller_hint());
  if (range.second >= cos.size(0)) {
    call.host_positions = host.whole.to(at::kLong).reshape({3, -1});
  }
  return call;
}

RotaryQkCall prepare_rotary_qk_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                    const at::Tensor& sin, int64_t offset, OptionalTensor positions,
                                    bool heads_first, OptionalTensor inv_freq,
                                    double attention_factor) {
  RotaryQkCall call;
  static_cast<RotaryCall&>(call) =
      prepare_rotary_call(q, cos, sin, offset, positions, heads_first, inv_freq, attention_factor);
  static constexpr detail::CallerName who{};
  detail::check_rotary_input(k, 2 * call.half, heads_first, cos.device());
  TORCH_CHECK(k.scalar_type() == q.scalar_type(), who,
              ": q and k must share a dtype, but q is ", q.scalar_type(), " and k ",
              k.scalar_type(), "; convert one of them");
  const int64_t k_length = k.size(heads_first ? 2 : 1);
  TORCH_CHECK(k.size(0) == call.batch && k_length == call.length, who,
              ": k must hold the keys of q's tokens (the same batch B and length L, in the layout ",
              heads_first ? "[B, H, L, Dh]" : "[B, L, H, Dh]", "), but q is ", q.sizes(),
              " and k ", k.sizes());
  call.k_heads = k.size(heads_first ? 1 : 2);
  call.k_head_dim = k.size(3);
  return call;
}

} // namespace ops
} // namespace posenc
