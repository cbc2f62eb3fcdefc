#pragma once

// The backend-independent kernels (ATen operations only), registered as CompositeExplicitAutograd:
// they serve every device without a hand-written kernel, and the tests compare the CPU and CUDA
// kernels with them. Same arguments as the operators.

#include "ops/op_arguments.h"

#include <ATen/core/Tensor.h>

#include <array>
#include <tuple>

namespace posenc {
namespace ops {
namespace composite {

at::Tensor add_position_table(const at::Tensor& x,
                              const at::Tensor& table,
                              int64_t offset,
                              bool batch_first,
                              OptionalTensor positions,
                              double scale,
                              OptionalTensor columns = c10::nullopt);
at::Tensor apply_rotary(const at::Tensor& x,
                        const at::Tensor& cos,
                        const at::Tensor& sin,
                        int64_t offset,
                        OptionalTensor positions,
                        bool interleaved,
                        bool heads_first,
                        bool inverse,
                        OptionalTensor inv_freq = c10::nullopt,
                        double attention_factor = 1.0);
std::tuple<at::Tensor, at::Tensor> token_and_position_embedding(
    const at::Tensor& tokens,
    const at::Tensor& weight,
    const at::Tensor& table,
    int64_t offset,
    bool batch_first,
    OptionalTensor positions,
    double scale,
    int64_t padding_idx,
    double dropout,
    bool train,
    OptionalTensor columns = c10::nullopt);

} // namespace composite
} // namespace ops
} // namespace posenc
