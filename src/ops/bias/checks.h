#pragma once

// The checks of relative_position_bucket's arguments, shared by its CPU, CUDA and Meta kernels.

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace posenc {
namespace ops {

/// relative_position an integer tensor, the bucket arguments valid
/// (detail::check_bucket_arguments).
void check_relative_position_bucket(const at::Tensor& relative_position, bool bidirectional,
                                    int64_t num_buckets, int64_t max_distance);

} // namespace ops
} // namespace posenc
