// The vision rotary modules' calls (ops/vision/module.h), and the axial_rotary_embedding_call /
// vision_rotary_embedding_call operators through which posenc.nn's modules make them.

#include "ops/vision/module.h"
#include "ops/common/sym_length.h"

#include "detail/checks.h"
#include "detail/enum_names.h"
#include "detail/vision.h"

#include <posenc/ops/rotary.h>
#include <posenc/ops/vision.h>

#include <ATen/ops/cat.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/silu.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <string>
#include <vector>

namespace posenc {
namespace ops {

namespace {
constexpr const char* kAxialName = "AxialRotaryEmbedding";
constexpr const char* kVisionName = "VisionRotaryEmbedding";
constexpr const char* kTimestepEmbedderName = "TimestepEmbedder";

// float64 inputs rotate by float64 tables; every other dtype by float32 ones (computed in float32)
at::ScalarType rotation_dtype(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// x must be 4-D queries or keys, tokens along dimension 2 (heads first) or 1; `tokens` names them.
void check_queries_or_keys(const at::Tensor& x, bool heads_first, const char* tokens) {
  static constexpr detail::CallerName who{};
  TORCH_CHECK(x.defined() && x.dim() == 4, who, ": expected a 4-D query or key tensor of shape ",
              heads_first ? "[B, H, " : "[B, ", tokens, heads_first ? ", Dh] (heads_first=true)"
                                                                    : ", H, Dh] (heads_first=false)",
              ", but got ", x.defined() ? "shape " + c10::str(shape_of(x)) : "an undefined tensor");
}
} // namespace

at::Tensor axial_rotary_module_forward(const AxialRotaryEmbeddingOptions& options,
                                       const at::Tensor& x, const at::Tensor& ids) {
  const detail::CallerScope caller(kAxialName);
  const int64_t length_dim = options.heads_first() ? 2 : 1;
  check_queries_or_keys(x, options.heads_first(), "L");
  // (sizes compared, not read: torch.export keeps them symbolic)
  TORCH_CHECK(ids.defined() && ids.dim() == 2 && size_of(ids, 0) == size_of(x, length_dim),
              kAxialName, ": ids must hold one row per token, [L, ", options.axes_dim().size(),
              "] with L = ", size_of(x, length_dim), ", but got ",
              ids.defined() ? "shape " + c10::str(shape_of(ids)) : "an undefined tensor");
  TORCH_CHECK(ids.device() == x.device(), kAxialName, ": expected ids on the input's device (",
              x.device(), "), but got ids on ", ids.device());
  const auto rows =
      ops::axial_rotary_tables(ids, options.axes_dim(), options.theta(), rotation_dtype(x));
  return ops::apply_rotary(x, std::get<0>(rows), std::get<1>(rows), /*offset=*/0,
                           /*positions=*/c10::nullopt,
                           options.pairing() == RotaryPairing::kInterleaved, options.heads_first());
}

std::tuple<at::Tensor, at::Tensor> vision_rotary_tables(const VisionRotaryEmbeddingOptions& options,
                                                        c10::IntArrayRef feat_shape,
                                                        c10::optional<at::ScalarType> dtype,
                                                        c10::optional<at::Device> device) {
  detail::check_grid_rotary_arguments(feat_shape.vec(), options.dim(), options.temperature(),
                                      options.ref_feat_shape(), options.grid_offset(),
                                      grid_indexing_name(options.grid_indexing()));
  const at::Tensor ids =
      ops::grid_ids(feat_shape, options.ref_feat_shape(), options.grid_offset(),
                    grid_indexing_name(options.grid_indexing()), at::kDouble, device);
  return ops::axial_rotary_tables(ids, {options.dim() / 2, options.dim() / 2},
                                  options.temperature(), dtype);
}

at::Tensor vision_rotary_module_forward(const VisionRotaryEmbeddingOptions& options,
                                        const at::Tensor& x, c10::IntArrayRef feat_shape) {
  const detail::CallerScope caller(kVisionName);
  const int64_t length_dim = options.heads_first() ? 2 : 1;
  check_queries_or_keys(x, options.heads_first(), "N");
  detail::check_grid_rotary_arguments(feat_shape.vec(), options.dim(), options.temperature(),
                                      options.ref_feat_shape(), options.grid_offset(),
                                      grid_indexing_name(options.grid_indexing()));
  const int64_t patches = feat_shape[0] * feat_shape[1];
  const int64_t prefix = options.num_prefix_tokens();
  TORCH_CHECK(size_of(x, length_dim) == prefix + patches, kVisionName, ": expected ", prefix,
              " prefix tokens + ", feat_shape[0], " x ", feat_shape[1], " = ", prefix + patches,
              " tokens along dimension ", length_dim, ", but got ", size_of(x, length_dim),
              " (shape ", shape_of(x), "); pass the patch grid of this input");
  TORCH_CHECK(size_of(x, 3) >= options.dim(), kVisionName, ": the head width ", size_of(x, 3),
              " is smaller than the rotated width dim = ", options.dim());
  const auto rows = vision_rotary_tables(options, feat_shape, rotation_dtype(x), x.device());
  const at::Tensor rotated =
      ops::apply_rotary(x.narrow(length_dim, prefix, patches), std::get<0>(rows), std::get<1>(rows),
                        /*offset=*/0, /*positions=*/c10::nullopt,
                        options.pairing() == RotaryPairing::kInterleaved, options.heads_first());
  if (prefix == 0) {
    return rotated;
  }
  return at::cat({x.narrow(length_dim, 0, prefix), rotated}, length_dim);
}

at::Tensor timestep_embedder_forward(const TimestepEmbedderOptions& options,
                                     const at::Tensor& timesteps, const at::Tensor& weight0,
                                     const at::Tensor& bias0, const at::Tensor& weight2,
                                     const at::Tensor& bias2) {
  const detail::CallerScope caller(kTimestepEmbedderName);
  TORCH_CHECK(!timesteps.defined() || timesteps.device() == weight0.device(), kTimestepEmbedderName,
              ": expected the timesteps on the module's device (", weight0.device(),
              "), but got timesteps on ", timesteps.device(), "; move them with .to(",
              weight0.device(), ")");
  // DiT's embedding: cos first, frequencies exp(-ln(max_period) k / half)
  const at::Tensor frequencies = ops::timestep_embedding(
      timesteps, options.frequency_embedding_size(), /*flip_sin_to_cos=*/true,
      /*downscale_freq_shift=*/0.0, /*scale=*/1.0, options.max_period());
  const at::Tensor hidden =
      at::silu(at::linear(frequencies.to(weight0.scalar_type()), weight0, bias0));
  return at::linear(hidden, weight2, bias2);
}

namespace {

// --- the operators: posenc.nn's modules pass their options as arguments ---------------------

RotaryPairing pairing_of(bool interleaved) {
  return interleaved ? RotaryPairing::kInterleaved : RotaryPairing::kHalfSplit;
}

at::Tensor axial_rotary_embedding_call(const at::Tensor& x, const at::Tensor& ids,
                                       c10::IntArrayRef axes_dim, double theta, bool interleaved,
                                       bool heads_first) {
  return axial_rotary_module_forward(AxialRotaryEmbeddingOptions(axes_dim.vec())
                                         .theta(theta)
                                         .pairing(pairing_of(interleaved))
                                         .heads_first(heads_first),
                                     x, ids);
}

// A VisionRotaryEmbedding's options given as the operators' arguments
VisionRotaryEmbeddingOptions vision_options(int64_t dim, double temperature,
                                            c10::IntArrayRef ref_feat_shape, double grid_offset,
                                            c10::string_view grid_indexing) {
  const c10::optional<GridIndexing> indexing = detail::enum_value<GridIndexing>(grid_indexing);
  TORCH_CHECK(indexing, kVisionName, ": grid_indexing must be ",
              detail::enum_alternatives<GridIndexing>("'"), ", but got '",
              std::string(grid_indexing), "'");
  return VisionRotaryEmbeddingOptions(dim)
      .temperature(temperature)
      .ref_feat_shape(ref_feat_shape.vec())
      .grid_offset(grid_offset)
      .grid_indexing(*indexing);
}

at::Tensor vision_rotary_embedding_call(const at::Tensor& x, c10::IntArrayRef feat_shape,
                                        int64_t dim, double temperature,
                                        c10::IntArrayRef ref_feat_shape, double grid_offset,
                                        c10::string_view grid_indexing, bool interleaved,
                                        int64_t num_prefix_tokens, bool heads_first) {
  return vision_rotary_module_forward(
      vision_options(dim, temperature, ref_feat_shape, grid_offset, grid_indexing)
          .pairing(pairing_of(interleaved))
          .num_prefix_tokens(num_prefix_tokens)
          .heads_first(heads_first),
      x, feat_shape);
}

std::tuple<at::Tensor, at::Tensor> vision_rotary_embedding_tables(
    c10::IntArrayRef feat_shape, int64_t dim, double temperature, c10::IntArrayRef ref_feat_shape,
    double grid_offset, c10::string_view grid_indexing, c10::optional<at::ScalarType> dtype,
    c10::optional<at::Device> device) {
  const detail::CallerScope caller(detail::CallerScope::Rename{}, kVisionName);
  return vision_rotary_tables(
      vision_options(dim, temperature, ref_feat_shape, grid_offset, grid_indexing), feat_shape,
      dtype, device);
}

at::Tensor timestep_embedder_call(const at::Tensor& timesteps, int64_t hidden_size,
                                  int64_t frequency_embedding_size, int64_t max_period,
                                  const at::Tensor& weight0, const c10::optional<at::Tensor>& bias0,
                                  const at::Tensor& weight2,
                                  const c10::optional<at::Tensor>& bias2) {
  return timestep_embedder_forward(TimestepEmbedderOptions(hidden_size)
                                       .frequency_embedding_size(frequency_embedding_size)
                                       .max_period(max_period),
                                   timesteps, weight0, bias0.value_or(at::Tensor()), weight2,
                                   bias2.value_or(at::Tensor()));
}

} // namespace

TORCH_LIBRARY_IMPL(posenc, CompositeImplicitAutograd, m) {
  m.impl("axial_rotary_embedding_call", &axial_rotary_embedding_call);
  m.impl("vision_rotary_embedding_call", &vision_rotary_embedding_call);
  m.impl("vision_rotary_embedding_tables", &vision_rotary_embedding_tables);
  m.impl("timestep_embedder_call", &timestep_embedder_call);
}

} // namespace ops
} // namespace posenc
