#include <posenc/modules/encoding_base.h>
#include <posenc/modules/vision.h>

#include <posenc/ops.h>

#include "detail/checks.h"
#include "detail/print_options.h"
#include "detail/vision.h"
#include "ops/common/module_options.h"
#include "ops/vision/module.h"

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <utility>

namespace posenc {

TimestepEmbeddingOptions::TimestepEmbeddingOptions(int64_t embedding_dim)
    : embedding_dim_(embedding_dim) {}
TimestepEmbedderOptions::TimestepEmbedderOptions(int64_t hidden_size) : hidden_size_(hidden_size) {}
Sincos2dTableOptions::Sincos2dTableOptions(int64_t embed_dim, std::vector<int64_t> grid_size)
    : embed_dim_(embed_dim), grid_size_(std::move(grid_size)) {}
AxialRotaryEmbeddingOptions::AxialRotaryEmbeddingOptions(std::vector<int64_t> axes_dim)
    : axes_dim_(std::move(axes_dim)) {}
ResamplePositionTableOptions::ResamplePositionTableOptions(std::vector<int64_t> new_size)
    : new_size_(std::move(new_size)) {}
Sincos3dTableOptions::Sincos3dTableOptions(int64_t embed_dim, std::vector<int64_t> spatial_size,
                                           int64_t temporal_size)
    : embed_dim_(embed_dim),
      spatial_size_(std::move(spatial_size)),
      temporal_size_(temporal_size) {}
CropPositionTableOptions::CropPositionTableOptions(std::vector<int64_t> new_size)
    : new_size_(std::move(new_size)) {}
VisionRotaryEmbeddingOptions::VisionRotaryEmbeddingOptions(int64_t dim) : dim_(dim) {}

// ---- Timesteps ----

TimestepsImpl::TimestepsImpl(const TimestepEmbeddingOptions& options_) : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void TimestepsImpl::reset() {
  const detail::CallerScope caller(detail::CallerScope::Rename{}, kName);
  ops::check_options(options);
}

void TimestepsImpl::pretty_print(std::ostream& stream) const {
  detail::print_options(stream, kName, options);
}

torch::Tensor TimestepsImpl::forward(const torch::Tensor& timesteps) {
  const detail::CallerScope caller(kName);
  return functional::timestep_embedding(timesteps, options);
}

// ---- DiT's TimestepEmbedder ----

TimestepEmbedderImpl::TimestepEmbedderImpl(const TimestepEmbedderOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void TimestepEmbedderImpl::reset() {
  const detail::CallerScope caller(detail::CallerScope::Rename{}, kName);
  ops::check_options(options);
  mlp = register_module(
      "mlp",
      torch::nn::Sequential(
          torch::nn::Linear(options.frequency_embedding_size(), options.hidden_size()),
          torch::nn::SiLU(), torch::nn::Linear(options.hidden_size(), options.hidden_size())));
}

void TimestepEmbedderImpl::pretty_print(std::ostream& stream) const {
  detail::print_options(stream, kName, options);
}

torch::Tensor TimestepEmbedderImpl::forward(const torch::Tensor& timesteps) {
  const auto* first = mlp->ptr<torch::nn::LinearImpl>(0).get();
  const auto* second = mlp->ptr<torch::nn::LinearImpl>(2).get();
  return ops::timestep_embedder_forward(options, timesteps, first->weight, first->bias,
                                        second->weight, second->bias);
}

// ---- axial RoPE ----

AxialRotaryEmbeddingImpl::AxialRotaryEmbeddingImpl(const AxialRotaryEmbeddingOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void AxialRotaryEmbeddingImpl::reset() {
  const detail::CallerScope caller(detail::CallerScope::Rename{}, kName);
  ops::check_options(options);
}

void AxialRotaryEmbeddingImpl::pretty_print(std::ostream& stream) const {
  detail::print_options(stream, kName, options);
}

std::tuple<torch::Tensor, torch::Tensor> AxialRotaryEmbeddingImpl::tables(
    const torch::Tensor& ids, c10::optional<torch::ScalarType> dtype) const {
  const detail::CallerScope caller(kName);
  return functional::axial_rotary_tables(ids, options, dtype);
}

torch::Tensor AxialRotaryEmbeddingImpl::forward(const torch::Tensor& x, const torch::Tensor& ids) {
  return ops::axial_rotary_module_forward(options, x, ids);
}

// ---- timm's axial RoPE of patch grids (EVA-02) ----

VisionRotaryEmbeddingImpl::VisionRotaryEmbeddingImpl(const VisionRotaryEmbeddingOptions& options_)
    : options(options_) {
  // NOLINTNEXTLINE(clang-analyzer-optin.cplusplus.VirtualCall)
  reset();
}

void VisionRotaryEmbeddingImpl::reset() {
  const detail::CallerScope caller(detail::CallerScope::Rename{}, kName);
  ops::check_options(options);
}

void VisionRotaryEmbeddingImpl::pretty_print(std::ostream& stream) const {
  detail::print_options(stream, kName, options);
}

std::tuple<torch::Tensor, torch::Tensor> VisionRotaryEmbeddingImpl::tables(
    const std::vector<int64_t>& feat_shape, c10::optional<torch::ScalarType> dtype,
    c10::optional<torch::Device> device) const {
  const detail::CallerScope caller(kName);
  return functional::grid_rotary_tables(feat_shape, options, dtype, device);
}

torch::Tensor VisionRotaryEmbeddingImpl::forward(const torch::Tensor& x,
                                                 const std::vector<int64_t>& feat_shape) {
  return ops::vision_rotary_module_forward(options, x, feat_shape);
}

} // namespace posenc
