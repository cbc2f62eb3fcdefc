#pragma once

/// Vision and diffusion positions in functional form: the diffusion timestep embedding, the 2-D
/// sin-cos tables of 2-D and 3-D patch grids (diffusers', timm's), axial RoPE's tables
/// (Flux's, timm's EVA-02) and resizing learned tables (resampling, SD3's crop). The modules in
/// <posenc/modules/vision.h> call these; each calls a `posenc::` operator (<posenc/ops.h>).

#include <posenc/options/vision.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace posenc {
namespace functional {

/// The timestep embedding `[N, embedding_dim]` of timesteps `[N]` (integer or fractional), float32
/// (see posenc::ops::timestep_embedding).
///
/// Example:
/// ```
/// auto emb = F::timestep_embedding(torch::tensor({999.0, 500.5}),
///                                  posenc::TimestepEmbeddingOptions(320).flip_sin_to_cos(true));
/// ```
at::Tensor timestep_embedding(const at::Tensor& timesteps, const TimestepEmbeddingOptions& options);

/// diffusers' `get_2d_sincos_pos_embed`: the float32 `[extra + H * W, embed_dim]` table of a patch
/// grid (see posenc::ops::sincos_2d_table).
at::Tensor sincos_2d_table(const Sincos2dTableOptions& options);

/// timm's `build_sincos2d_pos_embed`: the float32 `[H * W, dim]` table of `feat_shape` `{H, W}`
/// (see posenc::ops::sincos_2d_grid_table).
at::Tensor sincos_2d_grid_table(const std::vector<int64_t>& feat_shape, int64_t dim = 64,
                                double temperature = 10000.0, bool reverse_coord = false,
                                bool interleave_sin_cos = false);

/// diffusers' `get_3d_sincos_pos_embed`: the float32 `[T, H * W, embed_dim]` table of a video's
/// patch grid (see posenc::ops::sincos_3d_table).
at::Tensor sincos_3d_table(const Sincos3dTableOptions& options);

/// timm's axial RoPE of a patch grid (EVA-02): cos and sin `[H * W, dim / 2]` for `feat_shape`
/// `{H, W}`, float32 (float64 with `dtype`): posenc::ops::axial_rotary_tables of
/// posenc::ops::grid_ids.
std::tuple<at::Tensor, at::Tensor> grid_rotary_tables(
    const std::vector<int64_t>& feat_shape, const VisionRotaryEmbeddingOptions& options,
    c10::optional<at::ScalarType> dtype = c10::nullopt,
    c10::optional<at::Device> device = c10::nullopt);

/// Axial RoPE's cos and sin `[N, sum(axes_dim) / 2]` for the coordinates `ids` `[N, A]`, float32
/// (float64 with `dtype`) on the device of `ids` (see posenc::ops::axial_rotary_tables).
///
/// Example:
/// ```
/// auto [cos, sin] = F::axial_rotary_tables(ids, posenc::AxialRotaryEmbeddingOptions({16, 56, 56}));
/// ```
std::tuple<at::Tensor, at::Tensor> axial_rotary_tables(
    const at::Tensor& ids, const AxialRotaryEmbeddingOptions& options,
    c10::optional<at::ScalarType> dtype = c10::nullopt);

/// timm's `resample_abs_pos_embed`: a `[1, N, D]` (or `[N, D]`) position table with its prefix
/// rows and its patch grid resized to `new_size` (see posenc::ops::resample_position_table).
at::Tensor resample_position_table(const at::Tensor& posemb,
                                   const ResamplePositionTableOptions& options);

/// SD3's `PatchEmbed.cropped_pos_embed`: the centre of a position table's grid (see
/// posenc::ops::crop_position_table).
at::Tensor crop_position_table(const at::Tensor& posemb, const CropPositionTableOptions& options);

} // namespace functional
} // namespace posenc
