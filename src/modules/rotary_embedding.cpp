#include <posenc/modules/rotary_embedding.h>

#include "detail/checks.h"
#include "detail/module_support.h"
#include "detail/rotary.h"

#include <torch/utils.h>

#include <ATen/ops/arange.h>
#include <c10/util/Exception.h>

#include <ios>

namespace posenc {

namespace {
constexpr const char* kWho = "RotaryEmbedding";
} // namespace

RotaryEmbeddingOptions::RotaryEmbeddingOptions(int64_t head_dim, int64_t max_len)
    : head_dim_(head_dim), max_len_(max_len) {}

RotaryEmbeddingImpl::RotaryEmbeddingImpl(const RotaryEmbeddingOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void RotaryEmbeddingImpl::reset() {
  TORCH_CHECK(
      options.head_dim() >= 2, kWho, ": head_dim must be >= 2, but got ", options.head_dim());
  const int64_t rotary_dim = options.rotated_width();
  TORCH_CHECK(rotary_dim <= options.head_dim(),
              kWho,
              ": rotary_dim (",
              rotary_dim,
              ") must be <= head_dim (",
              options.head_dim(),
              ")");
  detail::check_rotary_arguments(kWho, options.max_len(), rotary_dim, options.base());
  rebuild(cos.defined() ? cos.scalar_type() : torch::kFloat,
          cos.defined() ? cos.device() : torch::Device(torch::kCPU));
}

void RotaryEmbeddingImpl::rebuild(torch::Dtype dtype, torch::Device device) {
  const auto positions =
      torch::arange(options.max_len(), torch::TensorOptions().dtype(torch::kLong));
  auto tables = detail::rotary_rows(positions, options.rotated_width(), options.base(), dtype);
  detail::set_buffer(*this, "cos", cos, tables.first.to(device));
  detail::set_buffer(*this, "sin", sin, tables.second.to(device));
}

void RotaryEmbeddingImpl::pretty_print(std::ostream& stream) const {
  stream << std::boolalpha << "posenc::RotaryEmbedding(head_dim=" << options.head_dim()
         << ", max_len=" << options.max_len() << ", rotary_dim=" << options.rotated_width()
         << ", base=" << options.base() << ", pairing=" << options.pairing()
         << ", heads_first=" << options.heads_first();
  if (options.beyond_max_len() != BeyondMaxLen::kError) {
    stream << ", beyond_max_len=" << options.beyond_max_len();
  }
  stream << ")";
}

torch::Tensor RotaryEmbeddingImpl::forward_impl(const torch::Tensor& x,
                                                int64_t offset,
                                                const torch::Tensor& positions) {
  return detail::rotary_forward(kWho,
                                x,
                                cos,
                                sin,
                                offset,
                                positions,
                                options.pairing() == RotaryPairing::kInterleaved,
                                options.heads_first(),
                                options.base(),
                                options.beyond_max_len() == BeyondMaxLen::kExtrapolate);
}

torch::Tensor RotaryEmbeddingImpl::forward(const torch::Tensor& x, int64_t offset) {
  return forward_impl(x, offset, torch::Tensor());
}

torch::Tensor RotaryEmbeddingImpl::forward_positions(const torch::Tensor& x,
                                                     const torch::Tensor& positions) {
  TORCH_CHECK(positions.defined(),
              kWho,
              ": forward_positions needs positions; use forward(x, offset) for consecutive ones");
  return forward_impl(x, 0, positions);
}

void RotaryEmbeddingImpl::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  to_impl(device, dtype, non_blocking);
}

void RotaryEmbeddingImpl::to(torch::Dtype dtype, bool non_blocking) {
  to_impl(c10::nullopt, dtype, non_blocking);
}

void RotaryEmbeddingImpl::to(torch::Device device, bool non_blocking) {
  to_impl(device, c10::nullopt, non_blocking);
}

void RotaryEmbeddingImpl::to_impl(c10::optional<torch::Device> device,
                                  c10::optional<torch::Dtype> dtype,
                                  bool non_blocking) {
  const torch::Dtype target_dtype = detail::derived_table_dtype(kWho, dtype, cos.scalar_type());
  const torch::Device target_device = device.value_or(cos.device());
  if (target_dtype == torch::kDouble && cos.scalar_type() != torch::kDouble) {
    rebuild(torch::kDouble, target_device); // recompute in float64 rather than widen float32
    return;
  }
  torch::NoGradGuard no_grad;
  cos.set_data(cos.to(target_device, target_dtype, non_blocking));
  sin.set_data(sin.to(target_device, target_dtype, non_blocking));
}

void RotaryEmbeddingImpl::load(torch::serialize::InputArchive& archive) {
  const std::vector<int64_t> shape = {options.max_len(), options.rotated_width() / 2};
  const torch::Tensor loaded_cos =
      detail::read_checked(kWho, archive, "cos", shape, /*is_buffer=*/true);
  const torch::Tensor loaded_sin =
      detail::read_checked(kWho, archive, "sin", shape, /*is_buffer=*/true);
  torch::NoGradGuard no_grad;
  cos.set_data(loaded_cos.to(cos.device(), cos.scalar_type()));
  sin.set_data(loaded_sin.to(sin.device(), sin.scalar_type()));
}

} // namespace posenc
