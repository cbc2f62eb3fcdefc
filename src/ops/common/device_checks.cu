// The CUDA kernels of detail/device_checks.h. check_on_device: no host synchronisation; a failing
// element prints its check's message and stops the thread with a device-side assertion. upload:
// host-made values written by kernels that carry them in their arguments (ops/common/upload.h).

#include "detail/device_checks.h"
#include "ops/common/cuda_helpers.cuh"
#include "ops/common/upload.h"

#include <c10/cuda/CUDAGuard.h>

#include <cassert>
#include <cstdio>

namespace posenc {
namespace detail {
namespace cuda {
namespace {

// __assert_fail needs a literal per message: one branch a check.
__device__ void fail(DeviceCheck check, double value, int64_t index) {
  printf("posenc device check: got %g at index %lld\n", value, static_cast<long long>(index));
  switch (check) {
    case DeviceCheck::kPositionsAtLeastMinusOne:
      __assert_fail("posenc: positions must be >= -1 (-1 marks padding)", __FILE__, __LINE__,
                    __func__);
      break;
    case DeviceCheck::kContinuousPositions:
      __assert_fail("posenc: floating-point positions must be finite and in [0, 2^63)", __FILE__,
                    __LINE__, __func__);
      break;
    case DeviceCheck::kMultimodalPositions:
      __assert_fail(
          "posenc::multimodal_rotary_tables: multimodal positions must be >= 0 and < "
          "the rows of cos/sin (or pass inv_freq)",
          __FILE__, __LINE__, __func__);
      break;
    case DeviceCheck::kPositionsInCaches:
      __assert_fail("posenc: positions must be >= -1 and < the module's max_len", __FILE__,
                    __LINE__, __func__);
      break;
    case DeviceCheck::kFrequencies:
      __assert_fail(
          "posenc: frequencies must lie in [-1.9e289, 1.9e289] and column kinds be 0, "
          "1 or 2",
          __FILE__, __LINE__, __func__);
      break;
    case DeviceCheck::kTimesteps:
      __assert_fail("posenc: timesteps must be finite (and scale * timesteps within float64)",
                    __FILE__, __LINE__, __func__);
      break;
    case DeviceCheck::kCoordinates:
      __assert_fail(
          "posenc: ids must be finite; replace NaN or infinite coordinates before "
          "encoding",
          __FILE__, __LINE__, __func__);
      break;
    case DeviceCheck::kCuSeqlens:
      __assert_fail(
          "posenc::packed_positions: cu_seqlens must start at 0, never decrease and end "
          "at total, and start_positions be >= 0",
          __FILE__, __LINE__, __func__);
      break;
    case DeviceCheck::kCuSeqlensChunks:
      __assert_fail(
          "posenc::context_parallel_packed_positions: cu_seqlens must start at 0, never "
          "decrease and end at total, and every length be a multiple of the chunks",
          __FILE__, __LINE__, __func__);
      break;
  }
}

struct CheckBody {
  const bool* ok;
  const double* values;
  DeviceCheck check;

  // (host-device, as kernels::run_thread, which calls it; it only ever runs on the device)
  __host__ __device__ void operator()(int64_t item) const {
#if defined(__CUDA_ARCH__)
    if (!ok[item]) {
      fail(check, values[item], item);
    }
#else
    (void)item;
#endif
  }
};

} // namespace

void check_on_device(const at::Tensor& ok, const at::Tensor& values, DeviceCheck check) {
  const c10::cuda::CUDAGuard guard(ok.device());
  ops::cuda::Launch()(CheckBody{ok.data_ptr<bool>(), values.data_ptr<double>(), check}, ok.numel());
}

void upload(const at::Tensor& out, const at::Tensor& host) {
  const c10::cuda::CUDAGuard guard(out.device());
  ops::kernels::run_upload_grid(static_cast<unsigned char*>(out.data_ptr()),
                                static_cast<const unsigned char*>(host.data_ptr()),
                                host.numel() * static_cast<int64_t>(host.element_size()),
                                ops::cuda::Launch());
}

} // namespace cuda
} // namespace detail
} // namespace posenc
