#pragma once

// The backend-independent kernels (ATen operations only), registered as CompositeExplicitAutograd:
// they serve every device without a hand-written kernel, and the tests compare the CPU and CUDA
// kernels with them. Same arguments as the operators. Each family declares its own in
// ops/<family>/composite_kernel.h; this header holds what they share.

#include "ops/common/backend_entries.h"
#include "ops/common/arguments.h"

#include <ATen/core/Tensor.h>

namespace posenc {
namespace ops {
namespace composite {

/// at::empty, as the operator kernels built from the families' composite loops allocate
/// (ops/common/backend_entries.h).
at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options);

} // namespace composite
} // namespace ops
} // namespace posenc
