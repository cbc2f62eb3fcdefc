#pragma once

// Vision and diffusion positions, in double precision: diffusion timestep embeddings (fractional
// timesteps) and the sin-cos tables of 2-D grids (MAE, DiT, SD3 through diffusers'
// get_2d_sincos_pos_embed; timm's build_sincos2d_pos_embed). The one definition the operators,
// functional forms and modules use.

#include <posenc/options/vision.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace posenc {
namespace detail {

/// The arguments of a timestep embedding (diffusers' get_timestep_embedding names).
struct TimestepSpec {
  int64_t embedding_dim = 0;
  bool flip_sin_to_cos = false;
  double downscale_freq_shift = 1.0;
  double scale = 1.0;
  int64_t max_period = 10000;
};

/// The spec of a module's or functional's TimestepEmbeddingOptions.
TimestepSpec timestep_spec(const TimestepEmbeddingOptions& options);

/// Checks a TimestepSpec: embedding_dim >= 2, max_period >= 1, a finite scale and shift, and
/// embedding_dim / 2 - downscale_freq_shift != 0 (the frequencies divide by it).
void check_timestep_spec(const TimestepSpec& spec);

/// The embedding_dim / 2 frequencies exp(-ln(max_period) k / (embedding_dim / 2 -
/// downscale_freq_shift)), k = 0 .. embedding_dim / 2 - 1, in double precision.
std::vector<double> timestep_frequencies(const TimestepSpec& spec);

/// The embedding `[N, embedding_dim]` of the N timesteps (any real or integer dtype, any device):
/// columns sin(scale t f_k) then cos(scale t f_k) (cos first with flip_sin_to_cos), a zero column
/// last for odd widths; computed in float64 and rounded once to `dtype`. Checks `timesteps`
/// (1-D, finite) and the spec.
at::Tensor timestep_embedding(const at::Tensor& timesteps, const TimestepSpec& spec,
                              c10::ScalarType dtype);

/// How a grid table lays out its columns, for `bands` frequencies per axis.
enum class GridLayout {
  /// Per axis, in the order of the axes: sin of its bands, then cos (diffusers / MAE / DiT,
  /// timm with interleave_sin_cos).
  kAxisSinCos,
  /// sin of every axis' bands (axis by axis), then cos of every axis' bands (timm's default).
  kSinCosAxis,
};

/// The `[prod(sizes), axes * 2 * bands]` sin-cos table of a grid in row-major order of `axes`
/// (each a list of coordinates, the first varying slowest): angle coordinate * temperature^(-k /
/// bands), k = 0 .. bands - 1, columns in `layout` with the axes in `column_axes` order (indices
/// into `axes`). Angles, sines and cosines in float64 on the host, once per axis and
/// coordinate, each value rounded once to `dtype` and broadcast to the rows that share it.
at::Tensor grid_sincos_table(const std::vector<std::vector<double>>& axes,
                             const std::vector<size_t>& column_axes, int64_t bands,
                             double temperature, GridLayout layout,
                             c10::ScalarType dtype = at::kDouble);

/// Checks the arguments of sincos_2d_table (below).
void check_sincos_2d_arguments(int64_t embed_dim, const std::vector<int64_t>& grid_size,
                               int64_t extra_tokens, double interpolation_scale, int64_t base_size);

/// Checks the arguments of timm_sincos_2d_table (below).
void check_timm_sincos_2d_arguments(const std::vector<int64_t>& feat_shape, int64_t dim,
                                    double temperature);

/// diffusers' get_2d_sincos_pos_embed (DiT, PixArt, SD3): a `[H * W, embed_dim]` table for
/// grid_size `[H, W]` (one value: square), row i * W + j the patch at row i, column j, at
/// coordinates (j, i) * base_size / (W, H) / interpolation_scale; the first embed_dim / 2 columns
/// encode the column coordinate, the rest the row coordinate, each as [sin | cos] of embed_dim / 4
/// frequencies 10000^(-k / (embed_dim / 4)). With cls_token and extra_tokens > 0, that many zero
/// rows first (diffusers' rule: cls_token alone adds none). Computed in float64 and rounded once
/// to `dtype`, on the host. Checks the
/// arguments (embed_dim a positive multiple of 4, sizes >= 1, finite interpolation_scale > 0,
/// base_size >= 1, extra_tokens >= 0, at most kMaxTableElements elements).
at::Tensor sincos_2d_table(int64_t embed_dim, const std::vector<int64_t>& grid_size, bool cls_token,
                           int64_t extra_tokens, double interpolation_scale, int64_t base_size,
                           c10::ScalarType dtype = at::kDouble);

/// timm's build_sincos2d_pos_embed: a `[H * W, dim]` table for feat_shape `[H, W]` at the integer
/// coordinates (i, j) (reverse_coord: (j, i) from feat_shape [W, H]), dim / 4 frequencies
/// temperature^(-k / (dim / 4)); columns sin(i) sin(j) cos(i) cos(j), or with interleave_sin_cos
/// sin(i) cos(i) sin(j) cos(j). Computed in float64 and rounded once to `dtype`, on the host;
/// checks the arguments.
at::Tensor timm_sincos_2d_table(const std::vector<int64_t>& feat_shape, int64_t dim,
                                double temperature, bool reverse_coord, bool interleave_sin_cos,
                                c10::ScalarType dtype = at::kDouble);

/// Checks the arguments of sincos_3d_table (below).
void check_sincos_3d_arguments(int64_t embed_dim, const std::vector<int64_t>& spatial_size,
                               int64_t temporal_size, double spatial_interpolation_scale,
                               double temporal_interpolation_scale);

/// diffusers' get_3d_sincos_pos_embed (CogVideoX, Latte): a `[T, H * W, embed_dim]` table for
/// spatial_size `[W, H]` (diffusers' order; one value: square) and temporal_size T; row
/// `[t, i * W + j]` is frame t's patch at row i, column j. The first embed_dim / 4 columns encode
/// t / temporal_interpolation_scale as [sin | cos] of embed_dim / 8 frequencies
/// 10000^(-k / (embed_dim / 8)); the other 3 embed_dim / 4 encode the column then the row
/// coordinate (j, i) / spatial_interpolation_scale, each [sin | cos] of 3 embed_dim / 16
/// frequencies (get_2d_sincos_pos_embed's layout). Computed in float64 and rounded once to
/// `dtype`, on the host. Checks the arguments
/// (embed_dim a positive multiple of 16, sizes >= 1, finite scales > 0, at most kMaxTableElements).
at::Tensor sincos_3d_table(int64_t embed_dim, const std::vector<int64_t>& spatial_size,
                           int64_t temporal_size, double spatial_interpolation_scale,
                           double temporal_interpolation_scale,
                           c10::ScalarType dtype = at::kDouble);

/// Checks the arguments of grid_ids (below).
void check_grid_ids_arguments(const std::vector<int64_t>& feat_shape,
                              const std::vector<int64_t>& ref_feat_shape, double grid_offset,
                              c10::string_view grid_indexing);

/// Checks the arguments of timm's axial RoPE of a patch grid: grid_ids' and dim (a positive
/// multiple of 4: dim / 4 frequencies per axis), temperature (finite, > 0).
void check_grid_rotary_arguments(const std::vector<int64_t>& feat_shape, int64_t dim,
                                 double temperature, const std::vector<int64_t>& ref_feat_shape,
                                 double grid_offset, c10::string_view grid_indexing);

/// The coordinates of timm's axial RoPE with index grids (RotaryEmbeddingCat with in_pixels=False,
/// EVA-02): `[H * W, 2]` float64 for feat_shape `[H, W]`, row i * W + j holding ((i + grid_offset)
/// * ref_H / H, (j + grid_offset) * ref_W / W) (no rescaling without ref_feat_shape), the two
/// coordinates swapped for grid_indexing "xy". With axial_rotary_tables and axes_dim
/// {dim / 2, dim / 2}, theta = temperature, they give timm's angles. Checks the arguments
/// (feat_shape two sizes >= 1, ref_feat_shape empty or two sizes >= 1, grid_offset finite,
/// grid_indexing "ij" or "xy"). On `device`: the H + W coordinates are computed on the host and
/// placed there without waiting (upload), then expanded to the grid where they lie.
at::Tensor grid_ids(const std::vector<int64_t>& feat_shape,
                    const std::vector<int64_t>& ref_feat_shape, double grid_offset,
                    c10::string_view grid_indexing,
                    const c10::Device& device = c10::Device(c10::kCPU));

/// Checks the arguments of axial_rotary_tables: `ids` `[N, A]` of a real or integer dtype with
/// A = axes_dim.size() >= 1, each axes_dim even and >= 2, theta finite and > 0, and the tables
/// within kMaxTableElements.
void check_axial_rotary_arguments(const at::Tensor& ids, const std::vector<int64_t>& axes_dim,
                                  double theta);

/// Axial RoPE (Flux's FluxPosEmbed, and the axial RoPE of video DiTs): for token n with
/// coordinates ids[n] (one per axis, integer or fractional, negative allowed), the angles of axis
/// a are ids[n, a] * theta^(-2i / axes_dim[a]), i < axes_dim[a] / 2: cos and sin `[N, sum(axes_dim)
/// / 2]`, the axes' frequencies one after the other, computed in float64 (the rotary definition of
/// detail::rope_frequencies / rotary_rows) and rounded once to `dtype`, on the device of `ids`.
/// NaN or infinite ids are an error.
std::pair<at::Tensor, at::Tensor> axial_rotary_tables(const at::Tensor& ids,
                                                      const std::vector<int64_t>& axes_dim,
                                                      double theta, c10::ScalarType dtype);

/// The interpolations resample_position_table offers (PyTorch's 2-D modes).
enum class ResampleMode { kBicubic, kBilinear, kNearest };

/// A checked resampling: the grid sizes `{H, W}` before and after, and the mode.
struct ResamplePlan {
  std::vector<int64_t> old_size;
  std::vector<int64_t> new_size;
  ResampleMode mode = ResampleMode::kBicubic;
};

/// The grid `{H, W}` of a position table `posemb` (`[1, N, D]` or `[N, D]`, floating) whose first
/// num_prefix_tokens rows are not on the grid: `old_size` when given (H * W must equal
/// N - num_prefix_tokens), else the square root of N - num_prefix_tokens (an error when it is not
/// a square).
std::vector<int64_t> table_grid(const at::Tensor& posemb, const std::vector<int64_t>& old_size,
                                int64_t num_prefix_tokens);

/// A checked centre crop of a position table's grid (SD3's PatchEmbed.cropped_pos_embed).
struct CropPlan {
  std::vector<int64_t> old_size;
  std::vector<int64_t> new_size;
  int64_t top = 0;
  int64_t left = 0;
};

/// Checks the arguments of crop_position_table: the table as table_grid reads it, `new_size` one
/// (square) or two sizes in [1, old size]; top = (H - h) / 2, left = (W - w) / 2 (floor).
CropPlan crop_plan(const at::Tensor& posemb, const std::vector<int64_t>& new_size,
                   const std::vector<int64_t>& old_size, int64_t num_prefix_tokens);

/// Checks the arguments of resample_position_table: `posemb` a floating `[1, N, D]` or `[N, D]`
/// table, 0 <= num_prefix_tokens <= N, `old_size` empty (then N - num_prefix_tokens must be a
/// square) or two sizes >= 1 covering the N - num_prefix_tokens rows, `new_size` one (square) or
/// two sizes >= 1 within kMaxTableElements, a known `interpolation`, `antialias` only for bicubic
/// and bilinear.
ResamplePlan resample_plan(const at::Tensor& posemb, const std::vector<int64_t>& new_size,
                           const std::vector<int64_t>& old_size, int64_t num_prefix_tokens,
                           c10::string_view interpolation, bool antialias);

} // namespace detail
} // namespace posenc
