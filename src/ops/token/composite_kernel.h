#pragma once

// token_and_position_embedding's backend-independent kernel (ATen operations only,
// CompositeExplicitAutograd), which the CPU and CUDA kernels are compared with.

#include "ops/common/composite_kernels.h"
#include "ops/token/backend_entries.h"

#include <ATen/core/Tensor.h>

#include <tuple>

namespace posenc {
namespace ops {
namespace composite {

// The loops (see ops/token/backend_entries.h), then the out-of-place operators, for the tests.

void token_loop(const at::Tensor& tokens, const at::Tensor& weight, at::Tensor& out,
                at::Tensor& mask, const TableCall& call, double dropout, bool drop);

std::tuple<at::Tensor, at::Tensor> token_and_position_embedding(
    const at::Tensor& tokens, const at::Tensor& weight, const at::Tensor& table, int64_t offset,
    bool batch_first, OptionalTensor positions, double scale, int64_t padding_idx, double dropout,
    bool train, OptionalTensor columns = c10::nullopt);

} // namespace composite
} // namespace ops
} // namespace posenc
