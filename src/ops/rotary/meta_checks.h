#pragma once

// What the rotary family's Meta kernels check, for the families that rotate too (kv_cache).

#include "ops/common/arguments.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace posenc {
namespace ops {
namespace meta {

/// What the shapes alone tell of an apply_rotary_qk call: q and k rotary inputs of the caches'
/// width, the keys of the queries' tokens in their dtype, positions and rows as allowed.
void check_rotary_qk(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                     const at::Tensor& sin, int64_t offset, OptionalTensor positions,
                     OptionalTensor inv_freq, bool heads_first);

} // namespace meta
} // namespace ops
} // namespace posenc
