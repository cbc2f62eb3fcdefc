#pragma once

#include <posenc/functional/vision.h>
#include <posenc/options/vision.h>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <ostream>

namespace posenc {

/// The diffusion timestep embedding as a module (diffusers' `Timesteps`): `[N, embedding_dim]`
/// float32 for timesteps `[N]`, integer or fractional. No parameters or buffers.
///
/// Example:
/// ```
/// posenc::Timesteps time_proj(
///     posenc::TimestepEmbeddingOptions(320).flip_sin_to_cos(true).downscale_freq_shift(0));
/// auto emb = time_proj(torch::tensor({999, 981}));   // [2, 320]
/// ```
class TimestepsImpl : public torch::nn::Cloneable<TimestepsImpl> {
 public:
  static constexpr const char* kName = "Timesteps";

  explicit TimestepsImpl(const TimestepEmbeddingOptions& options_);

  /// Checks the options.
  void reset() override;

  /// Pretty prints the module, e.g. `posenc::Timesteps(embedding_dim=320, flip_sin_to_cos=true,
  /// downscale_freq_shift=0)`.
  void pretty_print(std::ostream& stream) const override;

  /// The embedding of `timesteps` (`[N]`).
  torch::Tensor forward(const torch::Tensor& timesteps);

  /// The options this module was built with.
  TimestepEmbeddingOptions options;
};

/// A `ModuleHolder` subclass for `TimestepsImpl`.
TORCH_MODULE(Timesteps);

/// DiT's `TimestepEmbedder`: the timestep embedding of `frequency_embedding_size` channels (cos
/// first, frequencies exp(-ln(max_period) k / (size / 2))) through `mlp` = Linear, SiLU, Linear to
/// `hidden_size`; parameters `mlp.0.weight`, `mlp.0.bias`, `mlp.2.weight`, `mlp.2.bias` as in DiT
/// checkpoints.
///
/// Example:
/// ```
/// posenc::TimestepEmbedder t_embedder(posenc::TimestepEmbedderOptions(1152));
/// auto c = t_embedder(t);   // t [N] -> [N, 1152]
/// ```
class TimestepEmbedderImpl : public torch::nn::Cloneable<TimestepEmbedderImpl> {
 public:
  static constexpr const char* kName = "TimestepEmbedder";

  explicit TimestepEmbedderImpl(const TimestepEmbedderOptions& options_);

  /// Checks the options and registers the MLP.
  void reset() override;

  /// Pretty prints the module, e.g. `posenc::TimestepEmbedder(hidden_size=1152,
  /// frequency_embedding_size=256)`.
  void pretty_print(std::ostream& stream) const override;

  /// `mlp(timestep_embedding(timesteps))`, `[N, hidden_size]` in the MLP's dtype.
  torch::Tensor forward(const torch::Tensor& timesteps);

  /// The options this module was built with.
  TimestepEmbedderOptions options;

  /// Linear(frequency_embedding_size, hidden_size), SiLU, Linear(hidden_size, hidden_size).
  torch::nn::Sequential mlp{nullptr};
};

/// A `ModuleHolder` subclass for `TimestepEmbedderImpl`.
TORCH_MODULE(TimestepEmbedder);

} // namespace posenc
