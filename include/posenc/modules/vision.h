#pragma once

#include <posenc/functional/vision.h>
#include <posenc/options/vision.h>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <ostream>
#include <tuple>
#include <vector>

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
  /// The module's name, the prefix of its error messages.
  static constexpr const char* kName = "Timesteps";

  /// Builds the module from `options_` and calls reset(), which checks them.
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
  /// The module's name, the prefix of its error messages.
  static constexpr const char* kName = "TimestepEmbedder";

  /// Builds the module from `options_` and calls reset(), which checks them.
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

/// Axial RoPE (Flux's `FluxPosEmbed` with diffusers' `apply_rotary_emb`): rotates queries or keys
/// `[B, L, H, Dh]` (`[B, H, L, Dh]` with `heads_first`) by the angles of their tokens' coordinates
/// `ids` `[L, A]` (integer or fractional), axis a turning axes_dim[a] / 2 pairs of channels;
/// channels past sum(axes_dim) pass through. The tables are computed in float64 from `ids` on
/// every call (they change with the image size) and rounded once. No parameters or buffers.
///
/// Example:
/// ```
/// posenc::AxialRotaryEmbedding rope(posenc::AxialRotaryEmbeddingOptions({16, 56, 56}));
/// auto q_rot = rope(q, ids);                 // q [B, S, 24, 128], ids [S, 3]
/// auto [cos, sin] = rope->tables(ids);       // [S, 64] each, for posenc::ops::apply_rotary_qk
/// ```
class AxialRotaryEmbeddingImpl : public torch::nn::Cloneable<AxialRotaryEmbeddingImpl> {
 public:
  /// The module's name, the prefix of its error messages.
  static constexpr const char* kName = "AxialRotaryEmbedding";

  /// Builds the module from `options_` and calls reset(), which checks them.
  explicit AxialRotaryEmbeddingImpl(const AxialRotaryEmbeddingOptions& options_);

  /// Checks the options.
  void reset() override;

  /// Pretty prints the module, e.g. `posenc::AxialRotaryEmbedding(axes_dim=[16, 56, 56])`.
  void pretty_print(std::ostream& stream) const override;

  /// `x` rotated by the angles of `ids` (`[L, A]`, one row per token of `x`), in the dtype of `x`.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& ids);

  /// cos and sin `[L, sum(axes_dim) / 2]` of `ids`, float32 (float64 with `dtype`).
  std::tuple<torch::Tensor, torch::Tensor> tables(
      const torch::Tensor& ids, c10::optional<torch::ScalarType> dtype = c10::nullopt) const;

  /// The options this module was built with.
  AxialRotaryEmbeddingOptions options;
};

/// A `ModuleHolder` subclass for `AxialRotaryEmbeddingImpl`.
TORCH_MODULE(AxialRotaryEmbedding);

/// timm's axial RoPE of patch grids as EVA-02 uses it (`RotaryEmbeddingCat(dim, in_pixels=False)`
/// with `apply_rot_embed_cat`, the class and register tokens left as they are): rotates queries or
/// keys `[B, H, N, Dh]` (`[B, N, H, Dh]` without `heads_first`) whose N tokens are
/// `num_prefix_tokens` prefix tokens, then the patch grid `feat_shape` `{h, w}` in row-major order.
/// Patch (i, j) turns dim / 4 pairs by its row and dim / 4 by its column coordinate (see
/// functional::grid_rotary_tables); channels past `dim` pass through. The tables are computed in
/// float64 for the grid of each call (any resolution) and rounded once. No parameters or buffers.
///
/// Example:
/// ```
/// posenc::VisionRotaryEmbedding rope(
///     posenc::VisionRotaryEmbeddingOptions(64).ref_feat_shape({16, 16}));
/// auto q_rot = rope->forward(q, {32, 32});   // q [B, 12, 1 + 32 * 32, 64]
/// auto [cos, sin] = rope->tables({32, 32});  // [1024, 32] each
/// ```
class VisionRotaryEmbeddingImpl : public torch::nn::Cloneable<VisionRotaryEmbeddingImpl> {
 public:
  /// The module's name, the prefix of its error messages.
  static constexpr const char* kName = "VisionRotaryEmbedding";

  /// Builds the module from `options_` and calls reset(), which checks them.
  explicit VisionRotaryEmbeddingImpl(const VisionRotaryEmbeddingOptions& options_);

  /// Checks the options.
  void reset() override;

  /// Pretty prints the module, e.g. `posenc::VisionRotaryEmbedding(dim=64, ref_feat_shape=[16,
  /// 16])`.
  void pretty_print(std::ostream& stream) const override;

  /// `x` with its patch tokens rotated for the grid `feat_shape` (`{h, w}`; the token count must
  /// be num_prefix_tokens + h * w), in the dtype of `x`.
  torch::Tensor forward(const torch::Tensor& x, const std::vector<int64_t>& feat_shape);

  /// cos and sin `[h * w, dim / 2]` of the grid, float32 (float64 with `dtype`), on `device`.
  std::tuple<torch::Tensor, torch::Tensor> tables(
      const std::vector<int64_t>& feat_shape,
      c10::optional<torch::ScalarType> dtype = c10::nullopt,
      c10::optional<torch::Device> device = c10::nullopt) const;

  /// The options this module was built with.
  VisionRotaryEmbeddingOptions options;
};

/// A `ModuleHolder` subclass for `VisionRotaryEmbeddingImpl`.
TORCH_MODULE(VisionRotaryEmbedding);

} // namespace posenc
