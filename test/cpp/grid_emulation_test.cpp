// The CUDA kernels' thread bodies (src/ops/<family>/kernels.h), executed on the CPU the way a GPU executes
// them (grid_emulator.h: every block and thread of the launcher's geometry, grid-stride loops,
// the vectorized and the scalar accesses), must give the CPU kernels' results bit for bit: both
// round every product and sum on their own (-ffp-contract=off here, nvcc -fmad=false for the
// .cu files), so the equality holds on a GPU too. Also: the launch geometry against the device
// limits, index arithmetic past 2^31 (a window at the end of a grid that large), and the checks
// the threads make of device-resident positions and token ids.

#include <posenc/ops.h>

#include "detail/checks.h"
#include "grid_emulator.h"
#include "ops/bias/kernels.h"
#include "ops/kv_cache/kernels.h"
#include "ops/sequence/kernels.h"
#include "ops/rotary/kernels.h"
#include "ops/token/kernels.h"
#include "ops/common/upload.h"
#include "ops/common/arguments.h"
#include "ops/rotary/arguments.h"
#include "ops/sequence/arguments.h"
#include "ops/token/arguments.h"
#include "test_util.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

// The internal entry points these tests call (ops::prepare_*_call, detail::*) read the name of
// their caller from posenc's CallerScope, which the public entry points open; here, one scope
// for the whole program, on the thread that runs the tests, names them "test".
const posenc::detail::CallerScope kTestCaller("test");

namespace {

using posenc::ops::kernels::LaunchGeometry;
using posenc_test::Emulate;

const std::vector<torch::Dtype> kDtypes = {torch::kFloat, torch::kDouble, torch::kHalf,
                                           torch::kBFloat16};

// Bitwise equality (NaN payloads included), of any dtype.
::testing::AssertionResult same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) {
    return ::testing::AssertionFailure()
           << "shapes or dtypes differ: " << a.sizes() << " " << a.scalar_type() << " vs "
           << b.sizes() << " " << b.scalar_type();
  }
  const auto bytes = [](const torch::Tensor& t) {
    return t.contiguous().view({-1}).view(torch::kUInt8);
  };
  if (a.numel() == 0 || torch::equal(bytes(a), bytes(b))) {
    return ::testing::AssertionSuccess();
  }
  const torch::Tensor diff = (a.to(torch::kDouble) - b.to(torch::kDouble)).abs();
  return ::testing::AssertionFailure()
         << "bits differ; max |a - b| = " << diff.max().item<double>();
}

// A contiguous tensor of `sizes` whose data pointer is `shift` elements past a 64-byte boundary
// (shift 0: aligned; else a storage offset that defeats 16-byte accesses).
torch::Tensor shifted(at::IntArrayRef sizes, torch::Dtype dtype, int64_t shift) {
  int64_t numel = 1;
  for (const int64_t s : sizes) {
    numel *= s;
  }
  const torch::Tensor storage = torch::randn({numel + 64}).to(dtype);
  const int64_t element = torch::elementSize(dtype);
  const auto address = reinterpret_cast<uintptr_t>(storage.data_ptr());
  const int64_t skip = static_cast<int64_t>((64 - address % 64) % 64) / element + shift;
  return storage.narrow(0, skip, numel).view(sizes);
}

// --- launch geometry --------------------------------------------------------------------------

TEST(LaunchGeometry, CoversTheWorkWithinTheDeviceLimits) {
  const posenc::ops::kernels::DeviceLimits limits;
  for (const int64_t work : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{256}, int64_t{257},
                             int64_t{1} << 24, (int64_t{1} << 24) + 1, int64_t{1} << 31,
                             (int64_t{1} << 40) + 7, std::numeric_limits<int64_t>::max()}) {
    const LaunchGeometry g = posenc::ops::kernels::launch_geometry(work);
    EXPECT_GE(g.blocks, 1) << work;
    EXPECT_LE(g.blocks, posenc::ops::kernels::kMaxBlocks) << work;
    EXPECT_LE(g.blocks, limits.max_grid_x) << work;
    EXPECT_EQ(g.threads, posenc::ops::kernels::kThreads) << work;
    EXPECT_LE(g.threads, limits.max_threads_per_block);
    EXPECT_EQ(g.threads % limits.warp_size, 0);
    // One item a thread while the grid can hold them, else every thread loops.
    if (work <= posenc::ops::kernels::kMaxBlocks * g.threads) {
      EXPECT_GE(g.stride(), work) << work;
      EXPECT_LT(g.stride() - std::max<int64_t>(work, 1), g.threads) << work;
    } else {
      EXPECT_EQ(g.blocks, posenc::ops::kernels::kMaxBlocks) << work;
    }
  }
}

TEST(LaunchGeometry, EveryItemIsRunOnceByTheGridStrideLoop) {
  for (const int64_t work : {int64_t{1}, int64_t{100}, int64_t{1000}, int64_t{4097}}) {
    for (const LaunchGeometry g : {posenc::ops::kernels::launch_geometry(work),
                                   LaunchGeometry{3, 64}, LaunchGeometry{1, 32}}) {
      std::vector<int> runs(static_cast<size_t>(work), 0);
      posenc_test::emulate_grid([&](int64_t item) { ++runs[static_cast<size_t>(item)]; }, work, g);
      for (int64_t i = 0; i < work; ++i) {
        ASSERT_EQ(runs[static_cast<size_t>(i)], 1) << "item " << i << " of " << work;
      }
    }
  }
}

TEST(LaunchGeometry, VectorWidthNeedsTheWidthAndEveryPointerAligned) {
  alignas(64) static float data[64];
  using posenc::ops::kernels::vector_width;
  EXPECT_EQ(vector_width(4, 16, {data, data + 4}), 4);
  EXPECT_EQ(vector_width(2, 16, {data}), 8);
  EXPECT_EQ(vector_width(8, 6, {data}), 2);
  EXPECT_EQ(vector_width(4, 18, {data}), 1);           // width not a multiple of 4
  EXPECT_EQ(vector_width(4, 16, {data, data + 1}), 1); // one misaligned pointer
  EXPECT_EQ(vector_width(2, 16, {data + 2}), 1);       // 8-byte aligned only
  EXPECT_EQ(vector_width(16, 4, {data}), 1);           // wider than an access
}

// --- add_position_table -----------------------------------------------------------------------

struct AddCase {
  std::vector<int64_t> shape; // x
  bool batch_first;
  int64_t shift; // misalignment of x and out, in elements
  bool per_sequence_positions;
  double scale;
};

// batch_loop_items: run_add_grid's threshold for reading a table row once for the batch (0:
// wherever positions are shared).
void check_add(const AddCase& c, torch::Dtype dtype, torch::Dtype table_dtype, bool in_place,
               const Emulate& execute,
               int64_t batch_loop_items = posenc::ops::kernels::kBatchLoopItems) {
  const int64_t width = c.shape[2];
  const int64_t length = c.shape[c.batch_first ? 1 : 0];
  const int64_t batch = c.shape[c.batch_first ? 0 : 1];
  const torch::Tensor table = torch::randn({length + 5, width}, torch::dtype(table_dtype));
  const torch::Tensor x = shifted(c.shape, dtype, c.shift);
  c10::optional<torch::Tensor> positions;
  if (c.per_sequence_positions) {
    torch::Tensor p = torch::randint(
        -1, length + 5,
        c.batch_first ? std::vector<int64_t>{batch, length} : std::vector<int64_t>{length, batch},
        torch::kLong);
    positions = p;
  }
  const torch::Tensor expected = posenc::ops::add_position_table(
      x, table, 2 * !c.per_sequence_positions, c.batch_first, positions, c.scale);
  const posenc::ops::TableCall call = posenc::ops::prepare_table_call(
      x, table, 2 * !c.per_sequence_positions, positions, c.batch_first, c.scale, c10::nullopt);
  torch::Tensor out = shifted(c.shape, dtype, c.shift); // aligned (or not) as x
  if (in_place) {
    out.copy_(x);
    posenc::ops::kernels::run_add_grid(out, out, call, execute, batch_loop_items);
  } else {
    out.fill_(7);
    posenc::ops::kernels::run_add_grid(x, out, call, execute, batch_loop_items);
  }
  EXPECT_TRUE(same_bits(out, expected))
      << c10::toString(dtype) << " table " << c10::toString(table_dtype) << " shape "
      << at::IntArrayRef(c.shape) << " shift " << c.shift << (in_place ? " in place" : "")
      << " batch loop from " << batch_loop_items << " items";
}

TEST(GridEmulation, AddPositionTableEqualsTheCpuKernel) {
  const std::vector<AddCase> cases = {
      {{2, 7, 16}, true, 0, false, 1.0},   // vectorized (16-byte packs)
      {{2, 7, 16}, true, 1, false, 1.0},   // misaligned by a storage offset: scalar path
      {{3, 5, 24}, false, 0, true, 1.0},   // [L, B, D], per-sequence positions with padding
      {{2, 9, 10}, true, 0, true, 0.5},    // width 10: no 16-byte packs for 4-byte values
      {{1, 300, 64}, true, 0, false, 2.0}, // more packs than one block
  };
  // shared [L] positions, with padding
  for (const torch::Dtype dtype : kDtypes) {
    for (const bool batch_first : {true, false}) {
      const std::vector<int64_t> shape =
          batch_first ? std::vector<int64_t>{3, 6, 16} : std::vector<int64_t>{6, 3, 16};
      const torch::Tensor x = shifted(shape, dtype, 0);
      const torch::Tensor table = torch::randn({9, 16});
      const torch::Tensor positions = torch::tensor({4, -1, 0, 8, 2, 2}, torch::kLong);
      const torch::Tensor expected =
          posenc::ops::add_position_table(x, table, 0, batch_first, positions, 1.0);
      const posenc::ops::TableCall call =
          posenc::ops::prepare_table_call(x, table, 0, positions, batch_first, 1.0, c10::nullopt);
      torch::Tensor out = torch::full_like(x, 7);
      posenc::ops::kernels::run_add_grid(x, out, call, Emulate());
      EXPECT_TRUE(same_bits(out, expected)) << c10::toString(dtype) << " [L] " << batch_first;
    }
  }
  for (const AddCase& c : cases) {
    for (const torch::Dtype dtype : kDtypes) {
      for (const torch::Dtype table_dtype : {torch::kFloat, torch::kDouble}) {
        for (const bool in_place : {false, true}) {
          Emulate launcher;
          check_add(c, dtype, table_dtype, in_place, launcher);
          EXPECT_EQ(launcher.launches, 1);
          EXPECT_EQ(launcher.index_bits, 32);
          if (c.shift != 0) {
            EXPECT_EQ(launcher.width, 1);
          } else if (c.shape[2] % 8 == 0) { // a 16-byte access of every dtype
            EXPECT_EQ(launcher.width, 16 / torch::elementSize(dtype)) << c10::toString(dtype);
          }
          Emulate small_grid; // grid-stride tails: 3 blocks of 64 threads loop over every pack
          small_grid.geometry = LaunchGeometry{3, 64};
          check_add(c, dtype, table_dtype, in_place, small_grid);
          // each table row read once for the batch (shared positions), both layouts
          check_add(c, dtype, table_dtype, in_place, Emulate(), 0);
          check_add(c, dtype, table_dtype, in_place, small_grid, 0);
        }
      }
    }
  }
}

TEST(GridEmulation, RowGroupsShareATableRowOnlyWhereThePositionsDo) {
  using posenc::ops::kernels::row_groups;
  const torch::Tensor table = torch::randn({20, 8});
  const auto call = [&](std::vector<int64_t> shape, bool batch_first, bool per_sequence) {
    const torch::Tensor x = torch::randn(shape);
    c10::optional<torch::Tensor> positions;
    if (per_sequence) {
      positions = torch::zeros({shape[0], shape[1]}, torch::kLong);
    }
    return posenc::ops::prepare_table_call(x, table, 0, positions, batch_first, 1.0, c10::nullopt);
  };
  // [B, L, D]: group l holds rows l, L + l, 2L + l, ...; [L, B, D]: rows lB .. lB + B - 1
  auto g = row_groups(call({3, 5, 8}, true, false), 15, 2, 0);
  EXPECT_EQ(std::vector<int64_t>({g.groups, g.repeat, g.row(2, 0), g.row(2, 1), g.row(2, 2)}),
            std::vector<int64_t>({5, 3, 2, 7, 12}));
  g = row_groups(call({5, 3, 8}, false, false), 15, 2, 0);
  EXPECT_EQ(std::vector<int64_t>({g.groups, g.repeat, g.row(2, 0), g.row(2, 1), g.row(2, 2)}),
            std::vector<int64_t>({5, 3, 6, 7, 8}));
  // one row a group: positions per sequence, or fewer items than the threshold
  g = row_groups(call({3, 5, 8}, true, true), 15, 2, 0);
  EXPECT_EQ(std::vector<int64_t>({g.groups, g.repeat, g.row(7, 0)}),
            std::vector<int64_t>({15, 1, 7}));
  g = row_groups(call({3, 5, 8}, true, false), 15, 2, 11);
  EXPECT_EQ(std::vector<int64_t>({g.groups, g.repeat}), std::vector<int64_t>({15, 1}));
  g = row_groups(call({3, 5, 8}, true, false), 15, 2, 10);
  EXPECT_EQ(std::vector<int64_t>({g.groups, g.repeat}), std::vector<int64_t>({5, 3}));
}

TEST(GridEmulation, AddPositionTableIndexesPast2To31) {
  // A [1, L, 64] call whose last rows lie past element 2^31: x, out and the table are small
  // buffers holding the window's rows, their pointers shifted back so that element indices are the
  // full call's.
  const int64_t width = 64;
  const int64_t first_row = (int64_t{1} << 31) / width + 5;
  const int64_t rows = first_row + 3;
  const torch::Tensor x_window = torch::randn({1, 3, width});
  const torch::Tensor table_window = torch::randn({3, width});
  const torch::Tensor expected = posenc::ops::add_position_table(x_window, table_window);
  torch::Tensor out_window = torch::full({1, 3, width}, 7.0f);
  const int64_t shift = first_row * width;
  using Body = posenc::ops::kernels::AddRowsBody<float, float, int64_t, 4>;
  posenc::ops::SequenceRows where{1, rows, true, 0, nullptr, false};
  const Body body{x_window.data_ptr<float>() - shift,
                  out_window.data_ptr<float>() - shift,
                  table_window.data_ptr<float>() - shift,
                  {rows, 1, 1, 0},
                  width,
                  rows,
                  where,
                  1.0f,
                  true};
  ASSERT_GT(body.work() * 4, int64_t{1} << 31);
  posenc_test::emulate_window(body, first_row * (width / 4), body.work(),
                              posenc::ops::kernels::launch_geometry(body.work()));
  EXPECT_TRUE(same_bits(out_window, expected));
}

// --- apply_rotary -----------------------------------------------------------------------------

struct RotaryCase {
  std::vector<int64_t> shape; // [B, L, H, Dh] or [B, H, L, Dh]
  int64_t half;               // R/2 (partial rotary when 2 * half < Dh)
  bool heads_first;
  bool interleaved;
  bool inverse;
  int positions; // 0: offset form, 1: [L], 2: [B, L] with padding
};

c10::optional<torch::Tensor> rotary_positions(const RotaryCase& c, int64_t max_len) {
  const int64_t batch = c.shape[0];
  const int64_t length = c.shape[c.heads_first ? 2 : 1];
  if (c.positions == 1) {
    return torch::randint(0, max_len, {length}, torch::kLong);
  }
  if (c.positions == 2) {
    return torch::randint(-1, max_len, {batch, length}, torch::kLong);
  }
  return c10::nullopt;
}

TEST(GridEmulation, ApplyRotaryEqualsTheCpuKernel) {
  const std::vector<RotaryCase> cases = {
      {{2, 5, 3, 16}, 8, false, false, false, 0},
      {{2, 5, 3, 16}, 8, false, true, true, 1},
      {{2, 3, 5, 20}, 6, true, false, false, 2}, // partial rotary, heads first, padding
      {{1, 40, 4, 64}, 32, false, true, false, 2},
      {{2, 4, 2, 10}, 3, false, false, true, 0}, // partial, inverse
  };
  for (const RotaryCase& c : cases) {
    for (const torch::Dtype dtype : kDtypes) {
      for (const torch::Dtype table_dtype : {torch::kFloat, torch::kDouble}) {
        for (const bool in_place : {false, true}) {
          const int64_t max_len = 50;
          const torch::Tensor cos = torch::randn({max_len, c.half}, torch::dtype(table_dtype));
          const torch::Tensor sin = torch::randn({max_len, c.half}, torch::dtype(table_dtype));
          const torch::Tensor x = torch::randn(c.shape).to(dtype);
          const auto positions = rotary_positions(c, max_len);
          const int64_t offset = positions ? 0 : 3;
          const torch::Tensor expected = posenc::ops::apply_rotary(
              x, cos, sin, offset, positions, c.interleaved, c.heads_first, c.inverse);
          const posenc::ops::RotaryCall call = posenc::ops::prepare_rotary_call(
              x, cos, sin, offset, positions, c.heads_first, c10::nullopt, 1.0);
          for (const LaunchGeometry geometry : {LaunchGeometry{}, LaunchGeometry{2, 32}}) {
            Emulate execute;
            execute.geometry = geometry;
            torch::Tensor out = in_place ? x.clone() : torch::full_like(x, 7);
            posenc::ops::kernels::run_rotary_grid(in_place ? out : x, out, call, c.interleaved,
                                                  c.inverse, execute);
            EXPECT_TRUE(same_bits(out, expected))
                << c10::toString(dtype) << " table " << c10::toString(table_dtype) << " shape "
                << at::IntArrayRef(c.shape) << " half " << c.half << (in_place ? " in place" : "")
                << " blocks " << geometry.blocks;
          }
        }
      }
    }
  }
}

TEST(GridEmulation, ApplyRotaryQkEqualsTheCpuKernel) {
  // GQA (more query heads than key heads), keys wider than the queries, views of a fused tensor.
  for (const bool heads_first : {false, true}) {
    for (const torch::Dtype dtype : kDtypes) {
      for (const bool in_place : {false, true}) {
        for (const int positions_form : {0, 2}) {
          const int64_t batch = 2, length = 6, half = 4, max_len = 20;
          const auto shape = [&](int64_t heads, int64_t dim) {
            return heads_first ? std::vector<int64_t>{batch, heads, length, dim}
                               : std::vector<int64_t>{batch, length, heads, dim};
          };
          // q and k: views into one fused [.., 6 + 2 heads, 12] tensor (channels contiguous)
          const torch::Tensor fused = torch::randn(shape(8, 12)).to(dtype);
          const int64_t head_axis = heads_first ? 1 : 2;
          const torch::Tensor q = fused.narrow(head_axis, 0, 6).narrow(3, 0, 10);
          const torch::Tensor k = fused.narrow(head_axis, 6, 2);
          const torch::Tensor cos = torch::randn({max_len, half});
          const torch::Tensor sin = torch::randn({max_len, half});
          const RotaryCase c{shape(6, 10), half, heads_first, false, false, positions_form};
          const auto positions = rotary_positions(c, max_len);
          const int64_t offset = positions ? 0 : 4;
          torch::Tensor q_expected;
          torch::Tensor k_expected;
          std::tie(q_expected, k_expected) =
              posenc::ops::apply_rotary_qk(q, k, cos, sin, offset, positions, true, heads_first);
          const posenc::ops::RotaryQkCall call = posenc::ops::prepare_rotary_qk_call(
              q, k, cos, sin, offset, positions, heads_first, c10::nullopt, 1.0);
          torch::Tensor fused_out = fused.clone();
          torch::Tensor q_out = fused_out.narrow(head_axis, 0, 6).narrow(3, 0, 10);
          torch::Tensor k_out = fused_out.narrow(head_axis, 6, 2);
          if (!in_place) {
            q_out = torch::full_like(q, 7);
            k_out = torch::full_like(k, 7);
          }
          const posenc::ops::RotaryOperand qo{in_place ? q_out : q, q_out, 6, 10};
          const posenc::ops::RotaryOperand ko{in_place ? k_out : k, k_out, 2, 12};
          for (const LaunchGeometry geometry : {LaunchGeometry{}, LaunchGeometry{3, 32}}) {
            Emulate execute;
            execute.geometry = geometry;
            if (in_place) { // start again from the inputs
              q_out.copy_(q);
              k_out.copy_(k);
            }
            posenc::ops::kernels::run_rotary_qk_grid(qo, ko, call, true, false, execute);
            EXPECT_TRUE(same_bits(q_out, q_expected)) << c10::toString(dtype) << heads_first;
            EXPECT_TRUE(same_bits(k_out, k_expected)) << c10::toString(dtype) << heads_first;
          }
        }
      }
    }
  }
}

// The grid body of rotary calls over `tokens` tokens of one head of 2 * half contiguous
// channels, at the positions `where` (RotaryRows::tokens_of form), from a table of `table_rows`.
template <typename index_t, int N>
posenc::ops::kernels::RotaryGridBody<float, float, index_t, N> one_head_body(
    const float* x, float* out, const float* cos, const float* sin, int64_t tokens, int64_t half,
    int64_t table_rows, const posenc::ops::RotaryRows& where) {
  const auto d = static_cast<index_t>(2 * half);
  const posenc::ops::RowStrides<index_t> strides{static_cast<index_t>(tokens) * d, d, d};
  const posenc::ops::OperandRows<float, index_t> q{x, out, strides, strides, 1, d};
  posenc::ops::OperandRows<float, index_t> k = q;
  k.heads = 0;
  return {q,
          k,
          cos,
          sin,
          static_cast<index_t>(tokens),
          static_cast<index_t>(tokens),
          static_cast<index_t>(half),
          table_rows,
          where,
          false,
          false,
          0};
}

TEST(GridEmulation, ApplyRotaryIndexesPast2To31) {
  // [1, L, 1, 128] rows with L past 2^31 / 64 pairs, offset form: the rows' elements and the
  // cos/sin rows both lie past element 2^31 (small buffers, pointers shifted back), one pair an
  // item (more than 2^31 items) and four.
  const int64_t half = 64;
  const int64_t head_dim = 2 * half;
  const int64_t first_row = (int64_t{1} << 31) / half + 3;
  const int64_t rows = first_row + 3;
  const torch::Tensor x_window = torch::randn({1, 3, 1, head_dim});
  const torch::Tensor cos_window = torch::randn({3, half});
  const torch::Tensor sin_window = torch::randn({3, half});
  const torch::Tensor expected = posenc::ops::apply_rotary(x_window, cos_window, sin_window);
  const posenc::ops::RotaryRows where{rows, 1, false, 0, nullptr, false};
  const auto check = [&](auto width) {
    constexpr int n = decltype(width)::value;
    torch::Tensor out_window = torch::full_like(x_window, 7.0f);
    const auto body = one_head_body<int64_t, n>(x_window.data_ptr<float>() - first_row * head_dim,
                                                out_window.data_ptr<float>() - first_row * head_dim,
                                                cos_window.data_ptr<float>() - first_row * half,
                                                sin_window.data_ptr<float>() - first_row * half,
                                                rows, half, rows, where);
    if (n == 1) {
      ASSERT_GT(body.work(), int64_t{1} << 31);
    }
    posenc_test::emulate_window(body, first_row * (half / n), body.work(),
                                posenc::ops::kernels::launch_geometry(body.work()));
    EXPECT_TRUE(same_bits(out_window, expected)) << n << " pairs an item";
  };
  check(std::integral_constant<int, 1>());
  check(std::integral_constant<int, 4>());
}

TEST(GridEmulation, RotaryIndexesIn32BitsOnlyWhereEveryOffsetFits) {
  using posenc::ops::kernels::fits_int32;
  EXPECT_TRUE(fits_int32({0, 2147483647}));
  EXPECT_FALSE(fits_int32({5, int64_t{2147483647} + 1}));
  // A view's extent counts its strides, not its elements: every other row of a tensor.
  const torch::Tensor rows = torch::zeros({4, 6}).narrow(1, 0, 2);
  EXPECT_EQ(posenc::ops::element_extent(rows), 3 * 6 + 2);
  EXPECT_EQ(posenc::ops::element_extent(torch::zeros({0, 3})), 0);
  // A call that fits runs the 32-bit body, with the widest access its rows allow.
  const torch::Tensor x = torch::randn({2, 3, 4, 64});
  const torch::Tensor cos = torch::randn({8, 32});
  const torch::Tensor sin = torch::randn({8, 32});
  const posenc::ops::RotaryCall call =
      posenc::ops::prepare_rotary_call(x, cos, sin, 1, c10::nullopt, false, c10::nullopt, 1.0);
  torch::Tensor out = torch::empty_like(x);
  Emulate execute;
  posenc::ops::kernels::run_rotary_grid(x, out, call, false, false, execute);
  EXPECT_EQ(execute.index_bits, 32);
  EXPECT_EQ(execute.width, 4);
  EXPECT_TRUE(same_bits(out, posenc::ops::apply_rotary(x, cos, sin, 1)));
}

TEST(GridEmulation, ApplyRotaryOnMisalignedRowsTakesOnePairAnItem) {
  for (const torch::Dtype dtype : kDtypes) {
    for (const bool interleaved : {false, true}) {
      const torch::Tensor x = shifted({2, 5, 3, 16}, dtype, 1); // a storage offset of 1
      const torch::Tensor cos = torch::randn({9, 8});
      const torch::Tensor sin = torch::randn({9, 8});
      const posenc::ops::RotaryCall call =
          posenc::ops::prepare_rotary_call(x, cos, sin, 2, c10::nullopt, false, c10::nullopt, 1.0);
      torch::Tensor out = torch::full_like(x, 7);
      Emulate execute;
      posenc::ops::kernels::run_rotary_grid(x, out, call, interleaved, false, execute);
      EXPECT_EQ(execute.width, 1) << c10::toString(dtype);
      EXPECT_TRUE(
          same_bits(out, posenc::ops::apply_rotary(x, cos, sin, 2, c10::nullopt, interleaved)))
          << c10::toString(dtype) << interleaved;
      // and the same call on aligned rows: one access of 16 bytes (8 pairs at most) an item
      const torch::Tensor aligned = x.clone();
      Emulate wide;
      torch::Tensor wide_out = torch::full_like(x, 7);
      posenc::ops::kernels::run_rotary_grid(aligned, wide_out, call, interleaved, false, wide);
      EXPECT_EQ(wide.width, std::min<int64_t>(8, 16 / torch::elementSize(dtype)))
          << c10::toString(dtype);
      EXPECT_TRUE(same_bits(wide_out, out)) << c10::toString(dtype) << interleaved;
    }
  }
}

TEST(GridEmulation, ThreadsRefusePositionsOutsideTheTable) {
  // Positions on a GPU are not read by the host: the thread that reads one outside the table
  // stops (a device-side assertion there; here, the same check raises) before reading a row.
  const torch::Tensor cos = torch::randn({4, 2});
  const torch::Tensor sin = torch::randn({4, 2});
  const torch::Tensor x = torch::randn({1, 2, 1, 4});
  torch::Tensor out = torch::full_like(x, 7.0f);
  for (const int64_t bad : {int64_t{4}, int64_t{-2}, int64_t{1} << 40}) {
    const std::vector<int64_t> positions = {1, bad};
    const posenc::ops::RotaryRows where{2, 1, false, 0, positions.data(), false};
    const auto body =
        one_head_body<int32_t, 1>(x.data_ptr<float>(), out.data_ptr<float>(), cos.data_ptr<float>(),
                                  sin.data_ptr<float>(), 2, 2, 4, where);
    const std::string message = posenc_test::error_message([&] {
      posenc_test::emulate_grid(body, body.work(), LaunchGeometry{1, 32});
    });
    EXPECT_NE(message.find("a position lies outside the table"), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(bad)), std::string::npos) << message;
    // the second row's pairs were not written
    EXPECT_TRUE(torch::equal(out.select(1, 1), torch::full({1, 1, 4}, 7.0f)));
  }
}

// The token body of a call of two tokens (a [1, 2] batch) into `out` (4 wide), from a weight of
// 5 rows and `table`, at the positions `where`, without dropout.
template <typename index_t>
posenc::ops::kernels::TokenBody<float, float, index_t, 1> two_token_body(
    const std::vector<int64_t>& tokens, const torch::Tensor& weight, const torch::Tensor& table,
    torch::Tensor& out, const posenc::ops::SequenceRows& where, const uint64_t& key) {
  return {tokens.data(),
          weight.data_ptr<float>(),
          table.data_ptr<float>(),
          out.data_ptr<float>(),
          nullptr,
          {2, 1, 1, 0},
          4,
          weight.size(0),
          table.size(0),
          where,
          1.0f,
          true,
          posenc::ops::kernels::DropoutDraws{&key, 0, 0.0}};
}

TEST(GridEmulation, AddAndTokenThreadsRefusePositionsOutsideTheTable) {
  const torch::Tensor table = torch::randn({4, 4});
  const torch::Tensor x = torch::randn({1, 2, 4});
  const torch::Tensor weight = torch::randn({5, 4});
  const std::vector<int64_t> tokens = {0, 1};
  const uint64_t key = 0;
  for (const int64_t bad : {int64_t{4}, int64_t{-3}}) {
    const std::vector<int64_t> positions = {1, bad};
    const posenc::ops::SequenceRows where{1, 2, true, 0, positions.data(), false};
    torch::Tensor out = torch::full_like(x, 7.0f);
    const posenc::ops::kernels::AddRowsBody<float, float, int64_t, 1> add{x.data_ptr<float>(),
                                                                          out.data_ptr<float>(),
                                                                          table.data_ptr<float>(),
                                                                          {2, 1, 1, 0},
                                                                          4,
                                                                          4,
                                                                          where,
                                                                          1.0f,
                                                                          true};
    std::string message = posenc_test::error_message([&] {
      posenc_test::emulate_grid(add, add.work(), LaunchGeometry{1, 32});
    });
    EXPECT_NE(message.find("a position lies outside the table"), std::string::npos) << message;
    EXPECT_TRUE(torch::equal(out.select(1, 1), torch::full({1, 4}, 7.0f)));
    out.fill_(7.0f);
    const auto token = two_token_body<int32_t>(tokens, weight, table, out, where, key);
    message = posenc_test::error_message([&] {
      posenc_test::emulate_grid(token, token.work(), LaunchGeometry{1, 32});
    });
    EXPECT_NE(message.find("a position lies outside the table"), std::string::npos) << message;
    EXPECT_TRUE(torch::equal(out.select(1, 1), torch::full({1, 4}, 7.0f)));
  }
}

// --- token_and_position_embedding -------------------------------------------------------------

TEST(GridEmulation, TokenAndPositionEmbeddingEqualsTheCpuKernel) {
  for (const torch::Dtype dtype : kDtypes) {
    for (const bool with_dropout : {false, true}) {
      for (const int positions_form : {0, 1, 2}) {
        const bool batch_first = positions_form != 1; // [L, B] ids with shared positions
        const int64_t batch = 3, length = 7, width = 12, vocab = 11, max_len = 16;
        const torch::Tensor tokens = torch::randint(
            0, vocab,
            batch_first ? std::vector<int64_t>{batch, length} : std::vector<int64_t>{length, batch},
            torch::kLong);
        const torch::Tensor weight = torch::randn({vocab, width}).to(dtype);
        const torch::Tensor table = torch::randn({max_len, width});
        c10::optional<torch::Tensor> positions;
        if (positions_form == 1) {
          positions = torch::randint(-1, max_len, {length}, torch::kLong);
        } else if (positions_form == 2) {
          positions = torch::randint(-1, max_len, {batch, length}, torch::kLong);
        }
        const double dropout = with_dropout ? 0.3 : 0.0;
        torch::manual_seed(42);
        torch::Tensor expected;
        torch::Tensor expected_mask;
        std::tie(expected, expected_mask) = posenc::ops::token_and_position_embedding(
            tokens, weight, table, positions ? 0 : 2, batch_first, positions, 0.5, -1, dropout,
            with_dropout);
        // The key the CPU kernel drew: the same draw of the reseeded generator.
        torch::manual_seed(42);
        uint64_t key = 0;
        {
          auto generator = at::detail::getDefaultCPUGenerator();
          std::lock_guard<std::mutex> lock(generator.mutex());
          key = generator.get<at::CPUGeneratorImpl>()->random64();
        }
        const posenc::ops::TableCall call =
            posenc::ops::prepare_token_call(tokens, weight, table, positions ? 0 : 2, positions,
                                            batch_first, 0.5, dropout, c10::nullopt);
        torch::Tensor out = torch::full({tokens.size(0), tokens.size(1), width}, 7.0).to(dtype);
        torch::Tensor mask =
            torch::zeros(with_dropout ? out.sizes() : at::IntArrayRef{0}, torch::kBool);
        Emulate execute;
        execute.geometry = LaunchGeometry{2, 64};
        posenc::ops::kernels::run_token_grid(tokens, weight, out, mask, call, dropout, with_dropout,
                                             &key, execute);
        // each table row read once for the batch where positions are shared: the same output
        // and mask
        torch::Tensor grouped_out = torch::full_like(out, 7);
        torch::Tensor grouped_mask = torch::zeros_like(mask);
        posenc::ops::kernels::run_token_grid(tokens, weight, grouped_out, grouped_mask, call,
                                             dropout, with_dropout, &key, execute, 0);
        EXPECT_TRUE(same_bits(grouped_out, expected)) << c10::toString(dtype) << with_dropout;
        if (with_dropout) {
          EXPECT_TRUE(torch::equal(grouped_mask, expected_mask));
        }
        // 16-byte accesses where the width (12) is a multiple of them: float32 and float64
        EXPECT_EQ(execute.width, dtype == torch::kFloat ? 4 : dtype == torch::kDouble ? 2 : 1);
        EXPECT_EQ(execute.index_bits, 32);
        EXPECT_TRUE(same_bits(out, expected)) << c10::toString(dtype) << with_dropout;
        if (with_dropout) {
          EXPECT_TRUE(torch::equal(mask, expected_mask));
        }
      }
    }
  }
}

TEST(GridEmulation, ThreadsRefuseTokenIdsOutsideTheVocabulary) {
  const torch::Tensor weight = torch::randn({5, 4});
  const torch::Tensor table = torch::randn({8, 4});
  for (const int64_t bad : {int64_t{5}, int64_t{-1}}) {
    const std::vector<int64_t> tokens = {0, bad};
    torch::Tensor out = torch::full({1, 2, 4}, 7.0f);
    const uint64_t key = 0;
    const auto body = two_token_body<int64_t>(
        tokens, weight, table, out, posenc::ops::SequenceRows{1, 2, true, 0, nullptr, false}, key);
    const std::string message = posenc_test::error_message([&] {
      posenc_test::emulate_grid(body, body.work(), LaunchGeometry{1, 32});
    });
    EXPECT_NE(message.find("token ids must lie in [0, vocab_size)"), std::string::npos) << message;
    EXPECT_TRUE(torch::equal(out.select(1, 1), torch::full({1, 4}, 7.0f)));
  }
}

// --- relative_position_bucket -----------------------------------------------------------------

// T5's bucket as transformers' T5Attention._relative_position_bucket defines it, in float64 with
// libm (an independent reference: the kernel body is shared by the CPU and CUDA kernels).
torch::Tensor t5_buckets(const torch::Tensor& relative, bool bidirectional, int64_t num_buckets,
                         int64_t max_distance) {
  std::vector<int64_t> out;
  const int64_t* values = relative.data_ptr<int64_t>();
  for (int64_t i = 0; i < relative.numel(); ++i) {
    const int64_t r = values[i];
    int64_t buckets = num_buckets;
    int64_t bucket = 0;
    double distance = 0.0; // as a double: |INT64_MIN| fits
    if (bidirectional) {
      buckets /= 2;
      bucket = r > 0 ? buckets : 0;
      distance = std::fabs(static_cast<double>(r));
    } else {
      distance = r < 0 ? -static_cast<double>(r) : 0.0;
    }
    const int64_t exact = buckets / 2;
    if (distance < static_cast<double>(exact)) {
      out.push_back(bucket + static_cast<int64_t>(distance));
      continue;
    }
    const double large =
        static_cast<double>(exact) +
        std::log(distance / static_cast<double>(exact)) /
            std::log(static_cast<double>(max_distance) / static_cast<double>(exact)) *
            static_cast<double>(buckets - exact);
    out.push_back(bucket + static_cast<int64_t>(std::min(large, static_cast<double>(buckets - 1))));
  }
  return torch::tensor(out, torch::kLong);
}

TEST(GridEmulation, RelativePositionBucketEqualsTheCpuKernel) {
  torch::Tensor relative = torch::arange(-700, 700, torch::kLong);
  relative =
      torch::cat({relative, torch::tensor({std::numeric_limits<int64_t>::min(),
                                           std::numeric_limits<int64_t>::max(), int64_t{1} << 40},
                                          torch::kLong)});
  for (const bool bidirectional : {true, false}) {
    for (const auto& buckets_and_distance :
         {std::pair<int64_t, int64_t>{32, 128}, std::pair<int64_t, int64_t>{8, 20}}) {
      const torch::Tensor expected = t5_buckets(relative, bidirectional, buckets_and_distance.first,
                                                buckets_and_distance.second);
      // the CPU operator too (it runs the same body: this pins it to the reference as well)
      EXPECT_TRUE(torch::equal(
          posenc::ops::relative_position_bucket(relative, bidirectional, buckets_and_distance.first,
                                                buckets_and_distance.second),
          expected));
      torch::Tensor out = torch::full_like(relative, -7);
      const posenc::ops::kernels::BucketBody body{
          relative.data_ptr<int64_t>(), out.data_ptr<int64_t>(), bidirectional,
          buckets_and_distance.first, buckets_and_distance.second,
          posenc::detail::relative_position_bucket_log_range(
              bidirectional, buckets_and_distance.first, buckets_and_distance.second)};
      Emulate execute;
      execute(body, relative.numel());
      EXPECT_TRUE(torch::equal(out, expected)) << bidirectional;
    }
  }
}

// detail::upload's kernels: the host's bytes carried in the launch arguments, one launch per
// chunk of kUploadChunkBytes (the last one short), every byte written once by the grid of the
// launcher's geometry, none outside the output.
TEST(GridEmulation, UploadWritesTheHostBytesChunkByChunk) {
  using posenc::ops::kernels::kUploadChunkBytes;
  for (const int64_t bytes : {int64_t{0}, int64_t{1}, int64_t{255}, kUploadChunkBytes,
                              kUploadChunkBytes + 1, 3 * kUploadChunkBytes + 17}) {
    const torch::Tensor host = torch::randint(0, 256, {bytes}, torch::kUInt8);
    // a guard byte on each side, to see any write outside the output
    torch::Tensor out = torch::full({bytes + 2}, 0xAB, torch::kUInt8);
    Emulate execute;
    posenc::ops::kernels::run_upload_grid(out.data_ptr<uint8_t>() + 1, host.data_ptr<uint8_t>(),
                                          bytes, execute);
    EXPECT_EQ(execute.launches, (bytes + kUploadChunkBytes - 1) / kUploadChunkBytes) << bytes;
    EXPECT_TRUE(torch::equal(out.narrow(0, 1, bytes), host)) << bytes;
    EXPECT_EQ(out[0].item<uint8_t>(), 0xAB);
    EXPECT_EQ(out[bytes + 1].item<uint8_t>(), 0xAB);
  }
}

} // namespace

// --- the KV-cache family ---------------------------------------------------------------------

namespace {

// The tensors of one paged KV-cache call: a packed batch of 6 tokens, GQA (4 query heads, 2 key
// heads), partial rotary (R = 8 of D = 12), values of width 8, a paged cache of 4 blocks of 4.
struct PagedCase {
  torch::Tensor q = torch::randn({6, 4, 12});
  torch::Tensor k = torch::randn({6, 2, 12});
  torch::Tensor v = torch::randn({6, 2, 8});
  torch::Tensor k_cache = torch::randn({4, 4, 2, 12});
  torch::Tensor v_cache = torch::randn({4, 4, 2, 8});
  torch::Tensor positions = torch::tensor({0, 5, -1, 17, 3, 30});
  torch::Tensor slots = torch::tensor({3, -1, 9, 15, 0, 6});
  torch::Tensor cos;
  torch::Tensor sin;

  explicit PagedCase(torch::Dtype dtype) {
    q = q.to(dtype);
    k = k.to(dtype);
    v = v.to(dtype);
    k_cache = k_cache.to(dtype);
    v_cache = v_cache.to(dtype);
    const auto inv_freq = torch::pow(10000.0, -torch::arange(0, 8, 2, torch::kDouble) / 8.0);
    const auto angles = torch::arange(32, torch::kDouble).unsqueeze(1) * inv_freq;
    cos = angles.cos().to(torch::kFloat);
    sin = angles.sin().to(torch::kFloat);
  }

  posenc::ops::KvCacheCall call(const torch::Tensor& q_out) const {
    return posenc::ops::prepare_paged_kv_cache_call(q, q_out, k, v, k_cache, v_cache, cos, sin,
                                                    positions, slots, false, c10::nullopt, 1.0);
  }
};

} // namespace

// The thread bodies of the fused rotation and cache write give the CPU operator's result bit for
// bit (itself the composite of apply_rotary_qk and index_copy_, test_kv_cache.py), in place and
// out of place, for every dtype and for the launcher's grid and a small grid-stride one.
TEST(GridEmulation, PagedKvCacheBodiesEqualTheCpuOperator) {
  torch::manual_seed(11);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf, torch::kDouble}) {
    for (const bool in_place : {true, false}) {
      for (const bool interleaved : {false, true}) {
        const PagedCase c(dtype);
        torch::Tensor q_expected = c.q.clone();
        torch::Tensor k_expected = c.k_cache.clone();
        torch::Tensor v_expected = c.v_cache.clone();
        posenc::ops::rotary_paged_kv_cache_(q_expected, c.k, c.v, k_expected, v_expected, c.cos,
                                            c.sin, c.positions, c.slots, interleaved);
        for (const LaunchGeometry geometry : {LaunchGeometry{}, LaunchGeometry{2, 32}}) {
          PagedCase run = c;
          run.q = c.q.clone();
          run.k_cache = c.k_cache.clone();
          run.v_cache = c.v_cache.clone();
          torch::Tensor q_out = in_place ? run.q : torch::full_like(run.q, 7);
          const posenc::ops::KvCacheCall call = run.call(q_out);
          Emulate execute;
          execute.geometry = geometry;
          posenc::ops::kernels::run_distinct_slots_check(call, execute);
          posenc::ops::kernels::run_kv_cache_grid(call, in_place ? call.q : q_out.unsqueeze(0),
                                                  interleaved, false, execute);
          EXPECT_TRUE(same_bits(q_out, q_expected)) << c10::toString(dtype) << in_place;
          EXPECT_TRUE(same_bits(run.k_cache, k_expected)) << c10::toString(dtype) << in_place;
          EXPECT_TRUE(same_bits(run.v_cache, v_expected)) << c10::toString(dtype) << in_place;
        }
      }
    }
  }
}

// A contiguous cache through the emulated grid: token l of sequence b at slot cache_seqlens[b] +
// l, rotated at those positions, heads-first caches.
TEST(GridEmulation, ContiguousKvCacheBodiesEqualTheCpuOperator) {
  torch::manual_seed(12);
  const PagedCase tables(torch::kFloat);
  const auto q = torch::randn({2, 3, 4, 8});
  const auto k = torch::randn({2, 3, 2, 8});
  const auto v = torch::randn({2, 3, 2, 8});
  const auto seqlens = torch::tensor({4, 0}, torch::kInt);
  torch::Tensor q_expected = q.clone();
  torch::Tensor k_expected = torch::zeros({2, 2, 8, 8});
  torch::Tensor v_expected = torch::zeros({2, 2, 8, 8});
  posenc::ops::rotary_kv_cache_(q_expected, k, v, k_expected, v_expected, tables.cos, tables.sin,
                                seqlens, c10::nullopt, false, false, true);
  torch::Tensor q_run = q.clone();
  torch::Tensor k_cache = torch::zeros({2, 2, 8, 8});
  torch::Tensor v_cache = torch::zeros({2, 2, 8, 8});
  const posenc::ops::KvCacheCall call = posenc::ops::prepare_kv_cache_call(
      q_run, q_run, k, v, k_cache, v_cache, tables.cos, tables.sin, seqlens, c10::nullopt, false,
      true, c10::nullopt, 1.0);
  posenc::ops::kernels::run_kv_cache_grid(call, call.q, false, false, Emulate());
  EXPECT_TRUE(same_bits(q_run, q_expected));
  EXPECT_TRUE(same_bits(k_cache, k_expected));
  EXPECT_TRUE(same_bits(v_cache, v_expected));
}

// What the threads check of the slots a GPU call reads (the host reads none there): a slot past
// the cache and two tokens in one slot stop the distinct-slots check, which runs before the write;
// a slot past the cache stops the write's threads too, and the token's rows are never written
// (the threads check before they address the cache); a sequence whose tokens pass the end of a
// contiguous cache is stopped as well.
TEST(GridEmulation, KvCacheThreadsCheckSlotsBeforeWriting) {
  torch::manual_seed(13);
  PagedCase c(torch::kFloat);
  posenc::ops::KvCacheCall call = c.call(c.q);
  const auto expect_stop = [](const auto& run, const char* message) {
    try {
      run();
      ADD_FAILURE() << "no check stopped the call (" << message << ")";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  // (written after the host's checks: what a device-resident slot_mapping may hold)
  call.index = torch::tensor({3, -1, 9, 15, 0, 16});
  expect_stop([&] { posenc::ops::kernels::run_distinct_slots_check(call, Emulate()); },
              "a slot lies outside the cache");
  expect_stop(
      [&] {
        // one thread over the items in order: the bad token is the last, so every other token is
        // written before its check stops the grid; its slot (16) is the first row past the
        // cache's buffer, so a write there is a heap overflow that ASan (the sanitize flavour)
        // reports
        Emulate one;
        one.geometry = LaunchGeometry{1, 32};
        posenc::ops::kernels::run_kv_cache_grid(call, call.q, false, false, one);
      },
      "a slot lies outside the cache");
  call.index = torch::tensor({3, 7, 9, 15, 7, 6});
  expect_stop([&] { posenc::ops::kernels::run_distinct_slots_check(call, Emulate()); },
              "two tokens go to one slot");
  call.index = torch::tensor({3, 7, 9, 15, 2, 6}, torch::kInt);
  posenc::ops::kernels::run_distinct_slots_check(call, Emulate()); // distinct, int32: passes

  torch::Tensor q = torch::randn({2, 3, 4, 8});
  torch::Tensor k_cache = torch::zeros({2, 8, 2, 8});
  torch::Tensor v_cache = torch::zeros({2, 8, 2, 8});
  posenc::ops::KvCacheCall contiguous = posenc::ops::prepare_kv_cache_call(
      q, q, torch::randn({2, 3, 2, 8}), torch::randn({2, 3, 2, 8}), k_cache, v_cache,
      c.cos.narrow(1, 0, 4), c.sin.narrow(1, 0, 4), torch::tensor({0, 5}), c10::nullopt, false,
      false, c10::nullopt, 1.0);
  contiguous.index = torch::tensor({0, 6}); // 6 + 3 > 8 slots
  expect_stop([&] { posenc::ops::kernels::run_kv_cache_grid(contiguous, q, false, false, Emulate()); },
              "a sequence's new tokens lie outside the cache");
  EXPECT_EQ(k_cache[1].count_nonzero().item<int64_t>(), 0);
}
