#pragma once

// The operator kernels of a backend with hand-written loops (CPU, CUDA) are written once per
// family (ops/<family>/backend_entries.h): each checks its call with the family's prepare_*
// function, brings its arguments into the layout the loops read (contiguous; a fast kernel has no
// second, composite path) and runs the backend's loop. A backend supplies only its loops and its
// allocation:
//
//   TORCH_LIBRARY_IMPL(posenc, CPU, m) {
//     m.impl("add_position_table", TORCH_FN((add_position_table_kernel<run_add, empty_cpu>)));
//   }
//
// This header holds what the families share.

#include "detail/checks.h"
#include "ops/common/kernel_helpers.h"
#include "ops/common/arguments.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>


namespace posenc {
namespace ops {

/// Allocates an uninitialised contiguous tensor on the backend.
using EmptyFn = at::Tensor (*)(at::IntArrayRef sizes, const at::TensorOptions& options);

} // namespace ops
} // namespace posenc
