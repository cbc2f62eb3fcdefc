#pragma once

// Pieces shared by the CPU kernels.

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>

/// Before a loop whose iterations read and write only their own elements, so that the vectorizer
/// need not prove it (input and output may be one pointer, or rows of one tensor).
#if defined(__clang__)
#define POSENC_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define POSENC_IVDEP _Pragma("GCC ivdep")
#else
#define POSENC_IVDEP
#endif

namespace posenc {
namespace ops {
namespace cpu {

/// Rows per task: about 32k elements, like ATen's grain size.
inline int64_t grain_rows(int64_t width) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(width, 1));
}

/// A fresh CPU tensor for a kernel to overwrite whole, allocated without a trip through the
/// dispatcher (a decoding step is ~1 us). Large ones (>= kPrefaultBytes) have their pages
/// populated up front, in parallel, a system call per chunk (see prefault_pages).
at::Tensor empty_cpu(at::IntArrayRef sizes, const at::TensorOptions& options);

/// Outputs from this size on are pre-faulted; below it the page faults cost less than the calls.
constexpr int64_t kPrefaultBytes = int64_t{4} << 20;

/// Populates the writable pages of [data, data + bytes) with madvise(MADV_POPULATE_WRITE) (Linux
/// >= 5.14), in 2 MiB chunks spread over at::parallel_for's threads, instead of taking one page
/// fault per 4 KiB page on the first write. Only for memory the caller is about to write whole,
/// so that nothing is committed that would not be anyway. Returns whether the pages were
/// populated; false where the system cannot (other systems, older kernels, a sandbox refusing
/// the call), which leaves the memory as it was.
bool prefault_pages(void* data, int64_t bytes);

} // namespace cpu
} // namespace ops
} // namespace posenc
