#include "detail/vision.h"

#include "detail/checks.h"
#include "detail/device_checks.h"
#include "detail/enum_names.h"
#include "detail/rotary.h"
#include "detail/sincos.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>

namespace posenc {
namespace detail {

TimestepSpec timestep_spec(const TimestepEmbeddingOptions& options) {
  TimestepSpec spec;
  spec.embedding_dim = options.embedding_dim();
  spec.flip_sin_to_cos = options.flip_sin_to_cos();
  spec.downscale_freq_shift = options.downscale_freq_shift();
  spec.scale = options.scale();
  spec.max_period = options.max_period();
  return spec;
}

void check_timestep_spec(const TimestepSpec& spec) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(spec.embedding_dim >= 2 && spec.embedding_dim <= kMaxTableElements, who,
              ": embedding_dim must be in [2, 2^28], but got ", spec.embedding_dim);
  TORCH_CHECK(spec.max_period >= 1, who, ": max_period must be >= 1, but got ", spec.max_period,
              " (the longest period of the frequencies, 10000 in diffusers)");
  TORCH_CHECK(std::isfinite(spec.scale), who, ": scale must be finite, but got ", spec.scale);
  const double divisor =
      static_cast<double>(spec.embedding_dim / 2) - spec.downscale_freq_shift;
  TORCH_CHECK(std::isfinite(spec.downscale_freq_shift) && divisor != 0.0, who,
              ": downscale_freq_shift must be finite and differ from embedding_dim / 2 = ",
              spec.embedding_dim / 2, " (the frequencies divide by their difference), but got ",
              spec.downscale_freq_shift);
}

std::vector<double> timestep_frequencies(const TimestepSpec& spec) {
  const int64_t half = spec.embedding_dim / 2;
  const double log_period = std::log(static_cast<double>(spec.max_period));
  const double divisor = static_cast<double>(half) - spec.downscale_freq_shift;
  std::vector<double> frequencies(static_cast<size_t>(half));
  for (int64_t k = 0; k < half; ++k) {
    frequencies[static_cast<size_t>(k)] = std::exp(-log_period * static_cast<double>(k) / divisor);
  }
  return frequencies;
}

namespace {

[[noreturn]] void fail_timestep_angles(const at::Tensor& timesteps) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(
      false, who, ": timesteps must be finite (and scale * timesteps within float64), but got ",
      at::isfinite(timesteps.to(at::kDouble)).all().item<bool>() ? "timesteps whose angles overflow"
                                                                 : "NaN or infinite timesteps");
}

// The CPU kernel: per timestep its float64 angles t * (scale f_k), their sines and cosines from one
// range reduction (detail::sincos), each rounded once into the row; rows split across threads.
// The same values as the composite path below, which other devices take.
at::Tensor timestep_embedding_cpu(const at::Tensor& timesteps, const TimestepSpec& spec,
                                  c10::ScalarType dtype) {
  const int64_t count = timesteps.size(0);
  const int64_t half = spec.embedding_dim / 2;
  std::vector<double> frequencies = timestep_frequencies(spec);
  double largest = 0.0; // the largest |scale f_k|: a row's angles are finite where t times it is
  for (double& frequency : frequencies) {
    frequency *= spec.scale; // rounded once, as frequencies.mul(scale)
    largest = std::max(largest, std::fabs(frequency));
  }
  const at::Tensor steps = timesteps.to(at::kDouble).contiguous();
  const double* step = steps.data_ptr<double>();
  at::Tensor out = at::empty({count, spec.embedding_dim}, timesteps.options().dtype(dtype));
  std::atomic<bool> finite{true};
  const int64_t sine_column = spec.flip_sin_to_cos ? half : 0;
  const int64_t cosine_column = spec.flip_sin_to_cos ? 0 : half;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "timestep_embedding", [&] {
    scalar_t* rows = out.data_ptr<scalar_t>();
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(half, 1));
    at::parallel_for(0, count, grain, [&](int64_t begin, int64_t end) {
      std::vector<double> buffer(static_cast<size_t>(3 * half));
      double* angles = buffer.data();
      double* sines = angles + half;
      double* cosines = sines + half;
      bool all_finite = true;
      for (int64_t i = begin; i < end; ++i) {
        // rounding is monotone: every |t f_k| rounds to at most |t| times the largest
        all_finite &= std::isfinite(step[i] * largest);
        scalar_t* row = rows + i * spec.embedding_dim;
        if (std::is_same<scalar_t, float>::value) { // in one pass, straight into the row
          float* out_row = reinterpret_cast<float*>(row);
          sincos_scaled(step[i], frequencies.data(), out_row + sine_column, out_row + cosine_column,
                        half);
          if (spec.embedding_dim % 2 == 1) {
            row[2 * half] = scalar_t(0);
          }
          continue;
        }
        for (int64_t k = 0; k < half; ++k) {
          angles[k] = step[i] * frequencies[static_cast<size_t>(k)];
        }
        sincos(angles, sines, cosines, half);
        for (int64_t k = 0; k < half; ++k) {
          row[sine_column + k] = static_cast<scalar_t>(sines[k]);
          row[cosine_column + k] = static_cast<scalar_t>(cosines[k]);
        }
        if (spec.embedding_dim % 2 == 1) {
          row[2 * half] = scalar_t(0);
        }
      }
      if (!all_finite) {
        finite = false;
      }
    });
  });
  if (!finite) {
    fail_timestep_angles(timesteps);
  }
  return out;
}

} // namespace

at::Tensor timestep_embedding(const at::Tensor& timesteps, const TimestepSpec& spec,
                              c10::ScalarType dtype) {
  static constexpr detail::CallerName who{};
  check_timestep_spec(spec);
  check_float_dtype("dtype", dtype);
  TORCH_CHECK(timesteps.defined() && timesteps.dim() == 1, who,
              ": timesteps must be a 1-D tensor [N] (one timestep per batch element), but got ",
              timesteps.defined() ? "shape " + c10::str(timesteps.sizes()) : "an undefined tensor");
  const c10::ScalarType type = timesteps.scalar_type();
  TORCH_CHECK(at::isFloatingType(type) || at::isIntegralType(type, /*includeBool=*/false), who,
              ": timesteps must be a real or integer tensor, but got ", type);
  TORCH_CHECK(timesteps.size(0) <= kMaxTableElements / spec.embedding_dim, who, ": ",
              timesteps.size(0), " timesteps * embedding_dim ", spec.embedding_dim,
              " elements is over posenc's limit of 2^28 elements");
  if (timesteps.device().is_cpu()) {
    return timestep_embedding_cpu(timesteps, spec, dtype);
  }
  const auto options = timesteps.options().dtype(at::kDouble);
  const at::Tensor frequencies = upload(
      at::tensor(timestep_frequencies(spec), options.device(at::kCPU)), timesteps.device());
  // scale * t * f in float64: the product of a timestep and a frequency is rounded once
  const at::Tensor angles = timesteps.to(at::kDouble).unsqueeze(1) * frequencies.mul(spec.scale);
  if (angles.device().is_cpu()) {
    if (!at::isfinite(angles).all().item<bool>()) {
      fail_timestep_angles(timesteps);
    }
  } else { // checked where they lie: nothing is read back
    check_on_device(finite(angles), angles, DeviceCheck::kTimesteps);
  }
  at::Tensor sines = at::sin(angles);
  at::Tensor cosines = at::cos(angles);
  std::vector<at::Tensor> columns = spec.flip_sin_to_cos
                                        ? std::vector<at::Tensor>{cosines, sines}
                                        : std::vector<at::Tensor>{sines, cosines};
  if (spec.embedding_dim % 2 == 1) {
    columns.push_back(at::zeros({timesteps.size(0), 1}, options));
  }
  return at::cat(columns, 1).to(dtype);
}

at::Tensor grid_sincos_table(const std::vector<std::vector<double>>& axes,
                             const std::vector<size_t>& column_axes, int64_t bands,
                             double temperature, GridLayout layout, c10::ScalarType dtype) {
  const auto options = at::TensorOptions().dtype(at::kDouble);
  std::vector<double> frequencies(static_cast<size_t>(bands));
  for (int64_t k = 0; k < bands; ++k) {
    frequencies[static_cast<size_t>(k)] =
        std::pow(temperature, -static_cast<double>(k) / static_cast<double>(bands));
  }
  const at::Tensor frequency = at::tensor(frequencies, options);
  std::vector<int64_t> sizes;
  int64_t rows = 1;
  for (const auto& axis : axes) {
    sizes.push_back(static_cast<int64_t>(axis.size()));
    rows *= sizes.back();
  }
  // Separable: a row's value in an axis' columns depends on its coordinate along that axis only,
  // so each axis' [size, bands] sines and cosines are computed once (float64 angles, each product
  // rounded once, rounded once to dtype) and written to every row of the table by a broadcast
  // copy: the table's bytes are written once and no transcendental is evaluated twice.
  const int64_t width = static_cast<int64_t>(column_axes.size()) * 2 * bands;
  at::Tensor table = at::empty({rows, width}, options.dtype(dtype));
  std::vector<int64_t> grid = sizes;
  grid.push_back(width);
  const at::Tensor cells = table.view(grid); // [sizes..., width]
  std::vector<int64_t> expanded = sizes;
  expanded.push_back(bands);
  for (size_t c = 0; c < column_axes.size(); ++c) {
    const size_t a = column_axes[c];
    const at::Tensor angle = at::tensor(axes[a], options).view({-1, 1}) * frequency; // [size, bands]
    std::vector<int64_t> shape(axes.size(), 1);
    shape[a] = sizes[a];
    shape.push_back(bands);
    const int64_t count = static_cast<int64_t>(column_axes.size());
    const int64_t sine_column = layout == GridLayout::kAxisSinCos ? 2 * static_cast<int64_t>(c) * bands
                                                                   : static_cast<int64_t>(c) * bands;
    const int64_t cosine_column = layout == GridLayout::kAxisSinCos ? sine_column + bands
                                                                     : (count + static_cast<int64_t>(c)) * bands;
    cells.narrow(-1, sine_column, bands).copy_(at::sin(angle).to(dtype).view(shape).expand(expanded));
    cells.narrow(-1, cosine_column, bands).copy_(at::cos(angle).to(dtype).view(shape).expand(expanded));
  }
  return table;
}

namespace {

void check_grid(const char* name, const std::vector<int64_t>& sizes, int64_t width) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(!sizes.empty() && sizes.size() <= 2, who, ": ", name,
              " must be [H, W] (or one size for a square grid), but got ", sizes.size(),
              " values");
  int64_t rows = 1;
  for (const int64_t size : sizes) {
    TORCH_CHECK(size >= 1 && size <= kMaxTableElements, who, ": ", name,
                " must hold sizes in [1, 2^28], but got ", c10::IntArrayRef(sizes));
    rows *= size;
    TORCH_CHECK(rows <= kMaxTableElements, who, ": the grid ", c10::IntArrayRef(sizes),
                " has over 2^28 positions");
  }
  check_table_size("the table", rows, width, "the grid size or the width");
}

} // namespace

void check_sincos_2d_arguments(int64_t embed_dim, const std::vector<int64_t>& grid_size,
                               int64_t extra_tokens, double interpolation_scale,
                               int64_t base_size) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(embed_dim >= 4 && embed_dim % 4 == 0 && embed_dim <= kMaxTableElements, who,
              ": embed_dim must be a positive multiple of 4 (half the columns per axis, each "
              "half sines and cosines) within posenc's limit of 2^28 columns, but got ",
              embed_dim);
  check_grid("grid_size", grid_size, embed_dim);
  TORCH_CHECK(std::isfinite(interpolation_scale) && interpolation_scale > 0, who,
              ": interpolation_scale must be finite and > 0, but got ", interpolation_scale);
  TORCH_CHECK(base_size >= 1, who, ": base_size must be >= 1, but got ", base_size);
  TORCH_CHECK(extra_tokens >= 0 && extra_tokens <= kMaxTableElements / embed_dim, who,
              ": extra_tokens must be in [0, 2^28 / embed_dim], but got ", extra_tokens);
}

at::Tensor sincos_2d_table(int64_t embed_dim, const std::vector<int64_t>& grid_size, bool cls_token,
                           int64_t extra_tokens, double interpolation_scale, int64_t base_size,
                           c10::ScalarType dtype) {
  check_sincos_2d_arguments(embed_dim, grid_size, extra_tokens, interpolation_scale, base_size);
  const int64_t height = grid_size[0];
  const int64_t width = grid_size.size() == 2 ? grid_size[1] : grid_size[0];
  // coordinate = index * base_size / size / interpolation_scale, in float64
  const auto coordinates = [&](int64_t size) {
    std::vector<double> values(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i) {
      values[static_cast<size_t>(i)] = static_cast<double>(i) * static_cast<double>(base_size) /
                                       static_cast<double>(size) / interpolation_scale;
    }
    return values;
  };
  // rows: row index (slow), column index (fast); columns: the column coordinate first
  at::Tensor table = grid_sincos_table({coordinates(height), coordinates(width)}, {1, 0},
                                       embed_dim / 4, 10000.0, GridLayout::kAxisSinCos, dtype);
  if (cls_token && extra_tokens > 0) {
    table = at::cat({at::zeros({extra_tokens, embed_dim}, table.options()), table}, 0);
  }
  return table;
}

void check_timm_sincos_2d_arguments(const std::vector<int64_t>& feat_shape, int64_t dim,
                                    double temperature) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(dim >= 4 && dim % 4 == 0 && dim <= kMaxTableElements, who,
              ": dim must be a positive multiple of 4 within posenc's limit of 2^28 columns, but got ",
              dim);
  TORCH_CHECK(feat_shape.size() == 2, who, ": feat_shape must be [H, W], but got ",
              feat_shape.size(), " values");
  check_grid("feat_shape", feat_shape, dim);
  TORCH_CHECK(std::isfinite(temperature) && temperature > 0, who,
              ": temperature must be finite and > 0, but got ", temperature);
}

at::Tensor timm_sincos_2d_table(const std::vector<int64_t>& feat_shape, int64_t dim,
                                double temperature, bool reverse_coord, bool interleave_sin_cos,
                                c10::ScalarType dtype) {
  check_timm_sincos_2d_arguments(feat_shape, dim, temperature);
  std::vector<std::vector<double>> axes;
  for (size_t a = 0; a < 2; ++a) {
    const int64_t size = feat_shape[reverse_coord ? 1 - a : a];
    std::vector<double> values(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i) {
      values[static_cast<size_t>(i)] = static_cast<double>(i);
    }
    axes.push_back(values);
  }
  return grid_sincos_table(axes, {0, 1}, dim / 4, temperature,
                           interleave_sin_cos ? GridLayout::kAxisSinCos : GridLayout::kSinCosAxis,
                           dtype);
}

void check_sincos_3d_arguments(int64_t embed_dim, const std::vector<int64_t>& spatial_size,
                               int64_t temporal_size, double spatial_interpolation_scale,
                               double temporal_interpolation_scale) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(embed_dim >= 16 && embed_dim % 16 == 0 && embed_dim <= kMaxTableElements, who,
              ": embed_dim must be a positive multiple of 16 (a quarter of the columns for time, "
              "three quarters for the two spatial axes, each half sines and cosines) within "
              "posenc's limit of 2^28 columns, but got ",
              embed_dim);
  TORCH_CHECK(temporal_size >= 1 && temporal_size <= kMaxTableElements, who,
              ": temporal_size must be in [1, 2^28], but got ", temporal_size);
  check_grid("spatial_size", spatial_size, embed_dim);
  const int64_t patches = spatial_size.front() * spatial_size.back();
  TORCH_CHECK(patches <= kMaxTableElements / temporal_size, who, ": ", temporal_size,
              " frames of ", patches, " patches are over 2^28 positions");
  check_table_size("the table", temporal_size * patches, embed_dim, "the sizes or the width");
  TORCH_CHECK(std::isfinite(spatial_interpolation_scale) && spatial_interpolation_scale > 0, who,
              ": spatial_interpolation_scale must be finite and > 0, but got ",
              spatial_interpolation_scale);
  TORCH_CHECK(std::isfinite(temporal_interpolation_scale) && temporal_interpolation_scale > 0, who,
              ": temporal_interpolation_scale must be finite and > 0, but got ",
              temporal_interpolation_scale);
}

at::Tensor sincos_3d_table(int64_t embed_dim, const std::vector<int64_t>& spatial_size,
                           int64_t temporal_size, double spatial_interpolation_scale,
                           double temporal_interpolation_scale, c10::ScalarType dtype) {
  check_sincos_3d_arguments(embed_dim, spatial_size, temporal_size, spatial_interpolation_scale,
                            temporal_interpolation_scale);
  // diffusers' order: spatial_size is (width, height)
  const int64_t width = spatial_size.front();
  const int64_t height = spatial_size.back();
  const auto coordinates = [](int64_t size, double scale) {
    std::vector<double> values(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i) {
      values[static_cast<size_t>(i)] = static_cast<double>(i) / scale;
    }
    return values;
  };
  // [T, D / 4]: time; [H * W, 3 D / 4]: the column coordinate, then the row coordinate
  const at::Tensor temporal =
      grid_sincos_table({coordinates(temporal_size, temporal_interpolation_scale)}, {0},
                        embed_dim / 8, 10000.0, GridLayout::kAxisSinCos, dtype);
  const at::Tensor spatial = grid_sincos_table(
      {coordinates(height, spatial_interpolation_scale),
       coordinates(width, spatial_interpolation_scale)},
      {1, 0}, 3 * embed_dim / 16, 10000.0, GridLayout::kAxisSinCos, dtype);
  const int64_t patches = height * width;
  return at::cat({temporal.unsqueeze(1).expand({temporal_size, patches, embed_dim / 4}),
                  spatial.unsqueeze(0).expand({temporal_size, patches, 3 * embed_dim / 4})},
                 2);
}

void check_grid_ids_arguments(const std::vector<int64_t>& feat_shape,
                              const std::vector<int64_t>& ref_feat_shape, double grid_offset,
                              c10::string_view grid_indexing) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(feat_shape.size() == 2, who, ": feat_shape must be the patch grid [H, W], but got ",
              feat_shape.size(), " values");
  check_grid("feat_shape", feat_shape, 1);
  TORCH_CHECK(ref_feat_shape.empty() ||
                  (ref_feat_shape.size() == 2 && ref_feat_shape[0] >= 1 && ref_feat_shape[1] >= 1),
              who,
              ": ref_feat_shape must be empty or the pretraining grid [H, W] of sizes >= 1, but "
              "got ",
              c10::IntArrayRef(ref_feat_shape));
  TORCH_CHECK(std::isfinite(grid_offset), who, ": grid_offset must be finite, but got ",
              grid_offset);
  TORCH_CHECK(enum_value<GridIndexing>(grid_indexing), who,
              ": grid_indexing must be \"ij\" (row, column) or \"xy\" (column, row), but got \"",
              grid_indexing, "\"");
}

void check_grid_rotary_arguments(const std::vector<int64_t>& feat_shape, int64_t dim,
                                 double temperature, const std::vector<int64_t>& ref_feat_shape,
                                 double grid_offset, c10::string_view grid_indexing) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(dim >= 4 && dim % 4 == 0 && dim <= kMaxTableElements, who,
              ": dim must be a positive multiple of 4 (a pair of channels per frequency and "
              "axis), but got ",
              dim);
  TORCH_CHECK(std::isfinite(temperature) && temperature > 0, who,
              ": temperature must be finite and > 0, but got ", temperature);
  check_grid_ids_arguments(feat_shape, ref_feat_shape, grid_offset, grid_indexing);
  check_table_size("the tables", feat_shape[0] * feat_shape[1], dim / 2, "the grid or dim");
}

at::Tensor grid_ids(const std::vector<int64_t>& feat_shape,
                    const std::vector<int64_t>& ref_feat_shape, double grid_offset,
                    c10::string_view grid_indexing, const c10::Device& device) {
  check_grid_ids_arguments(feat_shape, ref_feat_shape, grid_offset, grid_indexing);
  const int64_t height = feat_shape[0];
  const int64_t width = feat_shape[1];
  // (i + offset) / size * reference: EVA's rescaling of a fine-tuning grid to the pretraining one
  const auto coordinate = [&](int64_t index, size_t axis) {
    const double value = static_cast<double>(index) + grid_offset;
    return ref_feat_shape.empty() ? value
                                  : value / static_cast<double>(feat_shape[axis]) *
                                        static_cast<double>(ref_feat_shape[axis]);
  };
  // The H row coordinates, then the W column ones: the grid is their expansion (a copy of
  // values, made where the grid lies).
  std::vector<double> axes;
  axes.reserve(static_cast<size_t>(height + width));
  for (int64_t i = 0; i < height; ++i) {
    axes.push_back(coordinate(i, 0));
  }
  for (int64_t j = 0; j < width; ++j) {
    axes.push_back(coordinate(j, 1));
  }
  const at::Tensor placed = upload(at::tensor(axes, at::TensorOptions().dtype(at::kDouble)), device);
  const at::Tensor rows = placed.narrow(0, 0, height).view({height, 1}).expand({height, width});
  const at::Tensor columns = placed.narrow(0, height, width).view({1, width}).expand({height, width});
  const bool xy = enum_value<GridIndexing>(grid_indexing) == GridIndexing::kXY;
  return at::stack({xy ? columns : rows, xy ? rows : columns}, 2).view({height * width, 2});
}

void check_axial_rotary_arguments(const at::Tensor& ids, const std::vector<int64_t>& axes_dim,
                                  double theta) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(!axes_dim.empty(), who,
              ": axes_dim must name the rotated width of each axis (e.g. {16, 56, 56} for Flux), "
              "but got an empty list");
  int64_t width = 0;
  for (size_t a = 0; a < axes_dim.size(); ++a) {
    TORCH_CHECK(axes_dim[a] >= 2 && axes_dim[a] % 2 == 0 && axes_dim[a] <= kMaxTableElements, who,
                ": every axes_dim must be even and >= 2 (each axis rotates pairs of channels) and "
                "within posenc's limit of 2^28 channels, but axes_dim[", a, "] = ", axes_dim[a]);
    width += axes_dim[a];
  }
  // (checked here under its own name: check_rotary_arguments calls it base)
  TORCH_CHECK(std::isfinite(theta) && theta >= 1.0 / kMaxFrequency, who,
              ": theta must be finite and >= 5.2e-290 (so that every angle position * theta^-e is "
              "a finite number), but got ",
              theta, "; Flux uses 10000");
  check_rotary_arguments(1, width, theta);
  TORCH_CHECK(ids.defined() && ids.dim() == 2 &&
                  ids.sym_size(1) == static_cast<int64_t>(axes_dim.size()),
              who, ": ids must be [N, ", axes_dim.size(),
              "] (one coordinate per token and axis of axes_dim), but got ",
              ids.defined() ? "shape " + c10::str(ids.sizes()) : "an undefined tensor");
  const c10::ScalarType type = ids.scalar_type();
  TORCH_CHECK(at::isFloatingType(type) || at::isIntegralType(type, /*includeBool=*/false), who,
              ": ids must be a real or integer tensor, but got ", type);
  TORCH_CHECK(ids.sym_size(0) <= kMaxTableElements / (width / 2), who, ": ", ids.sym_size(0),
              " tokens * ", width / 2, " frequencies is over posenc's limit of 2^28 elements");
}

std::pair<at::Tensor, at::Tensor> axial_rotary_tables(const at::Tensor& ids,
                                                      const std::vector<int64_t>& axes_dim,
                                                      double theta, c10::ScalarType dtype) {
  static constexpr detail::CallerName who{};
  check_axial_rotary_arguments(ids, axes_dim, theta);
  check_float_dtype("dtype", dtype);
  // float64 coordinates: integer ids have no padding value here (-1 is a coordinate).
  const at::Tensor coordinates = ids.to(at::kDouble);
  if (coordinates.device().is_cpu()) {
    TORCH_CHECK(at::isfinite(coordinates).all().item<bool>(), who,
                ": ids must be finite, but got NaN or infinite coordinates; replace them (e.g. "
                "torch.nan_to_num) before encoding");
  } else { // checked where they lie: nothing is read back
    check_on_device(finite(coordinates), coordinates, DeviceCheck::kCoordinates);
  }
  std::vector<at::Tensor> cos;
  std::vector<at::Tensor> sin;
  for (size_t a = 0; a < axes_dim.size(); ++a) {
    // the plain RoPE of the axis' width (no scaling: the context length is not read)
    const RopeSpec spec =
        rope_spec(axes_dim[a], functional::RotaryTablesFuncOptions().base(theta), /*max_len=*/1);
    const auto rows = rotary_rows(coordinates.select(1, static_cast<int64_t>(a)),
                                  rope_frequencies(spec, c10::nullopt), dtype);
    cos.push_back(rows.first);
    sin.push_back(rows.second);
  }
  return {at::cat(cos, 1), at::cat(sin, 1)};
}

std::vector<int64_t> table_grid(const at::Tensor& posemb, const std::vector<int64_t>& old_size,
                                int64_t num_prefix_tokens) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(posemb.defined() && (posemb.dim() == 2 || (posemb.dim() == 3 && posemb.size(0) == 1)),
              who, ": posemb must be a position table [1, N, D] or [N, D], but got ",
              posemb.defined() ? "shape " + c10::str(posemb.sizes()) : "an undefined tensor");
  check_float_dtype("posemb's dtype", posemb.scalar_type());
  const int64_t rows = posemb.size(posemb.dim() - 2);
  TORCH_CHECK(num_prefix_tokens >= 0 && num_prefix_tokens <= rows, who,
              ": num_prefix_tokens must lie in [0, N] = [0, ", rows, "], but got ",
              num_prefix_tokens);
  const int64_t grid = rows - num_prefix_tokens;
  if (old_size.empty()) {
    const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(grid))));
    TORCH_CHECK(side >= 1 && side * side == grid, who, ": the table's ", grid,
                " grid rows (N - num_prefix_tokens = ", rows, " - ", num_prefix_tokens,
                ") are not a square grid; pass old_size {H, W}");
    return {side, side};
  }
  TORCH_CHECK(old_size.size() == 2 && old_size[0] >= 1 && old_size[1] >= 1 &&
                  old_size[0] <= grid && old_size[1] <= grid / old_size[0] &&
                  old_size[0] * old_size[1] == grid,
              who, ": old_size must be {H, W} with H * W = N - num_prefix_tokens = ", grid,
              ", but got ", c10::IntArrayRef(old_size));
  return old_size;
}

CropPlan crop_plan(const at::Tensor& posemb, const std::vector<int64_t>& new_size,
                   const std::vector<int64_t>& old_size, int64_t num_prefix_tokens) {
  static constexpr detail::CallerName who{};
  CropPlan plan;
  plan.old_size = table_grid(posemb, old_size, num_prefix_tokens);
  TORCH_CHECK(new_size.size() == 1 || new_size.size() == 2, who,
              ": new_size must be {H, W} (or {S} for a square grid), but got ",
              c10::IntArrayRef(new_size));
  plan.new_size = {new_size.front(), new_size.back()};
  for (size_t a = 0; a < 2; ++a) {
    TORCH_CHECK(plan.new_size[a] >= 1 && plan.new_size[a] <= plan.old_size[a], who,
                ": new_size must hold sizes >= 1 within the table's grid ",
                c10::IntArrayRef(plan.old_size), ", but got ", c10::IntArrayRef(plan.new_size),
                "; a crop cannot add positions: build a larger table, or resample this one with "
                "resample_position_table");
  }
  plan.top = (plan.old_size[0] - plan.new_size[0]) / 2;
  plan.left = (plan.old_size[1] - plan.new_size[1]) / 2;
  return plan;
}

ResamplePlan resample_plan(const at::Tensor& posemb, const std::vector<int64_t>& new_size,
                           const std::vector<int64_t>& old_size, int64_t num_prefix_tokens,
                           c10::string_view interpolation, bool antialias) {
  static constexpr detail::CallerName who{};
  ResamplePlan plan;
  plan.old_size = table_grid(posemb, old_size, num_prefix_tokens);
  TORCH_CHECK((new_size.size() == 1 || new_size.size() == 2) && new_size.front() >= 1 &&
                  new_size.back() >= 1,
              who, ": new_size must be {H, W} (or {S} for a square grid) of sizes >= 1, but got ",
              c10::IntArrayRef(new_size));
  plan.new_size = {new_size.front(), new_size.back()};
  check_table_size("a grid of H * W", plan.new_size[0], plan.new_size[1], "new_size");
  check_table_size("a resampled table of H * W * D", plan.new_size[0] * plan.new_size[1],
                   std::max<int64_t>(posemb.size(-1), 1), "new_size");
  const c10::optional<Interpolation> mode = enum_value<Interpolation>(interpolation);
  TORCH_CHECK(mode, who, ": interpolation must be ", enum_alternatives<Interpolation>("\""),
              ", but got \"", interpolation, "\"");
  plan.mode = *mode == Interpolation::kBicubic    ? ResampleMode::kBicubic
              : *mode == Interpolation::kBilinear ? ResampleMode::kBilinear
                                                  : ResampleMode::kNearest;
  TORCH_CHECK(!antialias || plan.mode != ResampleMode::kNearest, who,
              ": antialias applies to bicubic and bilinear interpolation only; pass "
              "antialias=false with \"nearest\"");
  return plan;
}

} // namespace detail
} // namespace posenc
