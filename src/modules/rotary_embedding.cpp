#include <posenc/modules/rotary_embedding.h>

#include <posenc/functional/positions.h>

#include "detail/checks.h"
#include "detail/rope_types.h"
#include "detail/rotary.h"
#include "ops/rotary/module.h"

#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>

#include <ios>

namespace posenc {

RopeScalingOptions::RopeScalingOptions(RopeType type) : type_(type) {}

RotaryEmbeddingOptions::RotaryEmbeddingOptions(int64_t head_dim, int64_t max_len)
    : head_dim_(head_dim), max_len_(max_len) {}

int64_t RotaryEmbeddingOptions::cached_rows() const {
  return cached_len_.value_or(max_len_);
}

RotaryEmbeddingImpl::RotaryEmbeddingImpl(const RotaryEmbeddingOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void RotaryEmbeddingImpl::reset() {
  // (the options are checked by ops::rotary_module_call, before anything is built)
  build_tables(cos.defined() ? cos.scalar_type() : torch::kFloat,
               cos.defined() ? cos.device() : torch::Device(torch::kCPU));
}

void RotaryEmbeddingImpl::build_tables(torch::Dtype dtype, torch::Device device) {
  // The options' checks (the same for posenc.nn's module), before anything is built.
  auto call = std::make_shared<const ops::RotaryModuleCall>(
      ops::rotary_module_call(options, kName, /*python=*/false));
  // The frequencies stay float64, on the caches' device (passed with them). Everything is computed
  // before the first member changes.
  const ops::RotaryModuleState state = ops::rotary_module_state(*call, dtype);
  torch::Tensor inv_freq = state.inv_freq.to(device);
  torch::Tensor long_inv_freq =
      state.long_inv_freq.defined() ? state.long_inv_freq.to(device) : torch::Tensor();
  torch::Tensor new_cos = state.cos.to(device);
  torch::Tensor new_sin = state.sin.to(device);
  detail::set_buffer(*this, "cos", cos, std::move(new_cos));
  detail::set_buffer(*this, "sin", sin, std::move(new_sin));
  inv_freq_ = std::move(inv_freq);
  long_inv_freq_ = std::move(long_inv_freq);
  variant_attention_factor_ = call->variant_attention_factor;
  call_ = std::move(call);
}

std::vector<torch::Tensor*> RotaryEmbeddingImpl::derived_tables() {
  return {&cos, &sin};
}

std::vector<detail::TableSlot> RotaryEmbeddingImpl::table_slots() {
  const std::vector<int64_t> shape = {options.cached_rows(), options.rotated_width() / 2};
  return {{"cos", &cos, shape, /*is_buffer=*/true}, {"sin", &sin, shape, /*is_buffer=*/true}};
}

void RotaryEmbeddingImpl::pretty_print(std::ostream& stream) const {
  stream << std::boolalpha << "posenc::RotaryEmbedding(head_dim=" << options.head_dim()
         << ", max_len=" << options.max_len();
  if (options.cached_rows() != options.max_len()) {
    stream << ", cached_len=" << options.cached_rows();
  }
  stream << ", rotary_dim=" << options.rotated_width() << ", base=" << options.base()
         << ", pairing=" << options.pairing();
  if (options.deinterleave()) {
    stream << ", deinterleave=true";
  }
  if (options.inverse()) {
    stream << ", inverse=true";
  }
  if (options.rotate_last_channels()) {
    stream << ", rotate_last_channels=true";
  }
  stream << ", heads_first=" << options.heads_first();
  if (options.beyond_max_len() != BeyondMaxLen::kError) {
    stream << ", beyond_max_len=" << options.beyond_max_len();
  }
  if (options.scaling().type() != RopeType::kDefault) {
    stream << ", rope_type=" << options.scaling().type()
           << detail::describe_rope_scaling(detail::rope_spec(options), variant_attention_factor_);
  }
  if (!options.freq_factors().empty()) {
    stream << ", freq_factors=[" << options.freq_factors().size() << "]";
  }
  if (!options.mrope_section().empty()) {
    stream << ", mrope_section=" << c10::IntArrayRef(options.mrope_section());
    if (options.mrope_interleaved()) {
      stream << ", mrope_interleaved=true";
    }
    if (options.mrope_hw_alternating()) {
      stream << ", mrope_hw_alternating=true";
    }
  }
  stream << ")";
}

torch::Tensor RotaryEmbeddingImpl::forward_packed(const torch::Tensor& x,
                                                  const torch::Tensor& cu_seqlens,
                                                  const torch::Tensor& start_positions) {
  TORCH_CHECK(x.defined() && x.dim() == 3, kName,
              ": forward_packed expects packed queries or keys [T, H, head_dim], but got ",
              x.defined() ? x.sizes() : at::IntArrayRef{},
              "; for padded batches [B, L, H, head_dim] call forward or forward_positions");
  TORCH_CHECK(cu_seqlens.defined(), kName, ": forward_packed needs cu_seqlens");
  const torch::Tensor positions = [&] {
    const detail::CallerScope caller(kName);
    return functional::packed_positions(cu_seqlens, x.size(0), start_positions);
  }();
  // [T, H, Dh] as a batch of one in the module's layout.
  const bool heads_first = options.heads_first();
  const torch::Tensor batch = heads_first ? x.transpose(0, 1).unsqueeze(0) : x.unsqueeze(0);
  const torch::Tensor out = forward_at(batch, 0, positions.to(x.device()));
  return heads_first ? out.squeeze(0).transpose(0, 1) : out.squeeze(0);
}

torch::Tensor RotaryEmbeddingImpl::inv_freq() const {
  return inv_freq_.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
}

double RotaryEmbeddingImpl::attention_factor() const {
  return variant_attention_factor_;
}

torch::Tensor RotaryEmbeddingImpl::inv_freq(int64_t seq_len) const {
  TORCH_CHECK(seq_len >= 1, kName, ": seq_len must be >= 1 (a call's last position + 1), but got ",
              seq_len);
  const detail::CallerScope caller(detail::CallerScope::Rename{}, kName);
  return at::tensor(detail::rope_frequencies(detail::rope_spec(options), seq_len).inv_freq,
                    at::TensorOptions().dtype(at::kDouble));
}

torch::Tensor RotaryEmbeddingImpl::forward_at(const torch::Tensor& x, int64_t offset,
                                              const torch::Tensor& positions) {
  return ops::rotary_module_forward(*call_, {cos, sin, inv_freq_, long_inv_freq_}, x, offset,
                                    positions);
}

std::tuple<torch::Tensor, torch::Tensor> RotaryEmbeddingImpl::forward_qk_at(
    const torch::Tensor& q, const torch::Tensor& k, int64_t offset, const torch::Tensor& positions,
    bool in_place) {
  return ops::rotary_module_forward_qk(*call_, {cos, sin, inv_freq_, long_inv_freq_}, q, k, offset,
                                       positions, in_place);
}

std::tuple<torch::Tensor, torch::Tensor> RotaryEmbeddingImpl::forward_qk(const torch::Tensor& q,
                                                                         const torch::Tensor& k,
                                                                         int64_t offset) {
  return forward_qk_at(q, k, offset, torch::Tensor(), /*in_place=*/false);
}

std::tuple<torch::Tensor, torch::Tensor> RotaryEmbeddingImpl::forward_qk_positions(
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& positions) {
  TORCH_CHECK(positions.defined(), kName,
              ": forward_qk_positions needs positions; use forward_qk(q, k, offset) otherwise");
  return forward_qk_at(q, k, 0, positions, /*in_place=*/false);
}

void RotaryEmbeddingImpl::forward_qk_(torch::Tensor& q, torch::Tensor& k, int64_t offset,
                                      const torch::Tensor& positions) {
  forward_qk_at(q, k, offset, positions, /*in_place=*/true);
}

void RotaryEmbeddingImpl::forward_kv_cache_(torch::Tensor& q, const torch::Tensor& k,
                                            const torch::Tensor& v, torch::Tensor& k_cache,
                                            torch::Tensor& v_cache,
                                            const torch::Tensor& cache_seqlens,
                                            const torch::Tensor& positions,
                                            c10::optional<bool> cache_heads_first) {
  ops::rotary_module_kv_cache(*call_, {cos, sin, inv_freq_, long_inv_freq_}, q, k, v, k_cache,
                              v_cache, cache_seqlens, positions, /*paged=*/false,
                              cache_heads_first.value_or(options.heads_first()));
}

void RotaryEmbeddingImpl::forward_paged_kv_cache_(torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v, torch::Tensor& k_cache,
                                                  torch::Tensor& v_cache,
                                                  const torch::Tensor& positions,
                                                  const torch::Tensor& slot_mapping,
                                                  bool cache_heads_first) {
  ops::rotary_module_kv_cache(*call_, {cos, sin, inv_freq_, long_inv_freq_}, q, k, v, k_cache,
                              v_cache, slot_mapping, positions, /*paged=*/true, cache_heads_first);
}

} // namespace posenc
