#pragma once

// The attention-bias family's kernel body, for the CPU and the CUDA kernels alike: what one
// thread (or one iteration of the CPU loop) computes for relative_position_bucket.

#include "detail/relative_bucket.h"

#include <c10/macros/Macros.h>

#include <cstdint>

namespace posenc {
namespace ops {
namespace kernels {

/// Item i: the T5 bucket of relative position in[i] (detail::relative_position_bucket).
struct BucketBody {
  const int64_t* in;
  int64_t* out;
  bool bidirectional;
  int64_t num_buckets;
  int64_t max_distance;
  /// detail::relative_position_bucket_log_range of the arguments above (once per call).
  double log_range;

  C10_HOST_DEVICE void operator()(int64_t item) const {
    out[item] = detail::relative_position_bucket(in[item], bidirectional, num_buckets,
                                                 max_distance, log_range);
  }
};

} // namespace kernels
} // namespace ops
} // namespace posenc
