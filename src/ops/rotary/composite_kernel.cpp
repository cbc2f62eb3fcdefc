// Composite kernels of the rotary family (ATen operations only), registered as
// CompositeExplicitAutograd: autograd comes from ../autograd.

#include "ops/common/backend_entries.h"
#include "ops/common/composite_kernels.h"
#include "ops/rotary/composite_kernel.h"

#include "detail/checks.h"
#include "detail/device_checks.h"
#include "detail/rope_types.h"
#include "detail/rotary.h"

#include <posenc/options/rotary_embedding.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/TensorIndexing.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <torch/library.h>

#include <string>
#include <utility>
#include <vector>

namespace posenc {
namespace ops {
namespace composite {
namespace {

// cos/sin rows of a checked call, shaped to broadcast against x; padding (-1) is not rotated.
std::pair<at::Tensor, at::Tensor> rotary_rows_for(const RotaryCall& call) {
  if (!call.positions.defined()) {
    const auto shaped = [&](const at::Tensor& table) {
      return detail::rotary_broadcast(table.narrow(0, call.offset, call.length), 1, call.length,
                                      call.heads_first);
    };
    return {shaped(call.cos), shaped(call.sin)};
  }
  const at::Tensor flat = call.positions.reshape({-1});
  const at::Tensor padding = flat.lt(0).unsqueeze(1);
  const int64_t batch = call.positions.dim() == 1 ? 1 : call.batch;
  const auto shaped = [&](const at::Tensor& table, double fill) {
    return detail::rotary_broadcast(
        at::index_select(table, 0, flat.clamp_min(0)).masked_fill(padding, fill), batch,
        call.length, call.heads_first);
  };
  return {shaped(call.cos, 1.0), shaped(call.sin, 0.0)};
}

} // namespace

void rotary_loop(const at::Tensor& x, at::Tensor& out, const RotaryCall& call, bool interleaved,
                 bool inverse) {
  const auto rows = rotary_rows_for(call);
  out.copy_(detail::rotate(x, rows.first, rows.second, interleaved, inverse));
}

void rotary_qk_loop(const RotaryOperand& q, const RotaryOperand& k, const RotaryQkCall& call,
                    bool interleaved, bool inverse) {
  const auto rows = rotary_rows_for(call); // the heads broadcast: one set of rows for both
  q.out.copy_(detail::rotate(q.in, rows.first, rows.second, interleaved, inverse));
  k.out.copy_(detail::rotate(k.in, rows.first, rows.second, interleaved, inverse));
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                        int64_t offset, OptionalTensor positions, bool interleaved,
                        bool heads_first, bool inverse, OptionalTensor inv_freq,
                        double attention_factor) {
  return apply_rotary_kernel<rotary_loop, empty>(x, cos, sin, offset, positions, interleaved,
                                                 heads_first, inverse, inv_freq, attention_factor);
}

std::tuple<at::Tensor, at::Tensor> apply_rotary_qk(const at::Tensor& q, const at::Tensor& k,
                                                   const at::Tensor& cos, const at::Tensor& sin,
                                                   int64_t offset, OptionalTensor positions,
                                                   bool interleaved, bool heads_first,
                                                   bool inverse, OptionalTensor inv_freq,
                                                   double attention_factor) {
  return apply_rotary_qk_kernel<rotary_qk_loop, empty>(q, k, cos, sin, offset, positions,
                                                       interleaved, heads_first, inverse,
                                                       inv_freq, attention_factor);
}

std::tuple<at::Tensor, at::Tensor> multimodal_rotary_tables(
    const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& positions,
    at::IntArrayRef mrope_section, bool interleaved, OptionalTensor inv_freq,
    double attention_factor) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{},
                                   "posenc::multimodal_rotary_tables");
  const MultimodalTablesCall call = prepare_multimodal_tables_call(
      cos, sin, positions, mrope_section, interleaved, inv_freq, attention_factor);
  const int64_t half = cos.size(1);
  const int64_t tokens = call.positions.size(1);
  // [3, N, R/2]: the rows of each axis' positions, from the caches or computed (past them).
  std::vector<at::Tensor> cos_axes;
  std::vector<at::Tensor> sin_axes;
  for (int64_t a = 0; a < 3; ++a) {
    if (call.inv_freq.defined()) { // device-resident positions: rows made on the device
      const auto rows = rotary_rows_on_device(cos, sin, call.positions[a], call.inv_freq,
                                              call.frequencies.attention_factor);
      cos_axes.push_back(rows.first);
      sin_axes.push_back(rows.second);
    } else if (call.host_positions.defined()) {
      const auto rows =
          detail::rotary_rows(call.host_positions[a], call.frequencies, cos.scalar_type());
      cos_axes.push_back(rows.first.to(cos.device()));
      sin_axes.push_back(rows.second.to(cos.device()));
    } else { // (index, not index_select: it has a Meta kernel in C++ too)
      cos_axes.push_back(cos.index({call.positions[a]}));
      sin_axes.push_back(sin.index({call.positions[a]}));
    }
  }
  const at::Tensor axis = detail::upload(at::tensor(call.axes, at::TensorOptions().dtype(at::kLong)),
                                         cos.device())
                              .view({1, 1, half})
                              .expand({1, tokens, half});
  const auto pick = [&](const std::vector<at::Tensor>& rows) {
    return at::stack(rows, 0).gather(0, axis).squeeze(0).view(call.shape);
  };
  return {pick(cos_axes), pick(sin_axes)};
}

std::tuple<at::Tensor, at::Tensor> rope_frequencies(
    int64_t rotary_dim, double base, c10::string_view rope_parameters,
    c10::optional<at::ArrayRef<double>> freq_factors, c10::optional<int64_t> seq_len,
    const c10::optional<at::Tensor>& positions, const c10::optional<at::Tensor>& given_frequencies,
    c10::optional<at::Device> device) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{},
                                         "posenc::rope_frequencies");
  static constexpr detail::CallerName who{};
  TORCH_CHECK(!seq_len || *seq_len >= 1, who,
              ": seq_len must be >= 1 (a call's last position + 1), but got ", *seq_len);
  const auto options = functional::RotaryTablesFuncOptions()
                           .base(base)
                           .scaling(detail::rope_scaling_from_json(rope_parameters, base))
                           .freq_factors(freq_factors ? freq_factors->vec() : std::vector<double>())
                           .seq_len(seq_len);
  const bool has_positions = positions.has_value() && positions->defined();
  TORCH_CHECK(!(seq_len && has_positions), who,
              ": pass seq_len (a call's length) or positions (a call's positions), not both");
  TORCH_CHECK(has_positions || !(given_frequencies.has_value() && given_frequencies->defined()),
              who, ": frequencies (the variant's own, on the positions' device) serve a call with "
              "positions; pass positions too, or leave frequencies out");
  // ("cuda" names the positions' "cuda:0" too)
  TORCH_CHECK(!has_positions || !device ||
                  (device->type() == positions->device().type() &&
                   (!device->has_index() || device->index() == positions->device().index())),
              who,
              ": with positions, inv_freq lies on their device (", positions->device(),
              "), but device = ", *device, " was given; leave device out or move the positions");
  const detail::RopeSpec spec = detail::rope_spec_without_table(rotary_dim, options);
  const detail::RopeFrequencies frequencies = detail::rope_frequencies(spec, seq_len);
  const auto float64 = at::TensorOptions().dtype(at::kDouble);
  if (has_positions) {
    TORCH_CHECK(at::isFloatingType(positions->scalar_type()) ||
                    c10::isIntegralType(positions->scalar_type(), /*includeBool=*/false),
                who, ": positions must be an integer or floating-point tensor, but got ",
                positions->scalar_type());
    detail::check_positions_on_device(*positions); // (where they lie: CPU ones are read)
    at::Tensor base;
    if (given_frequencies.has_value() && given_frequencies->defined()) {
      base = *given_frequencies;
    } else {
      // (made on the host, placed on the positions' device without waiting for it)
      base = at::tensor(frequencies.inv_freq, float64);
      const at::Tensor long_inv_freq = detail::rope_long_inv_freq(spec);
      if (long_inv_freq.defined()) { // the second set: past the switch
        base = at::stack({base, long_inv_freq});
      }
      base = detail::upload(base, positions->device());
    }
    return {detail::rope_frequencies_at(spec, base, *positions),
            at::scalar_tensor(frequencies.variant_attention_factor, float64)};
  }
  return {detail::upload(at::tensor(frequencies.inv_freq, float64),
                         device.value_or(at::Device(at::kCPU))),
          at::scalar_tensor(frequencies.variant_attention_factor, float64)};
}

std::tuple<at::Tensor, at::Tensor> rotary_tables(int64_t max_len, const at::Tensor& inv_freq,
                                                 double attention_factor,
                                                 c10::optional<at::ScalarType> dtype,
                                                 c10::optional<at::Device> device) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, "posenc::rotary_tables");
  static constexpr detail::CallerName who{};
  TORCH_CHECK(inv_freq.defined() && inv_freq.dim() == 1 && inv_freq.size(0) >= 1 &&
                  inv_freq.size(0) <= detail::kMaxTableElements,
              who, ": inv_freq must be a 1-D float64 [R/2] tensor of frequencies (R/2 <= 2^28), but got ",
              inv_freq.defined() ? inv_freq.sizes() : at::IntArrayRef{});
  detail::check_rotary_arguments(max_len, 2 * inv_freq.size(0), 10000.0);
  const at::ScalarType out_dtype = dtype.value_or(at::kFloat);
  detail::check_float_dtype("dtype", out_dtype);
  // The checks of apply_rotary's inv_freq (float64, finite angles, the factor a finite number of
  // the caches' dtype), on empty caches of the requested dtype.
  const auto none = [&](const c10::Device& on) {
    return at::empty({0, inv_freq.size(0)}, at::TensorOptions().dtype(out_dtype).device(on));
  };
  // (by default the tables lie where the frequencies lie, as the Meta kernel says)
  const at::Device out_device = device.value_or(inv_freq.device());
  if (detail::checks_on_device(inv_freq.device())) {
    // Frequencies on a device: checked and the rows computed there (nothing read back).
    given_frequencies(inv_freq, none(inv_freq.device()), attention_factor);
    const auto rows = detail::rotary_rows_from(
        at::arange(max_len, at::TensorOptions().dtype(at::kLong).device(inv_freq.device())),
        inv_freq, attention_factor, out_dtype);
    return {rows.first.to(out_device), rows.second.to(out_device)};
  }
  const detail::RopeFrequencies frequencies =
      given_frequencies(inv_freq.to(at::kCPU), none(at::kCPU), attention_factor);
  const auto rows = detail::rotary_rows(
      at::arange(max_len, at::TensorOptions().dtype(at::kLong)), frequencies, out_dtype);
  return {rows.first.to(out_device), rows.second.to(out_device)};
}

} // namespace composite

TORCH_LIBRARY_IMPL(posenc, CompositeExplicitAutograd, m) {
  using composite::empty;
  using composite::rotary_loop;
  m.impl("apply_rotary", TORCH_FN((apply_rotary_kernel<rotary_loop, empty>)));
  m.impl("apply_rotary_", TORCH_FN((apply_rotary_inplace_kernel<rotary_loop, empty>)));
  m.impl("multimodal_rotary_tables", TORCH_FN(composite::multimodal_rotary_tables));
  m.impl("rope_frequencies", TORCH_FN(composite::rope_frequencies));
  m.impl("rotary_tables", TORCH_FN(composite::rotary_tables));
  using composite::rotary_qk_loop;
  m.impl("apply_rotary_qk", TORCH_FN((apply_rotary_qk_kernel<rotary_qk_loop, empty>)));
  m.impl("apply_rotary_qk_", TORCH_FN((apply_rotary_qk_inplace_kernel<rotary_qk_loop, empty>)));
}

} // namespace ops
} // namespace posenc
