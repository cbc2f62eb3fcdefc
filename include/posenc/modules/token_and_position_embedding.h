#pragma once

#include <posenc/functional/token_and_position_embedding.h>
#include <posenc/modules/encoding_base.h>
#include <posenc/modules/learned_positional_embedding.h>
#include <posenc/modules/positional_encoding.h>
#include <posenc/options/token_and_position_embedding.h>

#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <ostream>
#include <vector>

namespace posenc {

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
class TokenAndPositionEmbeddingImpl : public detail::EncodingModule<TokenAndPositionEmbeddingImpl> {
 public:
  /// The module's name, the prefix of its error messages.
  static constexpr const char* kName = "TokenAndPositionEmbedding";
  /// `false`: this module holds no tables itself (its submodules do); `to()` moves and casts as
  /// `torch::nn::Module::to` does, and the submodules apply their own rules.
  static constexpr bool kDerivedTables = false;

  /// Shorthand for `TokenAndPositionEmbeddingOptions(vocab_size, d_model, max_len)` (defaults
  /// otherwise).
  TokenAndPositionEmbeddingImpl(int64_t vocab_size, int64_t d_model, int64_t max_len)
      : TokenAndPositionEmbeddingImpl(
            TokenAndPositionEmbeddingOptions(vocab_size, d_model, max_len)) {}
  /// Builds the module from `options_` and calls reset(), which checks them.
  explicit TokenAndPositionEmbeddingImpl(const TokenAndPositionEmbeddingOptions& options_);

  /// Checks `options` and builds the submodules.
  void reset() override;

  /// Pretty prints the module, e.g.
  /// `posenc::TokenAndPositionEmbedding(vocab_size=1000, d_model=256, max_len=512,
  /// positions=sinusoidal, scale=16, dropout=0, batch_first=true)`.
  void pretty_print(std::ostream& stream) const override;

  // forward(ids, offset = 0): embeds token ids (`[B, L]` or `[L, B]`, integral, in
  // [0, vocab_size)) at positions `offset .. offset + L - 1` (with `padding_idx`: counted over real
  // tokens from `offset`). forward_positions(ids, positions): at explicit positions (`[B, L]` /
  // `[L, B]` or `[L]`; -1 = padding; sinusoidal positions may be floating-point: fractional, computed
  // from the definition). (Both from detail::EncodingModule.)

  /// The options this module was built with.
  TokenAndPositionEmbeddingOptions options;

  /// The token embedding.
  torch::nn::Embedding tokens{nullptr};
  /// The sinusoidal position module, registered as `positions`: set with
  /// PositionKind::kSinusoidal, else null (exactly one of `sinusoidal` and `learned` is set).
  PositionalEncoding sinusoidal{nullptr};
  /// The learned position module, registered as `positions`: set with PositionKind::kLearned,
  /// else null.
  LearnedPositionalEmbedding learned{nullptr};

 private:
  friend class detail::EncodingModule<TokenAndPositionEmbeddingImpl>;
  torch::Tensor forward_at(const torch::Tensor& ids, int64_t offset,
                           const torch::Tensor& positions);
  void build_tables(torch::Dtype, torch::Device) {}
  std::vector<torch::Tensor*> derived_tables() {
    return {};
  }
  std::vector<detail::TableSlot> table_slots() {
    return {}; // the submodules load their own
  }
};

/// A `ModuleHolder` subclass for `TokenAndPositionEmbeddingImpl`.
TORCH_MODULE(TokenAndPositionEmbedding);

} // namespace posenc
