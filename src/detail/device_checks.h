#pragma once

// Checks of values that lie on a device, made there: a CUDA call never copies its arguments to the
// host to check them (no synchronisation, capturable in a CUDA graph). The check runs as a kernel
// on the current stream; a value that fails it makes the thread print the check's message with
// the value and its index and stop with a device-side assertion, so the next synchronisation
// raises "device-side assert triggered" (as PyTorch's own index kernels do). Meta tensors carry no
// values: nothing to check. Other devices are read on the host (one copy) and raise a c10::Error.

#include <ATen/core/Tensor.h>

namespace posenc {
namespace detail {

/// Whether calls on `device` leave the values that lie there where they are: CUDA (its kernels
/// check them where they read them, and check_on_device checks the rest) and meta (no values).
/// Other devices (run by the composite kernels) are read on the host, as the CPU is.
inline bool checks_on_device(const c10::Device& device) {
  return device.is_cuda() || device.is_meta();
}

/// What a device check verifies (each has its own message).
enum class DeviceCheck {
  kPositionsAtLeastMinusOne, ///< integer positions >= -1 (-1 marks padding)
  kContinuousPositions,      ///< floating-point positions finite and in [0, 2^63)
  kMultimodalPositions,      ///< M-RoPE positions >= 0 and inside the caches (without inv_freq)
  kPositionsInCaches,        ///< a module's positions >= -1 and < its max_len (no extrapolation)
  kFrequencies,              ///< |inv_freq| and column frequencies <= 1.9e289, kinds 0, 1 or 2
  kTimesteps,                ///< timesteps finite, scale * timestep * frequency within float64
  kCoordinates,              ///< axial RoPE ids finite
  kCuSeqlens,                ///< packed_positions' cu_seqlens and start_positions
  kCuSeqlensChunks,          ///< context_parallel_packed_positions' cu_seqlens
};

/// The message of `check`.
const char* device_check_message(DeviceCheck check);

/// Checks that every element of the bool tensor `ok` is true, on ok's device; `values` (same
/// number of elements, any real dtype) is what the message shows for a failing element.
void check_on_device(const at::Tensor& ok, const at::Tensor& values, DeviceCheck check);

/// Element-wise conditions for check_on_device, written with operations that have Meta kernels
/// in C++ (so that meta tensors pass through them): low <= values <= high, and values finite.
at::Tensor within(const at::Tensor& values, double low, double high);
at::Tensor finite(const at::Tensor& values);

/// Checks device-resident positions where they lie: floating-point ones finite and in [0, 2^63),
/// integer ones >= -1 (their upper bound is the table's, checked by the kernel that reads them).
void check_positions_on_device(const at::Tensor& positions);

/// `host`, a small CPU tensor that posenc made from a call's arguments (frequencies, a column
/// plan, an axis map), on `device` without waiting for it: on CUDA its bytes travel in the
/// arguments of kernels launched on the current stream (ops/common/upload.h), where `.to(device)`
/// would copy from pageable memory, synchronise and break CUDA-graph capture; on meta an empty
/// tensor of its shape and dtype (no values to carry); on the CPU `host` itself; elsewhere, and on
/// CUDA when posenc was built without its CUDA kernels, `.to(device)`. The values are bit for bit
/// those of `host`. At most a few thousand values (the launches carry 3968 bytes each).
at::Tensor upload(const at::Tensor& host, const c10::Device& device);

namespace cuda {
/// The CUDA kernel of check_on_device (ok: bool, values: float64, both contiguous).
void check_on_device(const at::Tensor& ok, const at::Tensor& values, DeviceCheck check);

/// The CUDA kernels of upload: the bytes of `host` (contiguous, on the CPU) written to `out` (a
/// contiguous CUDA tensor of the same size and dtype), on the current stream of out's device.
void upload(const at::Tensor& out, const at::Tensor& host);
} // namespace cuda

} // namespace detail
} // namespace posenc
