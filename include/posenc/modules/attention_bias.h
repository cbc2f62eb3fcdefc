#pragma once

#include <posenc/functional/attention_bias.h>
#include <posenc/options/attention_bias.h>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <c10/util/Optional.h>

#include <cstdint>
#include <ostream>
#include <tuple>

namespace posenc {

/// Attention with linear biases (ALiBi: BLOOM, MPT, Baichuan): no encoding is added to the
/// inputs; each head's attention scores get `-slope * distance`. Holds the slopes of its heads as
/// the buffer `slopes` (`[heads]`, float32, a function of the options) and builds the biases.
///
/// Example:
/// ```
/// posenc::ALiBi alibi(8);
/// auto mask = alibi(/*query_length=*/128, /*key_length=*/128, c10::nullopt, /*causal=*/true);
/// auto out = at::scaled_dot_product_attention(q, k, v, mask);   // q, k, v [B, 8, 128, d]
/// ```
class ALiBiImpl : public torch::nn::Cloneable<ALiBiImpl> {
 public:
  /// The module's name, the prefix of its error messages.
  static constexpr const char* kName = "ALiBi";

  /// Builds the module from `options_` and calls reset(), which checks them.
  explicit ALiBiImpl(const ALiBiOptions& options_);

  /// Checks the options and registers the slopes.
  void reset() override;

  /// Pretty prints the module, e.g. `posenc::ALiBi(num_heads=32, first_head=8, heads=8)`.
  void pretty_print(std::ostream& stream) const override;

  /// The full bias `[heads, Lq, Lk]`, `-slope * |(offset + i) - j|` (offset default
  /// `key_length - query_length`), -inf above the diagonal when `causal`.
  torch::Tensor forward(int64_t query_length, int64_t key_length,
                        c10::optional<int64_t> offset = c10::nullopt, bool causal = false);

  /// The compact causal bias `[heads, 1, Lk]` (`[B, heads, 1, Lk]` with an `attention_mask`
  /// `[B, Lk]`, 1 token / 0 padding): BLOOM's form, for scores that are causally masked.
  torch::Tensor forward_causal(int64_t key_length,
                               const torch::Tensor& attention_mask = torch::Tensor());

  /// The options this module was built with.
  ALiBiOptions options;

  /// The slopes of this module's heads, `[heads]`, registered as the buffer `slopes`.
  torch::Tensor slopes;
};

/// A `ModuleHolder` subclass for `ALiBiImpl`.
TORCH_MODULE(ALiBi);

/// A query temperature that grows with the position, which sharpens attention far into long
/// contexts: Llama 4's attention temperature tuning (transformers' `attn_temperature_tuning`: in
/// its layers without rotary, the queries of position p are multiplied by
/// `log1p(floor((p + 1) / floor_scale)) * attn_scale + 1`), or Ministral 3's and Mistral 4's
/// (`llama_4_scaling_beta`: every layer, after the rotation), each computed as transformers'
/// model code computes it (AttentionTemperatureForm). Holds no state; read from a config by
/// `posenc::io::read_hf_rope_config` (`HfRopeConfig::attention_temperature`).
///
/// Example:
/// ```
/// posenc::AttentionTemperature temperature(posenc::AttentionTemperatureOptions{});
/// auto q_scaled = temperature(q, past_len);   // q: [B, L, H, head_dim] at past_len ..
/// ```
class AttentionTemperatureImpl : public torch::nn::Cloneable<AttentionTemperatureImpl> {
 public:
  /// The module's name, the prefix of its error messages.
  static constexpr const char* kName = "AttentionTemperature";

  /// Builds the module from `options_` and calls reset(), which checks them.
  explicit AttentionTemperatureImpl(const AttentionTemperatureOptions& options_ = {});

  /// Checks the options (the module has no parameters or buffers).
  void reset() override;

  /// Pretty prints the module, e.g.
  /// `posenc::AttentionTemperature(form=llama4, floor_scale=8192, attn_scale=0.1,
  /// heads_first=false)`.
  void pretty_print(std::ostream& stream) const override;

  /// The queries `[B, L, H, head_dim]` (or `[B, H, L, head_dim]` with `heads_first`) at positions
  /// `offset .. offset + L - 1`, scaled; the result has the shape and dtype of `query`.
  torch::Tensor forward(const torch::Tensor& query, int64_t offset = 0);

  /// `forward` at explicit positions `[L]` or `[B, L]` (integer or floating point).
  torch::Tensor forward_positions(const torch::Tensor& query, const torch::Tensor& positions);

  /// The options this module was built with.
  AttentionTemperatureOptions options;
};

/// A `ModuleHolder` subclass for `AttentionTemperatureImpl`.
TORCH_MODULE(AttentionTemperature);

/// T5's relative position bias (T5, mT5, Flan-T5, UL2): a learned scalar per head and
/// relative-position bucket, added to the attention scores. The table is the submodule
/// `relative_attention_bias` (an Embedding `[num_buckets, num_heads]`), so a T5 checkpoint's
/// `...relative_attention_bias.weight` loads into it.
///
/// Example:
/// ```
/// posenc::RelativePositionBias bias(posenc::RelativePositionBiasOptions(8));
/// auto b = bias(/*query_length=*/16, /*key_length=*/16);   // [1, 8, 16, 16]
/// ```
class RelativePositionBiasImpl : public torch::nn::Cloneable<RelativePositionBiasImpl> {
 public:
  /// The module's name, the prefix of its error messages.
  static constexpr const char* kName = "RelativePositionBias";

  /// Builds the module from `options_` and calls reset(), which checks them.
  explicit RelativePositionBiasImpl(const RelativePositionBiasOptions& options_);

  /// Checks the options and registers (and initializes) the table.
  void reset() override;

  /// Draws the table again from normal(0, 1) (torch::nn::Embedding's initialization).
  void reset_parameters();

  /// Pretty prints the module, e.g.
  /// `posenc::RelativePositionBias(num_heads=8, num_buckets=32, max_distance=128,
  /// bidirectional=true)`.
  void pretty_print(std::ostream& stream) const override;

  /// The bias `[1, H, Lq, Lk]` for queries at `offset .. offset + Lq - 1` (offset: the tokens in
  /// the KV cache when decoding) and keys `0 .. Lk - 1`.
  torch::Tensor forward(int64_t query_length, int64_t key_length, int64_t offset = 0);

  /// The options this module was built with.
  RelativePositionBiasOptions options;

  /// The learned table, `[num_buckets, num_heads]` (the submodule `relative_attention_bias`).
  torch::nn::Embedding relative_attention_bias{nullptr};
};

/// A `ModuleHolder` subclass for `RelativePositionBiasImpl`.
TORCH_MODULE(RelativePositionBias);

/// The Transformer-XL / Conformer relative sinusoidal encoding (ESPnet's `RelPositionalEncoding`,
/// wav2vec2-conformer, NeMo): scales the input by sqrt(d_model) and returns, beside it, the
/// encoding of the relative positions its attention needs, for `RelPositionMultiheadAttention`.
/// The table is the buffer `pe` (`[2 * max_len - 1, d_model]`, relative positions
/// `max_len - 1 .. -(max_len - 1)`; legacy: `[max_len, d_model]`, positions `0 ..`), float32.
///
/// Streaming (WeNet's chunk-by-chunk decoding): `forward(chunk, offset)` with `offset` frames
/// already cached gives the relative positions `offset + L - 1 .. -(L - 1)` of the chunk's queries
/// against all `offset + L` keys (legacy: the absolute positions `offset .. offset + L - 1`).
///
/// Example:
/// ```
/// posenc::RelPositionalEncoding pos(posenc::RelPositionalEncodingOptions(256));
/// auto [x_scaled, pos_emb] = pos->forward(x);   // x [B, L, 256]; pos_emb [1, 2L - 1, 256]
/// ```
class RelPositionalEncodingImpl : public torch::nn::Cloneable<RelPositionalEncodingImpl> {
 public:
  /// The module's name, the prefix of its error messages.
  static constexpr const char* kName = "RelPositionalEncoding";

  /// Builds the module from `options_` and calls reset(), which checks them.
  explicit RelPositionalEncodingImpl(const RelPositionalEncodingOptions& options_);

  /// Checks the options and builds the table.
  void reset() override;

  /// Pretty prints the module, e.g. `posenc::RelPositionalEncoding(d_model=256, max_len=5000)`.
  void pretty_print(std::ostream& stream) const override;

  /// `(dropout(x * sqrt(d_model)), dropout(pos_emb))` for `x` `[B, L, d_model]`.
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x, int64_t offset = 0);

  /// The options this module was built with.
  RelPositionalEncodingOptions options;

  /// The table (the buffer `pe`).
  torch::Tensor pe;
};

/// A `ModuleHolder` subclass for `RelPositionalEncodingImpl`.
TORCH_MODULE(RelPositionalEncoding);

/// Multi-head self-attention with relative positions (Transformer-XL, Conformer: ESPnet's
/// `RelPositionMultiHeadedAttention`, `Wav2Vec2ConformerSelfAttention` with relative position
/// embeddings). Parameters under ESPnet's and transformers' names: `linear_q`, `linear_k`,
/// `linear_v`, `linear_out`, `linear_pos` (no bias), `pos_bias_u`, `pos_bias_v` (`[H, d_k]`).
///
/// Example:
/// ```
/// posenc::RelPositionalEncoding pos(posenc::RelPositionalEncodingOptions(256));
/// posenc::RelPositionMultiheadAttention attn(
///     posenc::RelPositionMultiheadAttentionOptions(256, 4));
/// auto [x_scaled, pos_emb] = pos->forward(x);
/// auto y = attn(x_scaled, x_scaled, x_scaled, pos_emb);
/// ```
class RelPositionMultiheadAttentionImpl
    : public torch::nn::Cloneable<RelPositionMultiheadAttentionImpl> {
 public:
  /// The module's name, the prefix of its error messages.
  static constexpr const char* kName = "RelPositionMultiheadAttention";

  /// Shorthand for `RelPositionMultiheadAttentionOptions(embed_dim, num_heads)` (defaults
  /// otherwise).
  RelPositionMultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads)
      : RelPositionMultiheadAttentionImpl(
            RelPositionMultiheadAttentionOptions(embed_dim, num_heads)) {}
  /// Builds the module from `options_` and calls reset(), which checks them.
  explicit RelPositionMultiheadAttentionImpl(const RelPositionMultiheadAttentionOptions& options_);

  /// Checks the options, registers the projections and the position biases (zeros, then Xavier
  /// uniform as ESPnet initializes them).
  void reset() override;

  /// Pretty prints the module, e.g.
  /// `posenc::RelPositionMultiheadAttention(embed_dim=256, num_heads=4, dropout=0)`.
  void pretty_print(std::ostream& stream) const override;

  /// Attends `query` `[B, Lq, D]` to `key` / `value` `[B, Lk, D]` with `pos_emb`
  /// (`[1 or B, Lq + Lk - 1, D]`, relative positions `Lk - 1 .. -(Lq - 1)`, as
  /// `RelPositionalEncoding` returns it). `mask`: bool (true = attend) or additive float,
  /// broadcastable to `[B, H, Lq, Lk]` (e.g. `[B, 1, 1, Lk]` for padding). Returns `[B, Lq, D]`.
  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& key,
                        const torch::Tensor& value, const torch::Tensor& pos_emb,
                        const torch::Tensor& mask = torch::Tensor());

  /// The options this module was built with.
  RelPositionMultiheadAttentionOptions options;

  /// The query projection, Linear(embed_dim, embed_dim) with bias.
  torch::nn::Linear linear_q{nullptr};
  /// The key projection, Linear(embed_dim, embed_dim) with bias.
  torch::nn::Linear linear_k{nullptr};
  /// The value projection, Linear(embed_dim, embed_dim) with bias.
  torch::nn::Linear linear_v{nullptr};
  /// The output projection of the attended heads, Linear(embed_dim, embed_dim) with bias.
  torch::nn::Linear linear_out{nullptr};
  /// The projection of `pos_emb`, Linear(embed_dim, embed_dim) without bias.
  torch::nn::Linear linear_pos{nullptr};
  /// The content bias u, `[H, embed_dim / H]`, added to the queries scored against the keys:
  /// `(q + u) k^T` (the parameter `pos_bias_u`, Xavier uniform initially).
  torch::Tensor pos_bias_u;
  /// The position bias v, `[H, embed_dim / H]`, added to the queries scored against the projected
  /// `pos_emb` p: `(q + v) p^T` (the parameter `pos_bias_v`, Xavier uniform initially).
  torch::Tensor pos_bias_v;
};

/// A `ModuleHolder` subclass for `RelPositionMultiheadAttentionImpl`.
TORCH_MODULE(RelPositionMultiheadAttention);

} // namespace posenc
