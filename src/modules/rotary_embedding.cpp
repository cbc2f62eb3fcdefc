#include <posenc/modules/rotary_embedding.h>

#include "detail/checks.h"
#include "detail/rotary.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>

#include <ios>

namespace posenc {

RotaryEmbeddingOptions::RotaryEmbeddingOptions(int64_t head_dim, int64_t max_len)
    : head_dim_(head_dim), max_len_(max_len) {}

RotaryEmbeddingImpl::RotaryEmbeddingImpl(const RotaryEmbeddingOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void RotaryEmbeddingImpl::reset() {
  TORCH_CHECK(options.head_dim() >= 2, kName, ": head_dim must be >= 2, but got ",
              options.head_dim());
  const int64_t rotary_dim = options.rotated_width();
  TORCH_CHECK(rotary_dim <= options.head_dim(), kName, ": rotary_dim (", rotary_dim,
              ") must be <= head_dim (", options.head_dim(), ")");
  detail::check_rotary_arguments(kName, options.max_len(), rotary_dim, options.base());
  build_tables(cos.defined() ? cos.scalar_type() : torch::kFloat,
               cos.defined() ? cos.device() : torch::Device(torch::kCPU));
}

void RotaryEmbeddingImpl::build_tables(torch::Dtype dtype, torch::Device device) {
  const detail::RopeFrequencies frequencies = detail::rope_frequencies(detail::rope_spec(options));
  inv_freq_ = at::tensor(frequencies.inv_freq, at::TensorOptions().dtype(at::kDouble));
  attention_factor_ = frequencies.attention_factor;
  const auto positions =
      torch::arange(options.max_len(), torch::TensorOptions().dtype(torch::kLong));
  auto tables = detail::rotary_rows(positions, frequencies, dtype);
  detail::set_buffer(*this, "cos", cos, tables.first.to(device));
  detail::set_buffer(*this, "sin", sin, tables.second.to(device));
}

std::vector<torch::Tensor*> RotaryEmbeddingImpl::derived_tables() {
  return {&cos, &sin};
}

std::vector<detail::TableSlot> RotaryEmbeddingImpl::table_slots() {
  const std::vector<int64_t> shape = {options.max_len(), options.rotated_width() / 2};
  return {{"cos", &cos, shape, /*is_buffer=*/true}, {"sin", &sin, shape, /*is_buffer=*/true}};
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

torch::Tensor RotaryEmbeddingImpl::forward_at(const torch::Tensor& x, int64_t offset,
                                              const torch::Tensor& positions) {
  // The operator accepts any head width >= the rotated one (partial rotary from the caches alone);
  // the module knows head_dim, and an input of another width contradicts its options. (Heads
  // narrower than the rotated width get the operator's message.)
  TORCH_CHECK(!x.defined() || x.dim() != 4 || x.size(3) == options.head_dim() ||
                  x.size(3) < options.rotated_width(),
              kName, ": expected heads of width head_dim = ", options.head_dim(), ", but got ",
              x.size(3), " (input shape ", x.sizes(),
              "); build the module with head_dim = ", x.size(3), " or split the heads to ",
              options.head_dim(), " channels");
  const bool extrapolate = options.beyond_max_len() == BeyondMaxLen::kExtrapolate;
  const detail::CallerScope caller(
      kName, extrapolate ? "" : " or pass beyond_max_len(posenc::BeyondMaxLen::kExtrapolate)");
  return functional::detail::rotary_embedding(
      x, cos, sin, offset, positions, options.pairing(), options.heads_first(),
      extrapolate ? inv_freq_ : torch::Tensor(), attention_factor_);
}

} // namespace posenc
