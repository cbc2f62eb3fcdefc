#pragma once

#include <posenc/functional/rotary_embedding.h>
#include <posenc/options/rotary_embedding.h>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/common.h>
#include <torch/nn/modules/container/any_module_holder.h>
#include <torch/nn/pimpl.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>

#include <cstdint>
#include <ostream>

namespace posenc {

/// Rotary position embedding (RoPE, Su et al.): rotates pairs of channels of the queries and
/// keys of attention by angles proportional to their positions, so that attention scores depend
/// on relative positions.
///
/// The caches are the buffers `cos` and `sin`, `[max_len, rotary_dim / 2]`, computed in double
/// precision and stored in float32 (float64 after `.to(torch::kDouble)`; never 16-bit). Outputs
/// have the input's dtype, computed in at least float32. Both pairings (half-split, as in
/// GPT-NeoX / HF LLaMA, and interleaved, as in GPT-J / torchtune), partial rotary, offsets and
/// explicit positions for KV-cache decoding, and both head layouts are supported.
///
/// Example:
/// ```
/// posenc::RotaryEmbedding rope(posenc::RotaryEmbeddingOptions(/*head_dim=*/64, /*max_len=*/2048));
/// auto q_rot = rope(q);                 // q: [B, L, H, 64], positions 0..L-1
/// auto k_new = rope(k_step, past_len);  // one decoding step at position past_len
/// ```
class RotaryEmbeddingImpl : public torch::nn::Cloneable<RotaryEmbeddingImpl> {
 public:
  RotaryEmbeddingImpl(int64_t head_dim, int64_t max_len)
      : RotaryEmbeddingImpl(RotaryEmbeddingOptions(head_dim, max_len)) {}
  explicit RotaryEmbeddingImpl(const RotaryEmbeddingOptions& options_);

  /// Checks `options` and (re)builds the `cos` and `sin` buffers.
  void reset() override;

  /// Pretty prints the module, e.g.
  /// `posenc::RotaryEmbedding(head_dim=64, max_len=2048, rotary_dim=64, base=10000,
  /// pairing=half_split, heads_first=false)`.
  void pretty_print(std::ostream& stream) const override;

  /// Rotates `x` (`[B, L, H, Dh]`, or `[B, H, L, Dh]` with `heads_first`) for positions
  /// `offset .. offset + L - 1`. The result has the shape and dtype of `x`.
  torch::Tensor forward(const torch::Tensor& x, int64_t offset = 0);

  /// Rotates `x` for explicit positions, `[B, L]` or `[L]` (-1 = padding: not rotated).
  torch::Tensor forward_positions(const torch::Tensor& x, const torch::Tensor& positions);

  /// Keeps `cos` and `sin` in at least float32, like PositionalEncoding's table.
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Device device, bool non_blocking = false) override;

  /// Loads `cos` and `sin`, checking shapes, dtypes and values first.
  void load(torch::serialize::InputArchive& archive) override;

  /// The options this module was built with.
  RotaryEmbeddingOptions options;

  /// The caches, `[max_len, rotary_dim / 2]`, registered as the buffers `cos` and `sin`.
  torch::Tensor cos;
  torch::Tensor sin;

 protected:
  FORWARD_HAS_DEFAULT_ARGS({1, torch::nn::AnyValue(int64_t{0})})

 private:
  void rebuild(torch::Dtype dtype, torch::Device device);
  torch::Tensor forward_impl(const torch::Tensor& x,
                             int64_t offset,
                             const torch::Tensor& positions);
  void to_impl(c10::optional<torch::Device> device,
               c10::optional<torch::Dtype> dtype,
               bool non_blocking);
};

/// A `ModuleHolder` subclass for `RotaryEmbeddingImpl`.
TORCH_MODULE(RotaryEmbedding);

} // namespace posenc
