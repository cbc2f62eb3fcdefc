#include <posenc/modules/attention_bias.h>
#include <posenc/modules/encoding_base.h>
#include <posenc/ops.h>

#include "detail/attention_bias.h"
#include "detail/checks.h"
#include "detail/print_options.h"
#include "detail/sinusoidal.h"
#include "ops/bias/relative_module.h"
#include "ops/common/module_options.h"

#include <torch/nn/init.h>
#include <torch/nn/options/embedding.h>
#include <torch/nn/options/linear.h>
#include <torch/utils.h>

#include <c10/util/Exception.h>

#include <cmath>
#include <sstream>

namespace posenc {

ALiBiOptions::ALiBiOptions(int64_t num_heads) : num_heads_(num_heads) {}
RelativePositionBiasOptions::RelativePositionBiasOptions(int64_t num_heads)
    : num_heads_(num_heads) {}
RelPositionalEncodingOptions::RelPositionalEncodingOptions(int64_t d_model) : d_model_(d_model) {}
RelPositionMultiheadAttentionOptions::RelPositionMultiheadAttentionOptions(int64_t embed_dim,
                                                                           int64_t num_heads)
    : embed_dim_(embed_dim), num_heads_(num_heads) {}

// ---- ALiBi ----

ALiBiImpl::ALiBiImpl(const ALiBiOptions& options_) : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void ALiBiImpl::reset() {
  const detail::CallerScope caller(kName);
  ops::check_options(options);
  slopes = register_buffer("slopes", ops::alibi_slopes(options.num_heads(), options.max_bias(),
                                                       options.first_head(), options.heads()));
}

void ALiBiImpl::pretty_print(std::ostream& stream) const {
  std::ostringstream extra;
  if (options.first_head() != 0 || options.heads().has_value()) {
    extra << ", first_head=" << options.first_head() << ", heads=" << slopes.size(0);
  }
  detail::print_options(stream, kName, options, extra.str().c_str());
}

torch::Tensor ALiBiImpl::forward(int64_t query_length, int64_t key_length,
                                 c10::optional<int64_t> offset, bool causal) {
  const detail::CallerScope caller(kName);
  return functional::alibi_bias(slopes, query_length, key_length, offset, causal);
}

torch::Tensor ALiBiImpl::forward_causal(int64_t key_length, const torch::Tensor& attention_mask) {
  const detail::CallerScope caller(kName);
  return functional::alibi_causal_bias(slopes, key_length, attention_mask);
}

// ---- Llama 4's attention temperature ----

AttentionTemperatureImpl::AttentionTemperatureImpl(const AttentionTemperatureOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void AttentionTemperatureImpl::reset() {
  const detail::CallerScope caller(detail::CallerScope::Rename{}, kName);
  ops::check_options(options);
}

void AttentionTemperatureImpl::pretty_print(std::ostream& stream) const {
  detail::print_options(stream, kName, options);
}

torch::Tensor AttentionTemperatureImpl::forward(const torch::Tensor& query, int64_t offset) {
  const detail::CallerScope caller(kName);
  return functional::attention_temperature(query, {}, offset, options.floor_scale(),
                                           options.attn_scale(), options.heads_first(),
                                           options.form());
}

torch::Tensor AttentionTemperatureImpl::forward_positions(const torch::Tensor& query,
                                                          const torch::Tensor& positions) {
  const detail::CallerScope caller(kName);
  TORCH_CHECK(positions.defined(), kName,
              ": forward_positions needs positions ([L] or [B, L]); call forward(query, offset) "
              "for positions offset .. offset + L - 1");
  return functional::attention_temperature(query, positions, 0, options.floor_scale(),
                                           options.attn_scale(), options.heads_first(),
                                           options.form());
}

// ---- T5's relative position bias ----

RelativePositionBiasImpl::RelativePositionBiasImpl(const RelativePositionBiasOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void RelativePositionBiasImpl::reset() {
  const detail::CallerScope caller(detail::CallerScope::Rename{}, kName);
  ops::check_options(options);
  relative_attention_bias =
      register_module("relative_attention_bias", torch::nn::Embedding(torch::nn::EmbeddingOptions(
                                                     options.num_buckets(), options.num_heads())));
}

void RelativePositionBiasImpl::reset_parameters() {
  relative_attention_bias->reset_parameters();
}

void RelativePositionBiasImpl::pretty_print(std::ostream& stream) const {
  detail::print_options(stream, kName, options);
}

torch::Tensor RelativePositionBiasImpl::forward(int64_t query_length, int64_t key_length,
                                                int64_t offset) {
  const detail::CallerScope caller(kName);
  return functional::relative_position_bias(relative_attention_bias->weight, query_length,
                                            key_length, options.bidirectional(),
                                            options.max_distance(), offset);
}

// ---- Transformer-XL / Conformer relative sinusoidal encoding ----

RelPositionalEncodingImpl::RelPositionalEncodingImpl(const RelPositionalEncodingOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void RelPositionalEncodingImpl::reset() {
  const detail::CallerScope caller(kName);
  ops::check_options(options);
  detail::SinusoidSpec spec;
  spec.d_model = options.d_model();
  spec.base = options.base();
  torch::Tensor table;
  if (options.legacy()) {
    table = detail::sinusoidal_table(options.max_len(), 0, spec, torch::kFloat, torch::kCPU);
  } else {
    table = detail::relative_sinusoidal_table(options.max_len(), options.max_len(), spec,
                                              torch::kFloat, torch::kCPU);
  }
  pe = register_buffer("pe", table);
}

void RelPositionalEncodingImpl::pretty_print(std::ostream& stream) const {
  detail::print_options(stream, kName, options);
}

std::tuple<torch::Tensor, torch::Tensor> RelPositionalEncodingImpl::forward(const torch::Tensor& x,
                                                                            int64_t offset) {
  const detail::CallerScope caller(kName);
  const double scale =
      options.scale_input() ? std::sqrt(static_cast<double>(options.d_model())) : 1.0;
  return functional::relative_positional_encoding(x, pe, offset, options.legacy(), scale,
                                                  options.dropout(), is_training());
}

// ---- relative-position multi-head attention ----

RelPositionMultiheadAttentionImpl::RelPositionMultiheadAttentionImpl(
    const RelPositionMultiheadAttentionOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void RelPositionMultiheadAttentionImpl::reset() {
  const int64_t width = options.embed_dim();
  const int64_t heads = options.num_heads();
  const detail::CallerScope caller(detail::CallerScope::Rename{}, kName);
  ops::check_options(options);
  linear_q = register_module("linear_q", torch::nn::Linear(width, width));
  linear_k = register_module("linear_k", torch::nn::Linear(width, width));
  linear_v = register_module("linear_v", torch::nn::Linear(width, width));
  linear_out = register_module("linear_out", torch::nn::Linear(width, width));
  linear_pos = register_module(
      "linear_pos", torch::nn::Linear(torch::nn::LinearOptions(width, width).bias(false)));
  pos_bias_u = register_parameter("pos_bias_u", torch::empty({heads, width / heads}));
  pos_bias_v = register_parameter("pos_bias_v", torch::empty({heads, width / heads}));
  torch::NoGradGuard no_grad;
  torch::nn::init::xavier_uniform_(pos_bias_u);
  torch::nn::init::xavier_uniform_(pos_bias_v);
}

void RelPositionMultiheadAttentionImpl::pretty_print(std::ostream& stream) const {
  detail::print_options(stream, kName, options);
}

torch::Tensor RelPositionMultiheadAttentionImpl::forward(const torch::Tensor& query,
                                                         const torch::Tensor& key,
                                                         const torch::Tensor& value,
                                                         const torch::Tensor& pos_emb,
                                                         const torch::Tensor& mask) {
  ops::RelPositionAttentionState state;
  state.embed_dim = options.embed_dim();
  state.num_heads = options.num_heads();
  state.dropout = options.dropout();
  state.q_weight = linear_q->weight;
  state.q_bias = linear_q->bias;
  state.k_weight = linear_k->weight;
  state.k_bias = linear_k->bias;
  state.v_weight = linear_v->weight;
  state.v_bias = linear_v->bias;
  state.pos_weight = linear_pos->weight;
  state.out_weight = linear_out->weight;
  state.out_bias = linear_out->bias;
  state.pos_bias_u = pos_bias_u;
  state.pos_bias_v = pos_bias_v;
  return ops::rel_position_multihead_attention_forward(
      state, query, key, value, pos_emb,
      mask.defined() ? c10::optional<torch::Tensor>(mask) : c10::nullopt, is_training());
}

} // namespace posenc
