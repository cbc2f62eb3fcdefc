// CUDA kernel of the attention-bias family: relative_position_bucket's thread body
// (kernels.h, the one the CPU kernel runs) launched on the current stream, so
// that no relative position is read back to the host.

#include "ops/bias/checks.h"
#include "ops/common/cuda_helpers.cuh"
#include "ops/bias/kernels.h"

#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace posenc {
namespace ops {
namespace cuda {
namespace {

at::Tensor relative_position_bucket(const at::Tensor& relative_position, bool bidirectional,
                                    int64_t num_buckets, int64_t max_distance) {
  check_relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance);
  const c10::cuda::CUDAGuard guard(relative_position.device());
  const at::Tensor input = relative_position.to(at::kLong).contiguous();
  at::Tensor buckets = empty_cuda(input.sizes(), input.options());
  Launch()(kernels::BucketBody{input.data_ptr<int64_t>(), buckets.data_ptr<int64_t>(),
                               bidirectional, num_buckets, max_distance,
                               detail::relative_position_bucket_log_range(
                                   bidirectional, num_buckets, max_distance)},
           input.numel());
  return buckets;
}

} // namespace
} // namespace cuda

TORCH_LIBRARY_IMPL(posenc, CUDA, m) {
  m.impl("relative_position_bucket", TORCH_FN(cuda::relative_position_bucket));
}

} // namespace ops
} // namespace posenc
