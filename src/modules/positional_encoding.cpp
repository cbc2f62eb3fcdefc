#include <posenc/functional/positions.h>
#include <posenc/modules/positional_encoding.h>

#include "detail/checks.h"
#include "detail/module_support.h"
#include "detail/positional_encoding.h"
#include "detail/sinusoidal.h"

#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include <c10/util/Exception.h>

#include <cmath>
#include <ios>
#include <ostream>
#include <utility>

namespace posenc {

namespace {
constexpr const char* kWho = "PositionalEncoding";

detail::SinusoidSpec spec_of(const PositionalEncodingOptions& options) {
  return {options.d_model(), options.base(), options.layout(), options.spacing()};
}
} // namespace

PositionalEncodingOptions::PositionalEncodingOptions(int64_t d_model, int64_t max_len)
    : d_model_(d_model), max_len_(max_len) {}

PositionalEncodingImpl::PositionalEncodingImpl(const PositionalEncodingOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void PositionalEncodingImpl::reset() {
  detail::check_table_arguments(kWho, options.max_len(), options.d_model(), options.base());
  detail::check_dropout(kWho, options.dropout());
  TORCH_CHECK(
      std::isfinite(options.scale()), kWho, ": scale must be finite, but got ", options.scale());
  // A reset() after .to() keeps the table's dtype and device.
  const auto dtype = pe.defined() ? pe.scalar_type() : torch::kFloat;
  const auto device = pe.defined() ? pe.device() : torch::Device(torch::kCPU);
  detail::set_buffer(*this, "pe", pe, build_table(dtype, device));
}

torch::Tensor PositionalEncodingImpl::build_table(torch::Dtype dtype, torch::Device device) const {
  return detail::sinusoidal_table(options.max_len(), /*offset=*/0, spec_of(options), dtype, device)
      .unsqueeze(0);
}

void PositionalEncodingImpl::pretty_print(std::ostream& stream) const {
  stream << std::boolalpha << "posenc::PositionalEncoding(d_model=" << options.d_model()
         << ", max_len=" << options.max_len()
         << detail::non_default("base", options.base(), 10000.0)
         << ", dropout=" << options.dropout() << ", batch_first=" << options.batch_first();
  if (options.layout() != ChannelLayout::kInterleaved) {
    stream << ", layout=" << options.layout();
  }
  if (options.spacing() != FrequencySpacing::kPaper) {
    stream << ", spacing=" << options.spacing();
  }
  if (options.beyond_max_len() != BeyondMaxLen::kError) {
    stream << ", beyond_max_len=" << options.beyond_max_len();
  }
  stream << detail::non_default("scale", options.scale(), 1.0);
  if (options.inplace()) {
    stream << ", inplace=true";
  }
  stream << ")";
}

torch::Tensor PositionalEncodingImpl::forward_impl(const torch::Tensor& x,
                                                   int64_t offset,
                                                   const torch::Tensor& positions) {
  const detail::SinusoidSpec spec = spec_of(options);
  const bool extrapolate = options.beyond_max_len() == BeyondMaxLen::kExtrapolate;
  const detail::BeyondTable beyond{
      extrapolate ? &spec : nullptr,
      extrapolate ? "" : " or pass beyond_max_len(posenc::BeyondMaxLen::kExtrapolate)"};
  const torch::Tensor out = detail::table_forward(kWho,
                                                  x,
                                                  pe,
                                                  offset,
                                                  positions,
                                                  options.batch_first(),
                                                  options.scale(),
                                                  beyond,
                                                  options.inplace());
  return detail::apply_dropout(out, options.dropout(), is_training(), options.inplace());
}

torch::Tensor PositionalEncodingImpl::forward(const torch::Tensor& x, int64_t offset) {
  return forward_impl(x, offset, torch::Tensor());
}

torch::Tensor PositionalEncodingImpl::forward_positions(const torch::Tensor& x,
                                                        const torch::Tensor& positions) {
  TORCH_CHECK(positions.defined(),
              kWho,
              ": forward_positions needs positions; use forward(x, offset) for consecutive ones");
  return forward_impl(x, 0, positions);
}

torch::Tensor PositionalEncodingImpl::forward_padded(const torch::Tensor& x,
                                                     const torch::Tensor& padding_mask) {
  return forward_impl(
      x, 0, functional::positions_from_padding_mask(padding_mask, options.batch_first()));
}

void PositionalEncodingImpl::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  to_impl(device, dtype, non_blocking);
}

void PositionalEncodingImpl::to(torch::Dtype dtype, bool non_blocking) {
  to_impl(c10::nullopt, dtype, non_blocking);
}

void PositionalEncodingImpl::to(torch::Device device, bool non_blocking) {
  to_impl(device, c10::nullopt, non_blocking);
}

void PositionalEncodingImpl::to_impl(c10::optional<torch::Device> device,
                                     c10::optional<torch::Dtype> dtype,
                                     bool non_blocking) {
  const torch::Dtype target_dtype = detail::derived_table_dtype(kWho, dtype, pe.scalar_type());
  const torch::Device target_device = device.value_or(pe.device());
  torch::NoGradGuard no_grad;
  // Widening a float32 table would only append zero bits: recompute it in float64.
  pe.set_data(target_dtype == torch::kDouble && pe.scalar_type() != torch::kDouble
                  ? build_table(torch::kDouble, target_device)
                  : pe.to(target_device, target_dtype, non_blocking));
}

void PositionalEncodingImpl::load(torch::serialize::InputArchive& archive) {
  const torch::Tensor loaded = detail::read_checked(
      kWho, archive, "pe", {1, options.max_len(), options.d_model()}, /*is_buffer=*/true);
  torch::NoGradGuard no_grad;
  pe.set_data(loaded.to(pe.device(), pe.scalar_type()));
}

} // namespace posenc
