#include <posenc/functional/vision.h>
#include <posenc/ops.h>

#include "detail/checks.h"
#include "ops/vision/module.h"

namespace posenc {
namespace functional {

namespace pd = posenc::detail;

at::Tensor timestep_embedding(const at::Tensor& timesteps, const TimestepEmbeddingOptions& options) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "timestep_embedding");
  return ops::timestep_embedding(timesteps, options.embedding_dim(), options.flip_sin_to_cos(),
                                 options.downscale_freq_shift(), options.scale(),
                                 options.max_period());
}

at::Tensor sincos_2d_table(const Sincos2dTableOptions& options) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "sincos_2d_table");
  return ops::sincos_2d_table(options.embed_dim(), options.grid_size(), options.cls_token(),
                              options.extra_tokens(), options.interpolation_scale(),
                              options.base_size());
}

at::Tensor sincos_2d_grid_table(const std::vector<int64_t>& feat_shape, int64_t dim,
                                double temperature, bool reverse_coord, bool interleave_sin_cos) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "sincos_2d_grid_table");
  return ops::sincos_2d_grid_table(feat_shape, dim, temperature, reverse_coord,
                                   interleave_sin_cos);
}

std::tuple<at::Tensor, at::Tensor> axial_rotary_tables(const at::Tensor& ids,
                                                       const AxialRotaryEmbeddingOptions& options,
                                                       c10::optional<at::ScalarType> dtype) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "axial_rotary_tables");
  return ops::axial_rotary_tables(ids, options.axes_dim(), options.theta(), dtype);
}

at::Tensor resample_position_table(const at::Tensor& posemb,
                                   const ResamplePositionTableOptions& options) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "resample_position_table");
  return ops::resample_position_table(posemb, options.new_size(), options.old_size(),
                                      options.num_prefix_tokens(),
                                      interpolation_name(options.interpolation()),
                                      options.antialias(), options.align_corners());
}

at::Tensor sincos_3d_table(const Sincos3dTableOptions& options) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "sincos_3d_table");
  return ops::sincos_3d_table(options.embed_dim(), options.spatial_size(), options.temporal_size(),
                              options.spatial_interpolation_scale(),
                              options.temporal_interpolation_scale());
}

std::tuple<at::Tensor, at::Tensor> grid_rotary_tables(const std::vector<int64_t>& feat_shape,
                                                      const VisionRotaryEmbeddingOptions& options,
                                                      c10::optional<at::ScalarType> dtype,
                                                      c10::optional<at::Device> device) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "grid_rotary_tables");
  return ops::vision_rotary_tables(options, feat_shape, dtype, device);
}

at::Tensor crop_position_table(const at::Tensor& posemb, const CropPositionTableOptions& options) {
  const pd::CallerScope caller(pd::CallerScope::KeepOuter{}, "crop_position_table");
  return ops::crop_position_table(posemb, options.new_size(), options.old_size(),
                                  options.num_prefix_tokens());
}

} // namespace functional
} // namespace posenc
