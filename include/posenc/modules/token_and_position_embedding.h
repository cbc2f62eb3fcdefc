#pragma once

#include <posenc/modules/learned_positional_embedding.h>
#include <posenc/modules/positional_encoding.h>
#include <posenc/options/token_and_position_embedding.h>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/common.h>
#include <torch/nn/modules/container/any_module_holder.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <ostream>

namespace posenc {

namespace functional {
/// `dropout(weight[tokens] * scale + table[positions])` in one pass (the posenc::
/// token_and_position_embedding operator): the functional form of TokenAndPositionEmbedding.
/// `tokens` are int64 `[B, L]` (or `[L, B]`), `weight` `[vocab, D]`, `table` `[max_len, D]` or
/// `[1, max_len, D]`; the result is `[B, L, D]` (`[L, B, D]`) in the weight's dtype.
at::Tensor token_and_position_embedding(const at::Tensor& tokens,
                                        const at::Tensor& weight,
                                        const at::Tensor& table,
                                        const TokenAndPositionEmbeddingFuncOptions& options = {});
} // namespace functional

/// The block that starts every transformer: `dropout(token_embedding(ids) * scale + positions)`.
///
/// Submodules: `tokens` (a torch::nn::Embedding, `[vocab_size, d_model]`) and `positions` (a
/// PositionalEncoding or a LearnedPositionalEmbedding). With `padding_idx`, padding tokens embed
/// to zero and get no position. The forward runs as one fused kernel (gather, scale, add,
/// dropout: one pass, one allocation), except for positions past max_len under kExtrapolate, which
/// go through the submodules.
///
/// Example:
/// ```
/// posenc::TokenAndPositionEmbedding embed(posenc::TokenAndPositionEmbeddingOptions(1000, 256,
/// 512).batch_first(false)); torch::nn::TransformerEncoder
/// encoder(torch::nn::TransformerEncoderOptions(
///     torch::nn::TransformerEncoderLayerOptions(256, 8), 6));
/// auto hidden = encoder(embed(ids));   // ids: [L, B] int64
/// ```
class TokenAndPositionEmbeddingImpl : public torch::nn::Cloneable<TokenAndPositionEmbeddingImpl> {
 public:
  TokenAndPositionEmbeddingImpl(int64_t vocab_size, int64_t d_model, int64_t max_len)
      : TokenAndPositionEmbeddingImpl(
            TokenAndPositionEmbeddingOptions(vocab_size, d_model, max_len)) {}
  explicit TokenAndPositionEmbeddingImpl(const TokenAndPositionEmbeddingOptions& options_);

  /// Checks `options` and builds the submodules.
  void reset() override;

  /// Pretty prints the module, e.g.
  /// `posenc::TokenAndPositionEmbedding(vocab_size=1000, d_model=256, max_len=512,
  /// positions=sinusoidal, scale=16, dropout=0, batch_first=true)`.
  void pretty_print(std::ostream& stream) const override;

  /// Embeds token ids (`[B, L]` or `[L, B]`, integral, in [0, vocab_size)) at positions
  /// `offset .. offset + L - 1` (with `padding_idx`: counted over real tokens from `offset`).
  torch::Tensor forward(const torch::Tensor& tokens, int64_t offset = 0);

  /// Embeds token ids at explicit positions (`[B, L]` / `[L, B]` or `[L]`; -1 = padding).
  torch::Tensor forward_positions(const torch::Tensor& tokens, const torch::Tensor& positions);

  /// The options this module was built with.
  TokenAndPositionEmbeddingOptions options;

  /// The token embedding.
  torch::nn::Embedding tokens{nullptr};
  /// The position module, registered as `positions`: one of these two is set.
  PositionalEncoding sinusoidal{nullptr};
  LearnedPositionalEmbedding learned{nullptr};

 protected:
  FORWARD_HAS_DEFAULT_ARGS({1, torch::nn::AnyValue(int64_t{0})})

 private:
  void check_ids(const torch::Tensor& ids) const;
  torch::Tensor run(const torch::Tensor& ids, int64_t offset, const torch::Tensor& positions);
};

/// A `ModuleHolder` subclass for `TokenAndPositionEmbeddingImpl`.
TORCH_MODULE(TokenAndPositionEmbedding);

} // namespace posenc
