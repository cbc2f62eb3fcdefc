#pragma once

#include <posenc/enums.h>
#include <posenc/options/fields.h>

#include <torch/arg.h>

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <vector>

namespace posenc {

/// Options of the diffusion timestep embedding (the `Timesteps` module and
/// `functional::timestep_embedding`), with diffusers' names and defaults.
///
/// Example:
/// ```
/// // Stable Diffusion's UNet: 320 channels, cos first, no shift
/// posenc::Timesteps time_proj(
///     posenc::TimestepEmbeddingOptions(320).flip_sin_to_cos(true).downscale_freq_shift(0));
/// ```
struct TimestepEmbeddingOptions {
  /// Options for an embedding of `embedding_dim` channels, the others at diffusers' defaults
  /// (implicit).
  /* implicit */ TimestepEmbeddingOptions(int64_t embedding_dim);

  /// Width of the embedding (>= 2; odd widths end with a zero column).
  TORCH_ARG(int64_t, embedding_dim);
  /// Cosines first, then sines (diffusers' `flip_sin_to_cos`; DiT, SD). Default: false.
  TORCH_ARG(bool, flip_sin_to_cos) = false;
  /// The frequencies are exp(-ln(max_period) k / (embedding_dim / 2 - downscale_freq_shift)).
  /// Default: 1 (DDPM).
  TORCH_ARG(double, downscale_freq_shift) = 1.0;
  /// Factor of the timesteps in the angles. Default: 1.
  TORCH_ARG(double, scale) = 1.0;
  /// Longest period of the frequencies. Default: 10000.
  TORCH_ARG(int64_t, max_period) = 10000;
};

/// The field table of TimestepEmbeddingOptions (<posenc/options/fields.h>).
template <>
struct OptionTable<TimestepEmbeddingOptions> {
  /// The constructor's arguments: embedding_dim.
  static constexpr std::size_t kConstructorArguments = 1;
  /// The options, in the order pretty_print shows them and posenc.nn's keywords are read.
  static auto fields() {
    using O = TimestepEmbeddingOptions;
    return std::make_tuple(POSENC_OPTION_FIELD(O, embedding_dim, kShowAlways),
                           POSENC_OPTION_FIELD(O, flip_sin_to_cos, kShowIfChanged),
                           POSENC_OPTION_FIELD(O, downscale_freq_shift, kShowIfChanged),
                           POSENC_OPTION_FIELD(O, scale, kShowIfChanged),
                           POSENC_OPTION_FIELD(O, max_period, kShowIfChanged));
  }
};

/// Options of DiT's `TimestepEmbedder`: the timestep embedding of `frequency_embedding_size`
/// channels (cos first, no shift) through Linear, SiLU, Linear to `hidden_size`.
///
/// Example:
/// ```
/// posenc::TimestepEmbedder t_embedder(posenc::TimestepEmbedderOptions(/*hidden_size=*/1152));
/// ```
struct TimestepEmbedderOptions {
  /// Options for an output of `hidden_size` channels, the others at DiT's defaults (implicit).
  /* implicit */ TimestepEmbedderOptions(int64_t hidden_size);

  /// Width of the output (>= 1).
  TORCH_ARG(int64_t, hidden_size);
  /// Width of the sinusoidal embedding fed to the MLP. Default: 256 (DiT).
  TORCH_ARG(int64_t, frequency_embedding_size) = 256;
  /// Longest period of the frequencies. Default: 10000.
  TORCH_ARG(int64_t, max_period) = 10000;
};

/// The field table of TimestepEmbedderOptions (<posenc/options/fields.h>).
template <>
struct OptionTable<TimestepEmbedderOptions> {
  /// The constructor's arguments: hidden_size.
  static constexpr std::size_t kConstructorArguments = 1;
  /// The options, in the order pretty_print shows them and posenc.nn's keywords are read.
  static auto fields() {
    using O = TimestepEmbedderOptions;
    return std::make_tuple(POSENC_OPTION_FIELD(O, hidden_size, kTorchScript),
                           POSENC_OPTION_FIELD(O, frequency_embedding_size, kShowAlways),
                           POSENC_OPTION_FIELD(O, max_period, kShowNever));
  }
};

/// Options of `functional::sincos_2d_table` (diffusers' `get_2d_sincos_pos_embed` arguments).
///
/// Example:
/// ```
/// // DiT-XL/2 at 256 px: a 16 x 16 grid of 1152 channels
/// auto pos = posenc::functional::sincos_2d_table(posenc::Sincos2dTableOptions(1152, {16, 16}));
/// ```
struct Sincos2dTableOptions {
  /// Options for a table of `embed_dim` channels over the grid `grid_size`, the others at their
  /// defaults.
  Sincos2dTableOptions(int64_t embed_dim, std::vector<int64_t> grid_size);

  /// Number of channels (a positive multiple of 4).
  TORCH_ARG(int64_t, embed_dim);
  /// `{H, W}`, or `{S}` for a square grid.
  TORCH_ARG(std::vector<int64_t>, grid_size);
  /// With `extra_tokens` > 0: that many zero rows first (diffusers' rule). Default: false.
  TORCH_ARG(bool, cls_token) = false;
  /// Number of zero rows for class / register tokens (with `cls_token`). Default: 0.
  TORCH_ARG(int64_t, extra_tokens) = 0;
  /// Coordinates are divided by it (PixArt, SD3: 2 at 1024 px). Default: 1.
  TORCH_ARG(double, interpolation_scale) = 1.0;
  /// The grid size the coordinates are normalized to (index * base_size / size). Default: 16;
  /// MAE's integer coordinates: the grid size itself.
  TORCH_ARG(int64_t, base_size) = 16;
};

/// Options of `functional::sincos_3d_table` (diffusers' `get_3d_sincos_pos_embed` arguments).
///
/// Example:
/// ```
/// // CogVideoX-2B at 480 x 720 px, 49 frames: 13 latent frames of 30 x 45 patches
/// auto pos = posenc::functional::sincos_3d_table(
///     posenc::Sincos3dTableOptions(1920, /*spatial_size=*/{45, 30}, /*temporal_size=*/13)
///         .spatial_interpolation_scale(1.875));
/// ```
struct Sincos3dTableOptions {
  /// Options for a table of `embed_dim` channels over `temporal_size` frames of the grid
  /// `spatial_size`, the others at their defaults.
  Sincos3dTableOptions(int64_t embed_dim, std::vector<int64_t> spatial_size, int64_t temporal_size);

  /// Number of channels (a positive multiple of 16): a quarter for time, the rest for space.
  TORCH_ARG(int64_t, embed_dim);
  /// `{W, H}` (diffusers' order: width first), or `{S}` for a square grid.
  TORCH_ARG(std::vector<int64_t>, spatial_size);
  /// Number of frames.
  TORCH_ARG(int64_t, temporal_size);
  /// The spatial coordinates are divided by it. Default: 1.
  TORCH_ARG(double, spatial_interpolation_scale) = 1.0;
  /// The frame indices are divided by it. Default: 1.
  TORCH_ARG(double, temporal_interpolation_scale) = 1.0;
};

/// Options of `functional::crop_position_table` (SD3's `PatchEmbed.cropped_pos_embed`).
///
/// Example:
/// ```
/// // SD3: a 192 x 192 table (pos_embed_max_size), a 1024 px image = 64 x 64 patches
/// auto pos = posenc::functional::crop_position_table(table,
/// posenc::CropPositionTableOptions({64}));
/// ```
struct CropPositionTableOptions {
  /// Options that keep the grid `new_size`, the others at their defaults (implicit).
  /* implicit */ CropPositionTableOptions(std::vector<int64_t> new_size);

  /// The grid `{h, w}` to keep (`{S}`: square), at most the table's grid.
  TORCH_ARG(std::vector<int64_t>, new_size);
  /// The table's grid `{H, W}`. Default: empty, a square grid.
  TORCH_ARG(std::vector<int64_t>, old_size) = {};
  /// Rows before the grid (class, register tokens), kept as they are. Default: 0 (SD3 has none).
  TORCH_ARG(int64_t, num_prefix_tokens) = 0;
};

/// Options of `functional::resample_position_table` (timm's `resample_abs_pos_embed` arguments and
/// defaults).
///
/// Example:
/// ```
/// // a ViT-B/16 checkpoint trained at 224 px (14 x 14 patches + class token), run at 384 px
/// auto table = posenc::functional::resample_position_table(
///     state["pos_embed"], posenc::ResamplePositionTableOptions({24, 24}));
/// ```
struct ResamplePositionTableOptions {
  /// Options that resample to the grid `new_size`, the others at timm's defaults (implicit).
  /* implicit */ ResamplePositionTableOptions(std::vector<int64_t> new_size);

  /// The grid `{H, W}` to resample to (`{S}`: square).
  TORCH_ARG(std::vector<int64_t>, new_size);
  /// The table's grid `{H, W}`. Default: empty, a square grid.
  TORCH_ARG(std::vector<int64_t>, old_size) = {};
  /// Rows before the grid (class, register tokens), kept as they are. Default: 1.
  TORCH_ARG(int64_t, num_prefix_tokens) = 1;
  /// Default: kBicubic.
  TORCH_ARG(Interpolation, interpolation) = Interpolation::kBicubic;
  /// Antialiased downsampling (bicubic, bilinear). Default: true.
  TORCH_ARG(bool, antialias) = true;
  /// Default: false.
  TORCH_ARG(bool, align_corners) = false;
};

/// Options of axial RoPE (the `AxialRotaryEmbedding` module and
/// `functional::axial_rotary_tables`): Flux's `FluxPosEmbed(theta, axes_dim)`.
///
/// Example:
/// ```
/// // Flux: ids [S, 3] (text tokens 0, image tokens (0, row, column)), head_dim 128
/// posenc::AxialRotaryEmbedding rope(posenc::AxialRotaryEmbeddingOptions({16, 56, 56}));
/// ```
struct AxialRotaryEmbeddingOptions {
  /// Options for the rotated widths `axes_dim` of the axes, the others at their defaults
  /// (implicit).
  /* implicit */ AxialRotaryEmbeddingOptions(std::vector<int64_t> axes_dim);

  /// The rotated width of each axis (each even; their sum <= head_dim). Axis a turns
  /// axes_dim[a] / 2 frequencies theta^(-2i / axes_dim[a]).
  TORCH_ARG(std::vector<int64_t>, axes_dim);
  /// Base of the frequencies. Default: 10000 (Flux).
  TORCH_ARG(double, theta) = 10000.0;
  /// Which channels form a rotated pair. Default: kInterleaved (2i, 2i + 1), Flux's and diffusers'
  /// `apply_rotary_emb` with `use_real_unbind_dim=-1`; kHalfSplit for `use_real_unbind_dim=-2`.
  TORCH_ARG(RotaryPairing, pairing) = RotaryPairing::kInterleaved;
  /// Inputs are `[B, H, L, Dh]` instead of `[B, L, H, Dh]`. Default: false.
  TORCH_ARG(bool, heads_first) = false;
};

/// The field table of AxialRotaryEmbeddingOptions (<posenc/options/fields.h>).
template <>
struct OptionTable<AxialRotaryEmbeddingOptions> {
  /// The constructor's arguments: axes_dim.
  static constexpr std::size_t kConstructorArguments = 1;
  /// The options, in the order pretty_print shows them and posenc.nn's keywords are read.
  static auto fields() {
    using O = AxialRotaryEmbeddingOptions;
    return std::make_tuple(POSENC_OPTION_FIELD(O, axes_dim, kShowAlways),
                           POSENC_OPTION_FIELD(O, theta, kShowIfChanged | kTorchScript),
                           POSENC_OPTION_FIELD(O, pairing, kShowIfChanged),
                           POSENC_OPTION_FIELD(O, heads_first, kShowIfChanged | kTorchScript));
  }
};

/// Options of timm's axial RoPE of patch grids (the `VisionRotaryEmbedding` module and
/// `functional::grid_rotary_tables`): `RotaryEmbeddingCat(dim, in_pixels=False, ...)` as EVA-02
/// uses it, with timm's names and defaults.
///
/// Example:
/// ```
/// // EVA-02-B/14 fine-tuned at 448 px: 32 x 32 patches, pretrained on 16 x 16, head_dim 64
/// posenc::VisionRotaryEmbedding rope(
///     posenc::VisionRotaryEmbeddingOptions(64).ref_feat_shape({16, 16}));
/// ```
struct VisionRotaryEmbeddingOptions {
  /// Options for a rotated width of `dim` channels, the others at timm's defaults (implicit).
  /* implicit */ VisionRotaryEmbeddingOptions(int64_t dim);

  /// The rotated width of a head (a positive multiple of 4): dim / 4 frequencies per axis.
  TORCH_ARG(int64_t, dim);
  /// Base of the frequencies temperature^(-k / (dim / 4)). Default: 10000.
  TORCH_ARG(double, temperature) = 10000.0;
  /// The pretraining grid `{H, W}`: coordinates are rescaled to it (EVA's fine-tuning at another
  /// resolution). Default: empty, no rescaling.
  TORCH_ARG(std::vector<int64_t>, ref_feat_shape) = {};
  /// Added to every grid index before rescaling. Default: 0.
  TORCH_ARG(double, grid_offset) = 0.0;
  /// Which coordinate the first half of the frequencies turns. Default: kIJ (the row).
  TORCH_ARG(GridIndexing, grid_indexing) = GridIndexing::kIJ;
  /// Which channels form a rotated pair. Default: kInterleaved (timm's `rotate_half=False`);
  /// kHalfSplit for `rotate_half=True`.
  TORCH_ARG(RotaryPairing, pairing) = RotaryPairing::kInterleaved;
  /// Tokens before the patch grid (class, register tokens), left unrotated. Default: 1.
  TORCH_ARG(int64_t, num_prefix_tokens) = 1;
  /// Inputs are `[B, H, N, Dh]` (timm's attention) rather than `[B, N, H, Dh]`. Default: true.
  TORCH_ARG(bool, heads_first) = true;
};

/// The field table of VisionRotaryEmbeddingOptions (<posenc/options/fields.h>).
template <>
struct OptionTable<VisionRotaryEmbeddingOptions> {
  /// The constructor's arguments: dim.
  static constexpr std::size_t kConstructorArguments = 1;
  /// The options, in the order pretty_print shows them and posenc.nn's keywords are read.
  static auto fields() {
    using O = VisionRotaryEmbeddingOptions;
    return std::make_tuple(
        POSENC_OPTION_FIELD(O, dim, kTorchScript),
        POSENC_OPTION_FIELD(O, temperature, kShowIfChanged | kTorchScript),
        POSENC_OPTION_FIELD(O, ref_feat_shape, kShowIfChanged | kTorchScript | kNullable),
        POSENC_OPTION_FIELD(O, grid_offset, kShowIfChanged | kTorchScript),
        POSENC_OPTION_FIELD(O, grid_indexing, kShowIfChanged | kTorchScript),
        POSENC_OPTION_FIELD(O, pairing, kShowIfChanged),
        POSENC_OPTION_FIELD(O, num_prefix_tokens, kShowIfChanged | kTorchScript),
        POSENC_OPTION_FIELD(O, heads_first, kShowIfChanged | kTorchScript));
  }
};

} // namespace posenc
