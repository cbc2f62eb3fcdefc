#pragma once

/// @file
/// posenc's operators: vision and diffusion tables: timesteps, 2-D/3-D sin-cos, axial RoPE, resampling. Each function calls its operator
/// `posenc::<name>` through the dispatcher (`torch.ops.posenc.<name>` from Python and
/// TorchScript); its schema is the `m.def` beside its entry point in `src/ops/vision/vision.cpp` (kernels:
/// the same file). What positions, padding and rows past a table mean for every operator is
/// in <posenc/ops.h>.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Optional.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <tuple>

namespace posenc {
namespace ops {

/// The diffusion timestep embedding (DDPM; diffusers' `get_timestep_embedding`, same names and
/// defaults): `[N, embedding_dim]` for timesteps `[N]` (integer or fractional, any device), columns
/// `sin(scale t f_k)` then `cos(scale t f_k)` (`flip_sin_to_cos`: cos first), f_k =
/// `exp(-ln(max_period) k / (embedding_dim / 2 - downscale_freq_shift))`, a zero column last for
/// odd widths. Computed in float64, rounded once to `dtype` (default float32). NaN or infinite
/// timesteps are an error.
at::Tensor timestep_embedding(const at::Tensor& timesteps, int64_t embedding_dim,
                              bool flip_sin_to_cos = false, double downscale_freq_shift = 1.0,
                              double scale = 1.0, int64_t max_period = 10000,
                              c10::optional<at::ScalarType> dtype = c10::nullopt);

/// The 2-D sin-cos table of a patch grid as diffusers' `get_2d_sincos_pos_embed` builds it (DiT,
/// PixArt, SD3; MAE with `base_size` equal to the grid size): `[H * W, embed_dim]` for
/// `grid_size` `{H, W}` (or `{S}`: square), row `i * W + j` the patch at (i, j), at the coordinates
/// `(j * base_size / W, i * base_size / H) / interpolation_scale`; the first half of the columns
/// encodes the column coordinate, the second the row coordinate, each `[sin | cos]` of
/// `embed_dim / 4` frequencies 10000^(-k / (embed_dim / 4)). With `cls_token` and `extra_tokens`
/// > 0, that many zero rows first (diffusers' rule; MAE's class token: `cls_token = true,
/// extra_tokens = 1`). Computed in float64, rounded once to `dtype` (default float32).
at::Tensor sincos_2d_table(int64_t embed_dim, c10::IntArrayRef grid_size, bool cls_token = false,
                           int64_t extra_tokens = 0, double interpolation_scale = 1.0,
                           int64_t base_size = 16,
                           c10::optional<at::ScalarType> dtype = c10::nullopt,
                           c10::optional<at::Device> device = c10::nullopt);

/// timm's `build_sincos2d_pos_embed` (same names and defaults): `[H * W, dim]` for `feat_shape`
/// `{H, W}` at integer coordinates (i, j) (`reverse_coord`: (j, i) of `{W, H}`), `dim / 4`
/// frequencies temperature^(-k / (dim / 4)), columns `sin(i) sin(j) cos(i) cos(j)` or, with
/// `interleave_sin_cos`, `sin(i) cos(i) sin(j) cos(j)`. float64, rounded once to `dtype`.
at::Tensor sincos_2d_grid_table(c10::IntArrayRef feat_shape, int64_t dim = 64,
                                double temperature = 10000.0, bool reverse_coord = false,
                                bool interleave_sin_cos = false,
                                c10::optional<at::ScalarType> dtype = c10::nullopt,
                                c10::optional<at::Device> device = c10::nullopt);

/// Axial RoPE (Flux's `FluxPosEmbed`; the 3-D RoPE of video DiTs): cos and sin `[N, sum(axes_dim)
/// / 2]` for the coordinates `ids` `[N, A]` of N tokens on A = `axes_dim.size()` axes (integer or
/// fractional, negative allowed; Flux: `[S, 3]` float ids, `axes_dim` {16, 56, 56}). Axis a turns
/// `axes_dim[a] / 2` frequencies theta^(-2i / axes_dim[a]) by `ids[n, a]`; the axes' columns follow
/// each other. Computed in float64, rounded once to `dtype` (default float32), on the device of
/// `ids`; rotate with `apply_rotary(x, cos, sin, ..., interleaved = true)` (Flux's pairs) for a
/// sequence of N tokens. NaN or infinite ids are an error.
std::tuple<at::Tensor, at::Tensor> axial_rotary_tables(
    const at::Tensor& ids, c10::IntArrayRef axes_dim, double theta = 10000.0,
    c10::optional<at::ScalarType> dtype = c10::nullopt);

/// timm's `resample_abs_pos_embed` (same names and defaults): a learned ViT position table
/// `posemb` (`[1, N, D]` or `[N, D]`: `num_prefix_tokens` class/register rows, then the patch grid
/// `old_size` `{H, W}` in row-major order; empty `old_size`: a square grid) resized to the grid
/// `new_size` (`{H', W'}`, or `{S}`: square) with PyTorch's 2-D interpolation
/// (`interpolation` "bicubic", "bilinear" or "nearest"; `antialias` for the first two); the
/// prefix rows are kept. Computed in float32 (float64 tables in float64), returned in the table's
/// dtype; differentiable. A grid of the same size comes back unchanged (a copy).
at::Tensor resample_position_table(const at::Tensor& posemb, c10::IntArrayRef new_size,
                                   c10::IntArrayRef old_size = {}, int64_t num_prefix_tokens = 1,
                                   c10::string_view interpolation = "bicubic",
                                   bool antialias = true, bool align_corners = false);

/// diffusers' `get_3d_sincos_pos_embed` (CogVideoX, Latte; same names and defaults): `[T, H * W,
/// embed_dim]` for `spatial_size` `{W, H}` (diffusers' order; `{S}`: square) and `temporal_size`
/// T, row `[t, i * W + j]` frame t's patch at (i, j). The first `embed_dim / 4` columns encode
/// `t / temporal_interpolation_scale` (`[sin | cos]` of `embed_dim / 8` frequencies
/// 10000^(-k / (embed_dim / 8))), the rest the column, then the row coordinate
/// `(j, i) / spatial_interpolation_scale` as `sincos_2d_table` lays them out (`3 embed_dim / 16`
/// frequencies each). `embed_dim` a multiple of 16. float64, rounded once to `dtype`.
at::Tensor sincos_3d_table(int64_t embed_dim, c10::IntArrayRef spatial_size, int64_t temporal_size,
                           double spatial_interpolation_scale = 1.0,
                           double temporal_interpolation_scale = 1.0,
                           c10::optional<at::ScalarType> dtype = c10::nullopt,
                           c10::optional<at::Device> device = c10::nullopt);

/// SD3's `PatchEmbed.cropped_pos_embed`: the centre `new_size` `{h, w}` (`{S}`: square) of a
/// position table's grid (`[1, N, D]` or `[N, D]`: `num_prefix_tokens` rows kept, then the grid
/// `old_size` `{H, W}`, empty: square), rows `top = (H - h) / 2` .. and columns
/// `left = (W - w) / 2` .., floor division. SD3: a `pos_embed_max_size`^2 table cropped to the
/// latent's patch grid. Differentiable; every device.
at::Tensor crop_position_table(const at::Tensor& posemb, c10::IntArrayRef new_size,
                               c10::IntArrayRef old_size = {}, int64_t num_prefix_tokens = 0);

/// The token coordinates of timm's axial RoPE of index grids (`RotaryEmbeddingCat(dim,
/// in_pixels=False, ...)`, EVA-02; same names and defaults): `[H * W, 2]` for the patch grid
/// `feat_shape` `{H, W}`, the token at (i, j) (row-major) at `(i + grid_offset) * ref_H / H` and
/// `(j + grid_offset) * ref_W / W` (`ref_feat_shape` `{ref_H, ref_W}`, the pretraining grid;
/// empty: no rescaling), in that order (`grid_indexing` "ij") or swapped ("xy"). float64 (the
/// default `dtype`). `axial_rotary_tables(ids, {dim / 2, dim / 2}, temperature)` turns them into
/// timm's tables: each coordinate turns dim / 4 frequencies temperature^(-k / (dim / 4)).
at::Tensor grid_ids(c10::IntArrayRef feat_shape, c10::IntArrayRef ref_feat_shape = {},
                    double grid_offset = 0.0, c10::string_view grid_indexing = "ij",
                    c10::optional<at::ScalarType> dtype = c10::nullopt,
                    c10::optional<at::Device> device = c10::nullopt);

} // namespace ops
} // namespace posenc
