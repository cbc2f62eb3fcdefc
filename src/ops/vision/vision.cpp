// The vision and diffusion family: timestep embeddings of (fractional) diffusion timesteps, the
// sin-cos tables of 2-D and 3-D patch grids, the cos/sin tables of axial RoPE, and resizing
// (resampling, cropping) learned tables. Schemas, C++ entry points and kernels; the values come from
// detail/vision.cpp (float64, rounded once), the Meta kernels give shapes for torch.compile.

#include "ops/common/dispatch.h"
#include "ops/common/sym_length.h"

#include "detail/checks.h"
#include "detail/vision.h"

#include <posenc/ops/vision.h>

#include <ATen/ops/_upsample_bicubic2d_aa.h>
#include <ATen/ops/_upsample_bilinear2d_aa.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/upsample_bicubic2d.h>
#include <ATen/ops/upsample_bilinear2d.h>
#include <ATen/ops/upsample_nearest2d.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

namespace posenc {

TORCH_LIBRARY_FRAGMENT(posenc, m) {
  m.def(
      "timestep_embedding(Tensor timesteps, int embedding_dim, bool flip_sin_to_cos=False, "
      "float downscale_freq_shift=1, float scale=1, int max_period=10000, "
      "ScalarType? dtype=None) -> Tensor");
  // (POSENC_SYMINT: grid sizes that torch.export keeps symbolic, ops/common/sym_length.h)
  m.def("sincos_2d_table(int embed_dim, " POSENC_SYMINT
        "[] grid_size, bool cls_token=False, int extra_tokens=0, "
        "float interpolation_scale=1.0, int base_size=16, ScalarType? dtype=None, "
        "Device? device=None) -> Tensor");
  m.def("sincos_2d_grid_table(" POSENC_SYMINT
        "[] feat_shape, int dim=64, float temperature=10000., "
        "bool reverse_coord=False, bool interleave_sin_cos=False, ScalarType? dtype=None, "
        "Device? device=None) -> Tensor");
  m.def(
      "axial_rotary_tables(Tensor ids, int[] axes_dim, float theta=10000., "
      "ScalarType? dtype=None) -> (Tensor, Tensor)");
  m.def("resample_position_table(Tensor posemb, " POSENC_SYMINT
        "[] new_size, int[] old_size=[], "
        "int num_prefix_tokens=1, str interpolation=\"bicubic\", bool antialias=True, "
        "bool align_corners=False) -> Tensor");
  m.def("sincos_3d_table(int embed_dim, " POSENC_SYMINT "[] spatial_size, " POSENC_SYMINT
        " temporal_size, "
        "float spatial_interpolation_scale=1.0, float temporal_interpolation_scale=1.0, "
        "ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("crop_position_table(Tensor posemb, " POSENC_SYMINT
        "[] new_size, int[] old_size=[], "
        "int num_prefix_tokens=0) -> Tensor");
  m.def("grid_ids(" POSENC_SYMINT
        "[] feat_shape, int[] ref_feat_shape=[], float grid_offset=0., "
        "str grid_indexing=\"ij\", ScalarType? dtype=None, Device? device=None) -> Tensor");
  // An AxialRotaryEmbedding module's call (ops/vision/module.h), for posenc.nn's module: its
  // options as arguments. Composite: axial_rotary_tables, then apply_rotary.
  m.def(
      "axial_rotary_embedding_call(Tensor x, Tensor ids, int[] axes_dim, float theta, "
      "bool interleaved, bool heads_first) -> Tensor");
  // A VisionRotaryEmbedding module's call (ops/vision/module.h), for posenc.nn's module: its
  // options as arguments. Composite: grid_ids, axial_rotary_tables, apply_rotary of the patches.
  m.def(
      "vision_rotary_embedding_call(Tensor x, int[] feat_shape, int dim, float temperature, "
      "int[] ref_feat_shape, float grid_offset, str grid_indexing, bool interleaved, "
      "int num_prefix_tokens, bool heads_first) -> Tensor");
  // A VisionRotaryEmbedding module's cos/sin tables of the patch grid feat_shape
  // (ops/vision/module.h), for posenc.nn's module's `tables`: its options as arguments.
  // Composite: grid_ids, then axial_rotary_tables.
  m.def(
      "vision_rotary_embedding_tables(int[] feat_shape, int dim, float temperature, "
      "int[] ref_feat_shape, float grid_offset, str grid_indexing, ScalarType? dtype=None, "
      "Device? device=None) -> (Tensor, Tensor)");
  // A TimestepEmbedder module's call (ops/vision/module.h), for posenc.nn's module: its options
  // and the weights of its mlp (Linear, SiLU, Linear) as arguments. Composite:
  // timestep_embedding, then the MLP.
  m.def(
      "timestep_embedder_call(Tensor timesteps, int hidden_size, int frequency_embedding_size, "
      "int max_period, Tensor weight0, Tensor? bias0, Tensor weight2, Tensor? bias2) -> Tensor");
}

namespace ops {

namespace {

constexpr const char* kTimestep = "posenc::timestep_embedding";
constexpr const char* kSincos2d = "posenc::sincos_2d_table";
constexpr const char* kGridTable = "posenc::sincos_2d_grid_table";
constexpr const char* kAxial = "posenc::axial_rotary_tables";
constexpr const char* kResample = "posenc::resample_position_table";
constexpr const char* kSincos3d = "posenc::sincos_3d_table";
constexpr const char* kCrop = "posenc::crop_position_table";
constexpr const char* kGridIds = "posenc::grid_ids";

detail::TimestepSpec timestep_spec(int64_t embedding_dim, bool flip_sin_to_cos,
                                   double downscale_freq_shift, double scale,
                                   int64_t max_period) {
  detail::TimestepSpec spec;
  spec.embedding_dim = embedding_dim;
  spec.flip_sin_to_cos = flip_sin_to_cos;
  spec.downscale_freq_shift = downscale_freq_shift;
  spec.scale = scale;
  spec.max_period = max_period;
  return spec;
}

at::Tensor timestep_embedding_kernel(const at::Tensor& timesteps, int64_t embedding_dim,
                                     bool flip_sin_to_cos, double downscale_freq_shift,
                                     double scale, int64_t max_period,
                                     c10::optional<at::ScalarType> dtype) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kTimestep);
  return detail::timestep_embedding(
      timesteps,
      timestep_spec(embedding_dim, flip_sin_to_cos, downscale_freq_shift, scale, max_period),
      dtype.value_or(at::kFloat));
}

at::Tensor timestep_embedding_meta(const at::Tensor& timesteps, int64_t embedding_dim,
                                   bool flip_sin_to_cos, double downscale_freq_shift,
                                   double scale, int64_t max_period,
                                   c10::optional<at::ScalarType> dtype) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kTimestep);
  static constexpr detail::CallerName who{};
  detail::check_timestep_spec(
      timestep_spec(embedding_dim, flip_sin_to_cos, downscale_freq_shift, scale, max_period));
  const at::ScalarType type = dtype.value_or(at::kFloat);
  detail::check_float_dtype("dtype", type);
  TORCH_CHECK(timesteps.dim() == 1, who,
              ": timesteps must be a 1-D tensor [N] (one timestep per batch element), but got "
              "shape ",
              timesteps.sizes());
  // symbolic sizes stay symbolic (torch.export with a dynamic batch of timesteps)
  const std::vector<c10::SymInt> shape{timesteps.sym_size(0), c10::SymInt(embedding_dim)};
  return at::empty_symint(shape, timesteps.options().dtype(type));
}

// The grid sizes to check: the given ones, or 1 in place of each where one is symbolic
// (torch.export's: checked when the program runs), so that every other argument is checked.
std::vector<int64_t> checkable(SymLengths sizes) {
  return concrete(sizes).value_or(std::vector<int64_t>(sizes.size(), 1));
}

// The device of a table operator's fake call (its meta device, or the one given).
at::TensorOptions table_options(at::ScalarType type, c10::optional<at::Device> device) {
  return at::TensorOptions().dtype(type).device(device.value_or(at::Device(at::kMeta)));
}

at::Tensor sincos_2d_table_meta(int64_t embed_dim, SymLengths grid_size, bool cls_token,
                                int64_t extra_tokens, double interpolation_scale, int64_t base_size,
                                c10::optional<at::ScalarType> dtype,
                                c10::optional<at::Device> device) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kSincos2d);
  const at::ScalarType type = dtype.value_or(at::kFloat);
  detail::check_float_dtype("dtype", type);
  detail::check_sincos_2d_arguments(embed_dim, checkable(grid_size), extra_tokens,
                                    interpolation_scale, base_size);
  const SymLength& height = grid_size[0];
  const SymLength& width = grid_size.size() == 2 ? grid_size[1] : grid_size[0];
  const int64_t extra = cls_token ? extra_tokens : 0;
  return empty_with_lengths({height * width + extra, SymLength(embed_dim)},
                            table_options(type, device));
}

at::Tensor sincos_2d_table_kernel(int64_t embed_dim, SymLengths symbolic_grid, bool cls_token,
                                  int64_t extra_tokens, double interpolation_scale,
                                  int64_t base_size, c10::optional<at::ScalarType> dtype,
                                  c10::optional<at::Device> device) {
  const c10::optional<std::vector<int64_t>> grid_size = concrete(symbolic_grid);
  if (!grid_size) { // fake tensors of torch.export: only the shape
    return sincos_2d_table_meta(embed_dim, symbolic_grid, cls_token, extra_tokens,
                                interpolation_scale, base_size, dtype, device);
  }
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kSincos2d);
  const at::ScalarType type = dtype.value_or(at::kFloat);
  detail::check_float_dtype("dtype", type);
  return detail::sincos_2d_table(embed_dim, *grid_size, cls_token, extra_tokens,
                                 interpolation_scale, base_size, type)
      .to(device.value_or(at::Device(at::kCPU)));
}

at::Tensor sincos_2d_grid_table_meta(SymLengths feat_shape, int64_t dim, double temperature,
                                     bool /*reverse_coord*/, bool /*interleave_sin_cos*/,
                                     c10::optional<at::ScalarType> dtype,
                                     c10::optional<at::Device> device) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kGridTable);
  const at::ScalarType type = dtype.value_or(at::kFloat);
  detail::check_float_dtype("dtype", type);
  detail::check_timm_sincos_2d_arguments(checkable(feat_shape), dim, temperature);
  return empty_with_lengths({feat_shape[0] * feat_shape[1], SymLength(dim)},
                            table_options(type, device));
}

at::Tensor sincos_2d_grid_table_kernel(SymLengths symbolic_shape, int64_t dim, double temperature,
                                       bool reverse_coord, bool interleave_sin_cos,
                                       c10::optional<at::ScalarType> dtype,
                                       c10::optional<at::Device> device) {
  const c10::optional<std::vector<int64_t>> feat_shape = concrete(symbolic_shape);
  if (!feat_shape) { // fake tensors of torch.export: only the shape
    return sincos_2d_grid_table_meta(symbolic_shape, dim, temperature, reverse_coord,
                                     interleave_sin_cos, dtype, device);
  }
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kGridTable);
  const at::ScalarType type = dtype.value_or(at::kFloat);
  detail::check_float_dtype("dtype", type);
  return detail::timm_sincos_2d_table(*feat_shape, dim, temperature, reverse_coord,
                                      interleave_sin_cos, type)
      .to(device.value_or(at::Device(at::kCPU)));
}

at::Tensor sincos_3d_table_meta(int64_t embed_dim, SymLengths spatial_size, SymLength temporal_size,
                                double spatial_interpolation_scale,
                                double temporal_interpolation_scale,
                                c10::optional<at::ScalarType> dtype,
                                c10::optional<at::Device> device) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kSincos3d);
  const at::ScalarType type = dtype.value_or(at::kFloat);
  detail::check_float_dtype("dtype", type);
  detail::check_sincos_3d_arguments(embed_dim, checkable(spatial_size),
                                    concrete(temporal_size).value_or(1),
                                    spatial_interpolation_scale, temporal_interpolation_scale);
  return empty_with_lengths(
      {temporal_size, spatial_size.front() * spatial_size.back(), SymLength(embed_dim)},
      table_options(type, device));
}

at::Tensor sincos_3d_table_kernel(int64_t embed_dim, SymLengths symbolic_spatial,
                                  SymLength symbolic_temporal, double spatial_interpolation_scale,
                                  double temporal_interpolation_scale,
                                  c10::optional<at::ScalarType> dtype,
                                  c10::optional<at::Device> device) {
  const c10::optional<std::vector<int64_t>> spatial_size = concrete(symbolic_spatial);
  const c10::optional<int64_t> temporal_size = concrete(symbolic_temporal);
  if (!spatial_size || !temporal_size) { // fake tensors of torch.export: only the shape
    return sincos_3d_table_meta(embed_dim, symbolic_spatial, symbolic_temporal,
                                spatial_interpolation_scale, temporal_interpolation_scale, dtype,
                                device);
  }
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kSincos3d);
  const at::ScalarType type = dtype.value_or(at::kFloat);
  detail::check_float_dtype("dtype", type);
  return detail::sincos_3d_table(embed_dim, *spatial_size, *temporal_size,
                                 spatial_interpolation_scale, temporal_interpolation_scale, type)
      .to(device.value_or(at::Device(at::kCPU)));
}

at::Tensor grid_ids_meta(SymLengths feat_shape, c10::IntArrayRef ref_feat_shape, double grid_offset,
                         c10::string_view grid_indexing, c10::optional<at::ScalarType> dtype,
                         c10::optional<at::Device> device) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kGridIds);
  const at::ScalarType type = dtype.value_or(at::kDouble);
  detail::check_float_dtype("dtype", type);
  detail::check_grid_ids_arguments(checkable(feat_shape), ref_feat_shape.vec(), grid_offset,
                                   grid_indexing);
  return empty_with_lengths({feat_shape[0] * feat_shape[1], SymLength(2)},
                            table_options(type, device));
}

at::Tensor grid_ids_kernel(SymLengths symbolic_shape, c10::IntArrayRef ref_feat_shape,
                           double grid_offset, c10::string_view grid_indexing,
                           c10::optional<at::ScalarType> dtype, c10::optional<at::Device> device) {
  const c10::optional<std::vector<int64_t>> feat_shape = concrete(symbolic_shape);
  if (!feat_shape) { // fake tensors of torch.export: only the shape
    return grid_ids_meta(symbolic_shape, ref_feat_shape, grid_offset, grid_indexing, dtype, device);
  }
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kGridIds);
  const at::ScalarType type = dtype.value_or(at::kDouble);
  detail::check_float_dtype("dtype", type);
  return detail::grid_ids(*feat_shape, ref_feat_shape.vec(), grid_offset, grid_indexing,
                          device.value_or(at::Device(at::kCPU)))
      .to(type);
}

std::tuple<at::Tensor, at::Tensor> axial_rotary_tables_kernel(const at::Tensor& ids,
                                                              c10::IntArrayRef axes_dim,
                                                              double theta,
                                                              c10::optional<at::ScalarType> dtype) {
  const detail::CallerScope caller(detail::CallerScope::KeepOuter{}, kAxial);
  const auto tables =
      detail::axial_rotary_tables(ids, axes_dim.vec(), theta, dtype.value_or(at::kFloat));
  return {tables.first, tables.second};
}

std::tuple<at::Tensor, at::Tensor> axial_rotary_tables_meta(const at::Tensor& ids,
                                                            c10::IntArrayRef axes_dim,
                                                            double theta,
                                                            c10::optional<at::ScalarType> dtype) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kAxial);
  const at::ScalarType type = dtype.value_or(at::kFloat);
  detail::check_float_dtype("dtype", type);
  detail::check_axial_rotary_arguments(ids, axes_dim.vec(), theta);
  int64_t half = 0;
  for (const int64_t dim : axes_dim) {
    half += dim / 2;
  }
  const auto options = ids.options().dtype(type);
  const std::vector<c10::SymInt> shape{ids.sym_size(0), c10::SymInt(half)};
  return {at::empty_symint(shape, options), at::empty_symint(shape, options)};
}

// Written with ATen operators only (CompositeImplicitAutograd): autograd, Meta and every device
// come from ATen's interpolation kernels, the ones timm's F.interpolate calls. The new grid's
// sizes may be symbolic (torch.export of a model whose resolution varies, e.g. timm's
// dynamic_img_size): the table is then interpolated even where they turn out equal to the old
// ones, which reads each row with weight 1 (the same values as the copy).
at::Tensor resample_position_table_kernel(const at::Tensor& posemb, SymLengths new_size,
                                          c10::IntArrayRef old_size, int64_t num_prefix_tokens,
                                          c10::string_view interpolation, bool antialias,
                                          bool align_corners) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kResample);
  const c10::optional<std::vector<int64_t>> known = concrete(new_size);
  const detail::ResamplePlan plan =
      detail::resample_plan(posemb, known.value_or(checkable(new_size)), old_size.vec(),
                            num_prefix_tokens, interpolation, antialias);
  const std::vector<SymLength> size{new_size[0], new_size.back()}; // (one size: a square)
  const at::Tensor rows = posemb.dim() == 2 ? posemb.unsqueeze(0) : posemb;
  const int64_t width = rows.size(2);
  at::Tensor grid;
  if (known && plan.old_size == plan.new_size) {
    grid = rows.narrow(1, num_prefix_tokens, plan.old_size[0] * plan.old_size[1]).clone();
  } else {
    // float64 tables are resampled in float64, every other dtype in float32 (as timm does)
    const at::ScalarType compute =
        rows.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    const at::Tensor image = rows.narrow(1, num_prefix_tokens, plan.old_size[0] * plan.old_size[1])
                                 .to(compute)
                                 .reshape({1, plan.old_size[0], plan.old_size[1], width})
                                 .permute({0, 3, 1, 2});
    at::Tensor resized;
    switch (plan.mode) {
      case detail::ResampleMode::kBicubic:
        resized = antialias ? POSENC_SYM(at::_upsample_bicubic2d_aa)(image, size, align_corners)
                            : POSENC_SYM(at::upsample_bicubic2d)(image, size, align_corners);
        break;
      case detail::ResampleMode::kBilinear:
        resized = antialias ? POSENC_SYM(at::_upsample_bilinear2d_aa)(image, size, align_corners)
                            : POSENC_SYM(at::upsample_bilinear2d)(image, size, align_corners);
        break;
      case detail::ResampleMode::kNearest:
        resized = POSENC_SYM(at::upsample_nearest2d)(image, size);
        break;
    }
    grid = resized.permute({0, 2, 3, 1})
               .POSENC_SYM(reshape)({1, size[0] * size[1], SymLength(width)})
               .to(rows.scalar_type());
  }
  const at::Tensor out = at::cat({rows.narrow(1, 0, num_prefix_tokens), grid}, 1);
  return posemb.dim() == 2 ? out.squeeze(0) : out;
}

// SD3's PatchEmbed.cropped_pos_embed: the centre of the grid, as a view-and-copy of the table
// (CompositeImplicitAutograd: differentiable, every device).
at::Tensor crop_position_table_kernel(const at::Tensor& posemb, SymLengths symbolic_size,
                                      c10::IntArrayRef old_size, int64_t num_prefix_tokens) {
  const detail::CallerScope caller_scope(detail::CallerScope::KeepOuter{}, kCrop);
  const c10::optional<std::vector<int64_t>> known = concrete(symbolic_size);
#if POSENC_SYMBOLIC_LENGTHS
  if (!known) { // symbolic sizes (torch.export): the same centre crop, its sizes symbols
    const detail::CropPlan plan =
        detail::crop_plan(posemb, checkable(symbolic_size), old_size.vec(), num_prefix_tokens);
    const SymLength height = symbolic_size[0];
    const SymLength width = symbolic_size.back();
    const at::Tensor rows = posemb.dim() == 2 ? posemb.unsqueeze(0) : posemb;
    const int64_t channels = rows.size(2);
    // rows and columns top .. top + h - 1 and left .. left + w - 1 picked by index (a narrow of
    // symbolic bounds would ask the export to prove them for every size)
    const auto index = at::TensorOptions().dtype(at::kLong).device(posemb.device());
    const auto centred = [&](int64_t old, const SymLength& size) {
      return at::arange(c10::Scalar(size), index).add(c10::Scalar((SymLength(old) - size) / 2));
    };
    const at::Tensor grid = rows.narrow(1, num_prefix_tokens, plan.old_size[0] * plan.old_size[1])
                                .reshape({1, plan.old_size[0], plan.old_size[1], channels})
                                .index_select(1, centred(plan.old_size[0], height))
                                .index_select(2, centred(plan.old_size[1], width))
                                .reshape_symint({1, height * width, SymLength(channels)});
    const at::Tensor out = at::cat({rows.narrow(1, 0, num_prefix_tokens), grid}, 1);
    return posemb.dim() == 2 ? out.squeeze(0) : out;
  }
#endif
  const detail::CropPlan plan =
      detail::crop_plan(posemb, *known, old_size.vec(), num_prefix_tokens);
  const at::Tensor rows = posemb.dim() == 2 ? posemb.unsqueeze(0) : posemb;
  const int64_t width = rows.size(2);
  const at::Tensor grid = rows.narrow(1, num_prefix_tokens, plan.old_size[0] * plan.old_size[1])
                              .reshape({1, plan.old_size[0], plan.old_size[1], width})
                              .narrow(1, plan.top, plan.new_size[0])
                              .narrow(2, plan.left, plan.new_size[1])
                              .reshape({1, plan.new_size[0] * plan.new_size[1], width});
  const at::Tensor out = at::cat({rows.narrow(1, 0, num_prefix_tokens), grid}, 1);
  return posemb.dim() == 2 ? out.squeeze(0) : out;
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, CompositeImplicitAutograd, m) {
  m.impl("resample_position_table", TORCH_FN(resample_position_table_kernel));
  m.impl("crop_position_table", TORCH_FN(crop_position_table_kernel));
}

TORCH_LIBRARY_IMPL(posenc, CompositeExplicitAutograd, m) {
  m.impl("timestep_embedding", TORCH_FN(timestep_embedding_kernel));
  m.impl("sincos_2d_table", TORCH_FN(sincos_2d_table_kernel));
  m.impl("sincos_2d_grid_table", TORCH_FN(sincos_2d_grid_table_kernel));
  m.impl("axial_rotary_tables", TORCH_FN(axial_rotary_tables_kernel));
  m.impl("sincos_3d_table", TORCH_FN(sincos_3d_table_kernel));
  m.impl("grid_ids", TORCH_FN(grid_ids_kernel));
}

TORCH_LIBRARY_IMPL(posenc, Meta, m) {
  m.impl("timestep_embedding", TORCH_FN(timestep_embedding_meta));
  m.impl("sincos_2d_table", TORCH_FN(sincos_2d_table_meta));
  m.impl("sincos_2d_grid_table", TORCH_FN(sincos_2d_grid_table_meta));
  m.impl("axial_rotary_tables", TORCH_FN(axial_rotary_tables_meta));
  m.impl("sincos_3d_table", TORCH_FN(sincos_3d_table_meta));
  m.impl("grid_ids", TORCH_FN(grid_ids_meta));
}

using TimestepSignature = at::Tensor(const at::Tensor&, int64_t, bool, double, double, int64_t,
                                     c10::optional<at::ScalarType>);
// (the table operators' kernels take SymLengths: called so, unboxed)
using Sincos2dSignature = at::Tensor(int64_t, SymLengths, bool, int64_t, double, int64_t,
                                     c10::optional<at::ScalarType>, c10::optional<at::Device>);
using AxialSignature = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, c10::IntArrayRef,
                                                           double, c10::optional<at::ScalarType>);
using ResampleSignature = at::Tensor(const at::Tensor&, SymLengths, c10::IntArrayRef, int64_t,
                                     c10::string_view, bool, bool);
using Sincos3dSignature = at::Tensor(int64_t, SymLengths, SymLength, double, double,
                                     c10::optional<at::ScalarType>, c10::optional<at::Device>);
using CropSignature = at::Tensor(const at::Tensor&, SymLengths, c10::IntArrayRef, int64_t);
using GridIdsSignature = at::Tensor(SymLengths, c10::IntArrayRef, double, c10::string_view,
                                    c10::optional<at::ScalarType>, c10::optional<at::Device>);
using GridTableSignature = at::Tensor(SymLengths, int64_t, double, bool, bool,
                                      c10::optional<at::ScalarType>, c10::optional<at::Device>);

at::Tensor timestep_embedding(const at::Tensor& timesteps, int64_t embedding_dim,
                              bool flip_sin_to_cos, double downscale_freq_shift, double scale,
                              int64_t max_period, c10::optional<at::ScalarType> dtype) {
  static const auto op = typed_op<TimestepSignature>(kTimestep);
  return op.call(timesteps, embedding_dim, flip_sin_to_cos, downscale_freq_shift, scale,
                 max_period, dtype);
}

at::Tensor sincos_2d_table(int64_t embed_dim, c10::IntArrayRef grid_size, bool cls_token,
                           int64_t extra_tokens, double interpolation_scale, int64_t base_size,
                           c10::optional<at::ScalarType> dtype, c10::optional<at::Device> device) {
  static const auto op = typed_op<Sincos2dSignature>(kSincos2d);
  return op.call(embed_dim, as_lengths(grid_size), cls_token, extra_tokens, interpolation_scale,
                 base_size, dtype, device);
}

at::Tensor sincos_2d_grid_table(c10::IntArrayRef feat_shape, int64_t dim, double temperature,
                                bool reverse_coord, bool interleave_sin_cos,
                                c10::optional<at::ScalarType> dtype,
                                c10::optional<at::Device> device) {
  static const auto op = typed_op<GridTableSignature>(kGridTable);
  return op.call(as_lengths(feat_shape), dim, temperature, reverse_coord, interleave_sin_cos, dtype,
                 device);
}

std::tuple<at::Tensor, at::Tensor> axial_rotary_tables(const at::Tensor& ids,
                                                       c10::IntArrayRef axes_dim, double theta,
                                                       c10::optional<at::ScalarType> dtype) {
  static const auto op = typed_op<AxialSignature>(kAxial);
  return op.call(ids, axes_dim, theta, dtype);
}

at::Tensor resample_position_table(const at::Tensor& posemb, c10::IntArrayRef new_size,
                                   c10::IntArrayRef old_size, int64_t num_prefix_tokens,
                                   c10::string_view interpolation, bool antialias,
                                   bool align_corners) {
  static const auto op = typed_op<ResampleSignature>(kResample);
  return op.call(posemb, as_lengths(new_size), old_size, num_prefix_tokens, interpolation,
                 antialias, align_corners);
}

at::Tensor sincos_3d_table(int64_t embed_dim, c10::IntArrayRef spatial_size, int64_t temporal_size,
                           double spatial_interpolation_scale, double temporal_interpolation_scale,
                           c10::optional<at::ScalarType> dtype, c10::optional<at::Device> device) {
  static const auto op = typed_op<Sincos3dSignature>(kSincos3d);
  return op.call(embed_dim, as_lengths(spatial_size), SymLength(temporal_size),
                 spatial_interpolation_scale, temporal_interpolation_scale, dtype, device);
}

at::Tensor crop_position_table(const at::Tensor& posemb, c10::IntArrayRef new_size,
                               c10::IntArrayRef old_size, int64_t num_prefix_tokens) {
  static const auto op = typed_op<CropSignature>(kCrop);
  return op.call(posemb, as_lengths(new_size), old_size, num_prefix_tokens);
}

at::Tensor grid_ids(c10::IntArrayRef feat_shape, c10::IntArrayRef ref_feat_shape,
                    double grid_offset, c10::string_view grid_indexing,
                    c10::optional<at::ScalarType> dtype, c10::optional<at::Device> device) {
  static const auto op = typed_op<GridIdsSignature>(kGridIds);
  return op.call(as_lengths(feat_shape), ref_feat_shape, grid_offset, grid_indexing, dtype, device);
}

} // namespace ops
} // namespace posenc
