#pragma once

#include <posenc/functional/positional_encoding.h>
#include <posenc/modules/encoding_base.h>
#include <posenc/options/learned_positional_embedding.h>

#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <ostream>
#include <vector>

namespace posenc {

/// A trainable table of position embeddings (BERT, GPT-2) added to the input: the same forwards
/// as `PositionalEncoding` (offset, explicit positions, padding mask), with the gradient flowing
/// into the rows used.
///
/// The table is the parameter `weight`, `[max_len, d_model]`, initialized from normal(0,
/// `init_std`); a Python `nn.Embedding` of positions (e.g. BERT's `position_embeddings`) loads
/// into it with `posenc::load_state_dict` and a prefix. Positions at or past `max_len` are an
/// error: a learned table has nothing to extrapolate from.
///
/// Example:
/// ```
/// posenc::LearnedPositionalEmbedding pos(posenc::LearnedPositionalEmbeddingOptions(768, 512));
/// auto y = pos(torch::randn({8, 128, 768}));
/// ```
class LearnedPositionalEmbeddingImpl
    : public detail::SequenceEncodingModule<LearnedPositionalEmbeddingImpl> {
 public:
  /// The module's name, the prefix of its error messages.
  static constexpr const char* kName = "LearnedPositionalEmbedding";
  /// `false`: the module has no tables computed from the options; `to()` moves and casts as
  /// `torch::nn::Module::to` does.
  static constexpr bool kDerivedTables = false;

  /// Shorthand for `LearnedPositionalEmbeddingOptions(d_model, max_len)` (defaults otherwise).
  LearnedPositionalEmbeddingImpl(int64_t d_model, int64_t max_len)
      : LearnedPositionalEmbeddingImpl(LearnedPositionalEmbeddingOptions(d_model, max_len)) {}
  /// Builds the module from `options_` and calls reset(), which checks them.
  explicit LearnedPositionalEmbeddingImpl(const LearnedPositionalEmbeddingOptions& options_);

  /// Checks `options`, registers `weight` and initializes it.
  void reset() override;

  /// Draws `weight` again from normal(0, init_std).
  void reset_parameters();

  /// Pretty prints the module, e.g.
  /// `posenc::LearnedPositionalEmbedding(d_model=768, max_len=512, dropout=0, batch_first=true)`.
  void pretty_print(std::ostream& stream) const override;

  // forward(x, offset), forward_positions(x, positions), forward_padded(x, padding_mask): as
  // PositionalEncoding's (from detail::SequenceEncodingModule).

  /// The options this module was built with.
  LearnedPositionalEmbeddingOptions options;

  /// The trainable table, `[max_len, d_model]`, registered as the parameter `weight`.
  torch::Tensor weight;

 private:
  friend class detail::EncodingModule<LearnedPositionalEmbeddingImpl>;
  friend class detail::SequenceEncodingModule<LearnedPositionalEmbeddingImpl>;
  torch::Tensor forward_at(const torch::Tensor& x, int64_t offset, const torch::Tensor& positions);
  void build_tables(torch::Dtype, torch::Device) {}
  std::vector<torch::Tensor*> derived_tables() {
    return {};
  }
  std::vector<detail::TableSlot> table_slots();
};

/// A `ModuleHolder` subclass for `LearnedPositionalEmbeddingImpl`.
TORCH_MODULE(LearnedPositionalEmbedding);

} // namespace posenc
