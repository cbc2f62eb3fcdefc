#pragma once

// The calls of the vision rotary modules, defined once below every front end: AxialRotaryEmbedding
// (Flux: token coordinates) and VisionRotaryEmbedding (EVA-02: a patch grid after class/register
// tokens). Their checks of the input against the options, the tables' dtype (float64 for float64
// inputs, float32 otherwise), and the rotation. And DiT's TimestepEmbedder: the device check, the
// embedding in the weights' dtype, the MLP. The C++ modules call them directly; posenc.nn's modules
// through the axial_rotary_embedding_call / vision_rotary_embedding_call /
// timestep_embedder_call operators.

#include <posenc/options/vision.h>

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Optional.h>

#include <tuple>

namespace posenc {
namespace ops {

/// Rotates `x` (`[B, L, H, Dh]`, heads first with the option) by the coordinates `ids` `[L, A]`
/// (on its device); errors name "AxialRotaryEmbedding".
at::Tensor axial_rotary_module_forward(const AxialRotaryEmbeddingOptions& options,
                                       const at::Tensor& x, const at::Tensor& ids);

/// The cos/sin tables `[H * W, dim / 2]` of the patch grid `feat_shape` `[H, W]` (checked against
/// the options; messages name the caller) in `dtype` (default float32) on `device` (default CPU).
std::tuple<at::Tensor, at::Tensor> vision_rotary_tables(const VisionRotaryEmbeddingOptions& options,
                                                        c10::IntArrayRef feat_shape,
                                                        c10::optional<at::ScalarType> dtype,
                                                        c10::optional<at::Device> device);

/// Rotates the patches of `x` (`[B, H, prefix + h * w, Dh]`, or `[B, N, H, Dh]` without
/// heads_first) by the grid `feat_shape` `[h, w]`, leaving the num_prefix_tokens before them;
/// errors name "VisionRotaryEmbedding".
at::Tensor vision_rotary_module_forward(const VisionRotaryEmbeddingOptions& options,
                                        const at::Tensor& x, c10::IntArrayRef feat_shape);

/// DiT's TimestepEmbedder's call: the timestep embedding of `timesteps` `[N]` (cos first, no
/// shift, frequency_embedding_size channels, computed in float64) cast to the first weight's dtype,
/// through Linear(`weight0`, `bias0`), SiLU, Linear(`weight2`, `bias2`) (`mlp.0`, `mlp.2`; a bias
/// may be undefined); errors name "TimestepEmbedder".
at::Tensor timestep_embedder_forward(const TimestepEmbedderOptions& options,
                                     const at::Tensor& timesteps, const at::Tensor& weight0,
                                     const at::Tensor& bias0, const at::Tensor& weight2,
                                     const at::Tensor& bias2);

} // namespace ops
} // namespace posenc
