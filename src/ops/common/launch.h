#pragma once

// How the CUDA kernels are launched, in plain C++: the grid a call gets, the vector width its
// loads and stores may use, and what one thread of that grid does (a grid-stride loop over the
// work items). The CUDA launcher (cuda_helpers.cuh) is a `__global__` shell around
// `run_thread`; the tests run the same `run_thread` for every (block, thread) of the same geometry
// on the CPU (test/cpp/grid_emulator.h), so the indexing a GPU would execute is executed by CI.

#include <c10/macros/Macros.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

/// Unrolls the fixed-count loop that follows (the N elements of a vector access).
#if defined(__CUDACC__) || defined(__clang__)
#define POSENC_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define POSENC_UNROLL _Pragma("GCC unroll 16")
#else
#define POSENC_UNROLL
#endif

namespace posenc {
namespace ops {
namespace kernels {

/// Threads per block of every posenc kernel: a multiple of the warp size (32), within the limit
/// of every CUDA device (1024 threads a block).
constexpr int kThreads = 256;

/// At most this many blocks: enough to fill any current device many times over (an H100 runs
/// 132 SMs x 8 blocks of 256 threads at once); the threads loop over the rest (grid-stride).
/// Well below CUDA's limit on gridDim.x (2^31 - 1), so a grid never exceeds it.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

/// The limits of a CUDA device that a launch must respect (the values of every device of compute
/// capability >= 3.0).
struct DeviceLimits {
  int64_t max_grid_x = 2147483647;
  int64_t max_threads_per_block = 1024;
  int64_t warp_size = 32;
};

/// The grid of a launch: `blocks` blocks of `threads` threads along x.
struct LaunchGeometry {
  int64_t blocks = 0;
  int64_t threads = 0;

  /// The number of threads in the grid (the stride of the grid-stride loop).
  C10_HOST_DEVICE int64_t stride() const {
    return blocks * threads;
  }
};

/// The grid for `work` independent items (one thread each, looping when there are more items
/// than threads): ceil(work / kThreads) blocks, at least 1, at most kMaxBlocks. `work` is any
/// non-negative int64.
inline LaunchGeometry launch_geometry(int64_t work) {
  const int64_t blocks = work / kThreads + (work % kThreads != 0 ? 1 : 0);
  return {std::min<int64_t>(std::max<int64_t>(blocks, 1), kMaxBlocks), kThreads};
}

/// Elements per load/store for 16-byte accesses of `element_size`-byte values: 16 / element_size
/// when the row width is a multiple of it and every pointer is 16-byte aligned (a slice or a
/// storage offset can leave a pointer misaligned), else 1 (one element at a time).
inline int vector_width(int64_t element_size, int64_t width,
                        std::initializer_list<const void*> pointers) {
  const int64_t n = element_size >= 16 ? 1 : 16 / element_size;
  if (n == 1 || width % n != 0) {
    return 1;
  }
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
      return 1;
    }
  }
  return static_cast<int>(n);
}

/// Calls `f(std::integral_constant<int, N>())` with N = `width` (1, 2, 4 or 8, as vector_width
/// gives for T): a body compiled for each vector width a call may take, none wider than one
/// 16-byte access of T.
template <typename T, typename F>
void with_vector_width(int width, F&& f) {
  constexpr int widest = sizeof(T) >= 16 ? 1 : static_cast<int>(16 / sizeof(T));
  if constexpr (widest >= 8) {
    if (width == 8) {
      return f(std::integral_constant<int, 8>());
    }
  }
  if constexpr (widest >= 4) {
    if (width == 4) {
      return f(std::integral_constant<int, 4>());
    }
  }
  if constexpr (widest >= 2) {
    if (width == 2) {
      return f(std::integral_constant<int, 2>());
    }
  }
  return f(std::integral_constant<int, 1>());
}

/// Whether a grid can index with 32-bit arithmetic: every extent (its work, and for each buffer
/// it reads or writes the largest element offset + 1) at most 2^31 - 1. A GPU divides 32-bit
/// integers in a few instructions and 64-bit ones in a long emulated sequence, which the item
/// arithmetic of every thread pays.
inline bool fits_int32(std::initializer_list<int64_t> extents) {
  for (const int64_t extent : extents) {
    if (extent > int64_t{2147483647}) {
      return false;
    }
  }
  return true;
}

/// Calls `f(int32_t{})` when `narrow` (fits_int32), else `f(int64_t{})`: a body compiled for
/// either index type.
template <typename F>
void with_index_type(bool narrow, F&& f) {
  if (narrow) {
    f(int32_t{});
  } else {
    f(int64_t{});
  }
}

/// What thread `thread` of block `block` of `geometry` does: items block * threads + thread,
/// then every stride() further, below `work`. All index arithmetic is int64, so a call of more
/// than 2^31 items (or elements) indexes them correctly.
template <typename Body>
C10_HOST_DEVICE C10_ALWAYS_INLINE void run_thread(const Body& body, int64_t work, int64_t block,
                                                  int64_t thread, const LaunchGeometry& geometry) {
  for (int64_t item = block * geometry.threads + thread; item < work; item += geometry.stride()) {
    body(item);
  }
}

} // namespace kernels
} // namespace ops
} // namespace posenc
