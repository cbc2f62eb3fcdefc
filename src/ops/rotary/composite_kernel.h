#pragma once

// The rotary operators' backend-independent kernels (ATen operations only,
// CompositeExplicitAutograd), which the CPU and CUDA kernels are compared with.

#include "ops/common/composite_kernels.h"
#include "ops/rotary/backend_entries.h"

#include <ATen/core/Tensor.h>

#include <tuple>

namespace posenc {
namespace ops {
namespace composite {

// The loops (see ops/rotary/backend_entries.h), then the out-of-place operators, for the tests.

void rotary_loop(const at::Tensor& x, at::Tensor& out, const RotaryCall& call, bool interleaved,
                 bool inverse);
void rotary_qk_loop(const RotaryOperand& q, const RotaryOperand& k, const RotaryQkCall& call,
                    bool interleaved, bool inverse);

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                        int64_t offset, OptionalTensor positions, bool interleaved,
                        bool heads_first, bool inverse, OptionalTensor inv_freq = c10::nullopt,
                        double attention_factor = 1.0);
std::tuple<at::Tensor, at::Tensor> apply_rotary_qk(const at::Tensor& q, const at::Tensor& k,
                                                   const at::Tensor& cos, const at::Tensor& sin,
                                                   int64_t offset, OptionalTensor positions,
                                                   bool interleaved, bool heads_first,
                                                   bool inverse,
                                                   OptionalTensor inv_freq = c10::nullopt,
                                                   double attention_factor = 1.0);
std::tuple<at::Tensor, at::Tensor> rotary_tables(int64_t max_len, const at::Tensor& inv_freq,
                                                 double attention_factor,
                                                 c10::optional<at::ScalarType> dtype,
                                                 c10::optional<at::Device> device);
std::tuple<at::Tensor, at::Tensor> multimodal_rotary_tables(
    const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& positions,
    at::IntArrayRef mrope_section, bool interleaved, OptionalTensor inv_freq,
    double attention_factor);

} // namespace composite
} // namespace ops
} // namespace posenc
