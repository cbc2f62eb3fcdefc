#pragma once

#include <posenc/functional/positional_encoding.h>
#include <posenc/options/learned_positional_embedding.h>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/common.h>
#include <torch/nn/modules/container/any_module_holder.h>
#include <torch/nn/pimpl.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>

#include <cstdint>
#include <ostream>

namespace posenc {

namespace functional {
/// The functional form of `LearnedPositionalEmbedding::forward`: `dropout(x * scale +
/// weight[positions])`, differentiable with respect to `x` and `weight`.
inline at::Tensor learned_positional_embedding(
    const at::Tensor& x,
    const at::Tensor& weight,
    const LearnedPositionalEmbeddingFuncOptions& options = {}) {
  return positional_encoding(x, weight, options);
}
} // namespace functional

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
class LearnedPositionalEmbeddingImpl : public torch::nn::Cloneable<LearnedPositionalEmbeddingImpl> {
 public:
  LearnedPositionalEmbeddingImpl(int64_t d_model, int64_t max_len)
      : LearnedPositionalEmbeddingImpl(LearnedPositionalEmbeddingOptions(d_model, max_len)) {}
  explicit LearnedPositionalEmbeddingImpl(const LearnedPositionalEmbeddingOptions& options_);

  /// Checks `options`, registers `weight` and initializes it.
  void reset() override;

  /// Draws `weight` again from normal(0, init_std).
  void reset_parameters();

  /// Pretty prints the module, e.g.
  /// `posenc::LearnedPositionalEmbedding(d_model=768, max_len=512, dropout=0, batch_first=true)`.
  void pretty_print(std::ostream& stream) const override;

  /// Adds the embeddings of positions `offset .. offset + L - 1` (see PositionalEncoding).
  torch::Tensor forward(const torch::Tensor& x, int64_t offset = 0);

  /// Adds the embeddings of explicit positions (`[B, L]` / `[L, B]` or `[L]`; -1 = padding).
  torch::Tensor forward_positions(const torch::Tensor& x, const torch::Tensor& positions);

  /// Adds embeddings counted from the first real token; padding gets a zero vector.
  torch::Tensor forward_padded(const torch::Tensor& x, const torch::Tensor& padding_mask);

  /// Loads `weight`, checking shape, dtype and values first; the module is unchanged on error.
  void load(torch::serialize::InputArchive& archive) override;

  /// The options this module was built with.
  LearnedPositionalEmbeddingOptions options;

  /// The trainable table, `[max_len, d_model]`, registered as the parameter `weight`.
  torch::Tensor weight;

 protected:
  FORWARD_HAS_DEFAULT_ARGS({1, torch::nn::AnyValue(int64_t{0})})

 private:
  torch::Tensor forward_impl(const torch::Tensor& x,
                             int64_t offset,
                             const torch::Tensor& positions);
};

/// A `ModuleHolder` subclass for `LearnedPositionalEmbeddingImpl`.
TORCH_MODULE(LearnedPositionalEmbedding);

} // namespace posenc
