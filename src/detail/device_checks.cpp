#include "detail/device_checks.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/nonzero.h>
#include <c10/util/Exception.h>

namespace posenc {
namespace detail {

const char* device_check_message(DeviceCheck check) {
  switch (check) {
    case DeviceCheck::kPositionsAtLeastMinusOne:
      return "posenc: positions must be >= -1 (-1 marks padding)";
    case DeviceCheck::kContinuousPositions:
      return "posenc: floating-point positions must be finite and in [0, 2^63); replace NaN/Inf "
             "(e.g. torch.nan_to_num) before encoding";
    case DeviceCheck::kMultimodalPositions:
      return "posenc::multimodal_rotary_tables: multimodal positions must be >= 0 and < the "
             "rows of cos/sin (or pass inv_freq)";
    case DeviceCheck::kPositionsInCaches:
      return "posenc: positions must be >= -1 and < the module's max_len; build it with a larger "
             "max_len or with extrapolation past it (beyond_max_len)";
    case DeviceCheck::kFrequencies:
      return "posenc: frequencies must lie in [-1.9e289, 1.9e289] (so that every angle is a "
             "finite number) and column kinds be 0 (sine), 1 (cosine) or 2 (zero)";
    case DeviceCheck::kTimesteps:
      return "posenc: timesteps must be finite (and scale * timesteps within float64)";
    case DeviceCheck::kCoordinates:
      return "posenc: ids must be finite; replace NaN or infinite coordinates (e.g. "
             "torch.nan_to_num) before encoding";
    case DeviceCheck::kCuSeqlens:
      return "posenc::packed_positions: cu_seqlens must start at 0, never decrease and end at "
             "total, and start_positions be >= 0 with positions within int64 (the values checked: "
             "the first entry, the last, each sequence's length, each start position)";
    case DeviceCheck::kCuSeqlensChunks:
      return "posenc::context_parallel_packed_positions: cu_seqlens must start at 0, never "
             "decrease and end at total, and every sequence's length be a multiple of the chunks "
             "(world_size, or 2 * world_size with zigzag; the values checked: the first entry, the "
             "last, each sequence's length twice)";
  }
  return "posenc: a device check failed";
}

void check_on_device(const at::Tensor& ok, const at::Tensor& values, DeviceCheck check) {
  if (ok.numel() == 0 || ok.is_meta()) {
    return;
  }
  const at::Tensor flat_ok = ok.reshape({-1}).contiguous();
  const at::Tensor flat_values = values.reshape({-1}).to(at::kDouble).contiguous();
  if (ok.is_cuda()) {
#ifdef POSENC_WITH_CUDA
    cuda::check_on_device(flat_ok, flat_values, check);
    return;
#else
    TORCH_CHECK(false, "posenc was built without CUDA; rebuild it against a LibTorch with CUDA");
#endif
  }
  // CPU and other devices: one read.
  const at::Tensor bad = at::nonzero(flat_ok.logical_not()).to(at::kCPU);
  if (bad.numel() > 0) {
    const int64_t index = bad.data_ptr<int64_t>()[0];
    TORCH_CHECK(false, device_check_message(check), " (got ",
                flat_values[index].to(at::kCPU).item<double>(), " at index ", index, ")");
  }
}

at::Tensor upload(const at::Tensor& host, const c10::Device& device) {
  TORCH_CHECK(host.device().is_cpu(), "posenc::detail::upload: expects a CPU tensor, but got one on ",
              host.device());
  if (device.is_cpu()) {
    return host;
  }
  if (device.is_meta()) {
    return at::empty(host.sizes(), host.options().device(device));
  }
  if (!device.is_cuda()) {
    return host.to(device);
  }
#ifdef POSENC_WITH_CUDA
  const at::Tensor values = host.contiguous();
  at::Tensor out = at::empty(values.sizes(), values.options().device(device));
  cuda::upload(out, values);
  return out;
#else
  return host.to(device); // (posenc built without its CUDA kernels: LibTorch's copy, which waits)
#endif
}

at::Tensor within(const at::Tensor& values, double low, double high) {
  return values.ge(low) & values.le(high);
}

at::Tensor finite(const at::Tensor& values) {
  return (values - values).eq(0); // inf - inf and NaN - NaN are NaN
}

void check_positions_on_device(const at::Tensor& positions) {
  if (at::isFloatingType(positions.scalar_type())) {
    // 2^63: the first value past int64's range; |position * frequency| stays finite below it.
    const at::Tensor p = positions.to(at::kDouble);
    // (comparisons are false for NaN, and +-inf fail one of them)
    check_on_device(p.ge(0.0) & p.lt(9223372036854775808.0), p,
                    DeviceCheck::kContinuousPositions);
  } else {
    check_on_device(positions.ge(-1), positions, DeviceCheck::kPositionsAtLeastMinusOne);
  }
}

} // namespace detail
} // namespace posenc
