#pragma once

// Small host-made values (frequencies, a column plan, an M-RoPE axis map) placed on a device
// without a copy from host memory: their bytes travel in the arguments of the kernels that write
// them, as PyTorch's multi_tensor_apply passes its tensor lists. A copy from pageable host memory
// waits for the device (cudaMemcpy stages through a bounce buffer; PyTorch then synchronises the
// stream) and cannot be captured in a CUDA graph; kernel arguments are copied into the launch,
// and into a graph's node when captured, so the upload neither waits nor depends on host memory
// staying alive. The thread body is plain C++, run on the CPU by the tests' emulated grid.

#include "ops/common/launch.h"

#include <c10/macros/Macros.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace posenc {
namespace ops {
namespace kernels {

/// The bytes one launch carries. CUDA limits a kernel's arguments to 4096 bytes (before CUDA 12.1
/// and on every device; later versions allow more on some), and grid_stride_kernel also takes the
/// work count and the geometry: 3968 + 8 (pointer) + 8 (count) + 16 (geometry) = 4000.
constexpr int64_t kUploadChunkBytes = 3968;

/// One launch of an upload: item i writes byte i of `chunk` to out[i].
struct UploadBody {
  unsigned char* out;
  unsigned char chunk[kUploadChunkBytes];

  C10_HOST_DEVICE void operator()(int64_t item) const {
    out[item] = chunk[item];
  }
};

/// The arguments of grid_stride_kernel<UploadBody> (the body, the work count, the geometry's two
/// int64) stay within CUDA's 4096-byte limit.
static_assert(sizeof(UploadBody) + sizeof(int64_t) + sizeof(LaunchGeometry) <= 4096,
              "an upload's kernel arguments must fit CUDA's 4096-byte limit");

/// Writes the `bytes` bytes at `host` to `out` (device memory) by one launch of `execute` per
/// chunk of kUploadChunkBytes: launches on one stream run in order, so the bytes are there for
/// any kernel launched after this call on that stream. (One launch for frequencies, axis maps and
/// grid coordinates; a sinusoidal column plan takes 16 * D bytes, 17 launches at D = 4096.)
template <typename Execute>
void run_upload_grid(unsigned char* out, const unsigned char* host, int64_t bytes,
                     const Execute& execute) {
  for (int64_t start = 0; start < bytes; start += kUploadChunkBytes) {
    const int64_t count = std::min(kUploadChunkBytes, bytes - start);
    UploadBody body{};
    body.out = out + start;
    std::memcpy(body.chunk, host + start, static_cast<size_t>(count));
    execute(body, count);
  }
}

} // namespace kernels
} // namespace ops
} // namespace posenc
