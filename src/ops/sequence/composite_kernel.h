#pragma once

// add_position_table's and add_positional_encoding's backend-independent kernels (ATen operations
// only, CompositeExplicitAutograd), which the CPU and CUDA kernels are compared with.

#include "ops/common/composite_kernels.h"
#include "ops/sequence/backend_entries.h"

#include <ATen/core/Tensor.h>

#include <tuple>

namespace posenc {
namespace ops {
namespace composite {

// The loops (see ops/sequence/backend_entries.h), then the out-of-place operators, for the tests.

void add_loop(const at::Tensor& x, at::Tensor& out, const TableCall& call);

at::Tensor add_position_table(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                              bool batch_first, OptionalTensor positions, double scale,
                              OptionalTensor columns = c10::nullopt);
at::Tensor add_positional_encoding(const at::Tensor& x, int64_t offset, double base,
                                   bool batch_first, OptionalTensor positions, double scale,
                                   c10::string_view channels, c10::string_view frequencies);

} // namespace composite
} // namespace ops
} // namespace posenc
