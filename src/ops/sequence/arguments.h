#pragma once

// The checked call of add_position_table (and its in-place and out variants): every backend
// starts with it (ops/common/arguments.h has the positions and tables it is made of).

#include "ops/common/arguments.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace posenc {
namespace ops {

/// Checks the arguments of add_position_table and its in-place and out variants.
TableCall prepare_table_call(const at::Tensor& x, const at::Tensor& table, int64_t offset,
                             OptionalTensor positions, bool batch_first, double scale,
                             OptionalTensor columns);

} // namespace ops
} // namespace posenc
