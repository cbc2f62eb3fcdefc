#pragma once

// Runs posenc's CUDA thread bodies on the CPU the way a GPU runs them: every (block, thread) of
// the geometry the CUDA launcher computes (or one the test chooses), each thread doing exactly
// what kernels::run_thread says, the function the `__global__` launcher calls. The bodies are
// free of races (each item writes its own elements), so running the threads one after another
// gives the result any GPU schedule gives.

#include "ops/common/launch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <type_traits>

namespace posenc_test {

using posenc::ops::kernels::LaunchGeometry;

/// Every thread of `geometry` over `work` items of `body`.
template <typename Body>
void emulate_grid(const Body& body, int64_t work, const LaunchGeometry& geometry) {
  for (int64_t block = 0; block < geometry.blocks; ++block) {
    for (int64_t thread = 0; thread < geometry.threads; ++thread) {
      posenc::ops::kernels::run_thread(body, work, block, thread, geometry);
    }
  }
}

/// The access width (elements, or pairs of a rotary body, per item) and the index bits of a body:
/// its kWidth and kIndexBits, or 1 and 64 for a body that has neither.
template <typename Body, typename = void>
struct BodyShape {
  static constexpr int width = 1;
  static constexpr int index_bits = 64;
};
template <typename Body>
struct BodyShape<Body, std::void_t<decltype(Body::kWidth), decltype(Body::kIndexBits)>> {
  static constexpr int width = Body::kWidth;
  static constexpr int index_bits = Body::kIndexBits;
};

/// The executor the family headers' run_*_grid functions take, like cuda::Launch: the geometry of
/// the launch (kernels::launch_geometry, unless `geometry` is set), checked against the device
/// limits, then every thread of it. Counts the launches, and keeps the shape of the last body.
struct Emulate {
  LaunchGeometry geometry{}; // blocks == 0: the launcher's own geometry
  mutable int launches = 0;
  mutable int width = 0;      // the last body's access width (BodyShape)
  mutable int index_bits = 0; // and its index type's bits

  template <typename Body>
  void operator()(const Body& body, int64_t work) const {
    if (work == 0) {
      return; // the launcher launches nothing
    }
    const LaunchGeometry g =
        geometry.blocks > 0 ? geometry : posenc::ops::kernels::launch_geometry(work);
    const posenc::ops::kernels::DeviceLimits limits;
    EXPECT_GE(g.blocks, 1);
    EXPECT_LE(g.blocks, limits.max_grid_x);
    EXPECT_LE(g.threads, limits.max_threads_per_block);
    EXPECT_EQ(g.threads % limits.warp_size, 0);
    ++launches;
    width = BodyShape<Body>::width;
    index_bits = BodyShape<Body>::index_bits;
    emulate_grid(body, work, g);
  }
};

/// Only the threads of `geometry` that own an item in [first, work), each running its grid-stride
/// loop and executing only those items: a window at the end of a grid too large to run whole
/// (index arithmetic past 2^31, with the data pointers shifted so that the window's elements lie
/// in a small buffer).
template <typename Body>
void emulate_window(const Body& body, int64_t first, int64_t work, const LaunchGeometry& geometry) {
  const auto windowed = [&](int64_t item) {
    if (item >= first) {
      body(item);
    }
  };
  const int64_t stride = geometry.stride();
  for (int64_t item = first; item < work && item < first + stride; ++item) {
    const int64_t slot = item % stride; // the thread that owns `item`
    posenc::ops::kernels::run_thread(windowed, work, slot / geometry.threads,
                                     slot % geometry.threads, geometry);
  }
}

} // namespace posenc_test
