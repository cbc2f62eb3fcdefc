#include "ops/common/cpu_helpers.h"

#include <ATen/Parallel.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 // Linux's value, for C libraries older than the kernel
#endif
#endif

namespace posenc {
namespace ops {
namespace cpu {

at::Tensor empty_cpu(at::IntArrayRef sizes, const at::TensorOptions& options) {
  at::Tensor out = at::detail::empty_cpu(sizes, options);
  const int64_t bytes = static_cast<int64_t>(out.nbytes());
  if (bytes >= kPrefaultBytes) {
    prefault_pages(out.data_ptr(), bytes);
  }
  return out;
}

bool prefault_pages(void* data, int64_t bytes) {
#if defined(__linux__)
  // Set once the kernel has answered EINVAL (no MADV_POPULATE_WRITE) or EPERM (a sandbox).
  static std::atomic<bool> unsupported{false};
  if (unsupported.load(std::memory_order_relaxed) || data == nullptr || bytes <= 0) {
    return false;
  }
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(data) + static_cast<uintptr_t>(bytes)) / page * page;
  if (end <= begin) {
    return false;
  }
  constexpr int64_t kChunk = int64_t{2} << 20;
  const auto span = static_cast<int64_t>(end - begin);
  std::atomic<bool> populated{true};
  at::parallel_for(0, (span + kChunk - 1) / kChunk, 1, [&](int64_t first, int64_t last) {
    const uintptr_t from = begin + static_cast<uintptr_t>(first * kChunk);
    const uintptr_t to = std::min<uintptr_t>(end, begin + static_cast<uintptr_t>(last * kChunk));
    if (madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_WRITE) != 0) {
      // The first write faults the remaining pages in as usual (ENOMEM included: the write would
      // have needed the same memory).
      if (errno == EINVAL || errno == EPERM || errno == ENOSYS) {
        unsupported.store(true, std::memory_order_relaxed);
      }
      populated.store(false, std::memory_order_relaxed);
    }
  });
  return populated.load();
#else
  (void)data;
  (void)bytes;
  return false;
#endif
}

} // namespace cpu
} // namespace ops
} // namespace posenc
