// What the CUDA entry of each hand-written operator does before its launch — the shared
// backend_entries.h kernel with the shared prepare_* call — run on meta tensors (a device that
// holds no data, as a GPU's data is out of the host's reach): every form of call (offset,
// explicit positions, padding, positions past the table with the definition, floating-point
// positions, M-RoPE) is prepared without a single read from the device (no "posenc::host_read",
// no item()) and without error, the loop receiving tensors on that device. The device path's
// arithmetic (rows past a table computed where the positions lie) is checked on the CPU against
// the host path.

#include <posenc/posenc.h>

#include "detail/checks.h"
#include "detail/device_checks.h"
#include "detail/positions.h"
#include "detail/rotary.h"
#include "detail/sinusoidal.h"
#include "detail/vision.h"
#include "ops/common/backend_entries.h"
#include "ops/common/composite_kernels.h"
#include "ops/common/arguments.h"
#include "ops/rotary/composite_kernel.h"
#include "ops/sequence/composite_kernel.h"
#include "ops/token/backend_entries.h"
#include "test_util.h"

#include <ATen/ops/empty.h>
#ifdef POSENC_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif
#include <torch/torch.h>
#include <torch/version.h>

#include <gtest/gtest.h>

#include <functional>
#include <tuple>
#include <vector>

// The internal entry points these tests call (ops::prepare_*_call, detail::*) read the name of
// their caller from posenc's CallerScope, which the public entry points open; here, one scope
// for the whole program, on the thread that runs the tests, names them "test".
const posenc::detail::CallerScope kTestCaller("test");

namespace {

using posenc_test::HostReadCounter;

const torch::Device kMeta(torch::kMeta);

// The devices the loops received, so that the test sees what a launch would get.
std::vector<c10::Device>& seen() {
  static std::vector<c10::Device> devices;
  return devices;
}

void add_loop(const at::Tensor& x, at::Tensor& out, const posenc::ops::TableCall& call) {
  seen() = {x.device(), out.device(), call.kernel_table().device()};
  if (call.positions.defined()) {
    seen().push_back(call.positions.device());
  }
}

void rotary_loop(const at::Tensor& x, at::Tensor& out, const posenc::ops::RotaryCall& call, bool,
                 bool) {
  seen() = {x.device(), out.device(), call.kernel_cos().device(), call.kernel_sin().device()};
  if (call.positions.defined()) {
    seen().push_back(call.positions.device());
  }
}

void rotary_qk_loop(const posenc::ops::RotaryOperand& q, const posenc::ops::RotaryOperand& k,
                    const posenc::ops::RotaryQkCall& call, bool, bool) {
  seen() = {q.in.device(), q.out.device(), k.in.device(), k.out.device(),
            call.kernel_cos().device()};
}

void token_loop(const at::Tensor& tokens, const at::Tensor& weight, at::Tensor& out,
                at::Tensor& mask, const posenc::ops::TableCall& call, double, bool) {
  seen() = {tokens.device(), weight.device(), out.device(), mask.device(),
            call.kernel_table().device()};
}

at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return at::empty(sizes, options);
}

torch::TensorOptions meta(torch::Dtype dtype) {
  return torch::TensorOptions().dtype(dtype).device(kMeta);
}

// Runs `call` with a host-read counter and expects no read, no error, and every tensor the loop
// got on the meta device.
void expect_device_resident(const std::string& what, const std::function<void()>& call) {
  seen().clear();
  const HostReadCounter counter;
  const std::string error = posenc_test::error_message(call);
  EXPECT_EQ(error, "<no error>") << what;
  EXPECT_EQ(HostReadCounter::reads(), 0) << what;
  EXPECT_EQ(HostReadCounter::items(), 0) << what;
  EXPECT_EQ(HostReadCounter::uploads(), 0) << what << ": a copy from the host";
  EXPECT_FALSE(seen().empty()) << what << ": the loop was not reached";
  for (const c10::Device& device : seen()) {
    EXPECT_EQ(device, kMeta) << what;
  }
}

} // namespace

TEST(DeviceEntry, AddPositionTablePreparesWithoutReadingTheDevice) {
  using namespace posenc::ops;
  const at::Tensor table = torch::empty({16, 8}, meta(torch::kFloat));
  const at::Tensor columns = torch::empty({2, 8}, meta(torch::kDouble));
  at::Tensor x = torch::empty({2, 5, 8}, meta(torch::kBFloat16));
  const at::Tensor shared = torch::empty({5}, meta(torch::kLong));
  const at::Tensor each = torch::empty({2, 5}, meta(torch::kInt));
  const at::Tensor fractional = torch::empty({2, 5}, meta(torch::kDouble));
  const auto add = add_position_table_kernel<add_loop, empty>;
  expect_device_resident("offset",
                         [&] { add(x, table, 3, true, c10::nullopt, 1.0, c10::nullopt); });
  expect_device_resident("[L]", [&] { add(x, table, 0, true, shared, 1.0, c10::nullopt); });
  expect_device_resident("[B, L]", [&] { add(x, table, 0, true, each, 0.5, c10::nullopt); });
  expect_device_resident("past, columns", [&] { add(x, table, 0, true, each, 1.0, columns); });
  expect_device_resident("offset past, columns",
                         [&] { add(x, table, 40, true, c10::nullopt, 1.0, columns); });
  expect_device_resident("fractional", [&] { add(x, table, 0, true, fractional, 1.0, columns); });
  expect_device_resident("in place", [&] {
    add_position_table_inplace_kernel<add_loop, empty>(x, table, 0, true, each, 1.0, columns);
  });
  at::Tensor out = torch::empty({0}, meta(torch::kBFloat16));
  expect_device_resident("out", [&] {
    add_position_table_out_kernel<add_loop, empty>(x, table, 0, true, each, 1.0, c10::nullopt, out);
  });
}

TEST(DeviceEntry, RotaryPreparesWithoutReadingTheDevice) {
  using namespace posenc::ops;
  const at::Tensor cos = torch::empty({16, 4}, meta(torch::kFloat));
  const at::Tensor sin = torch::empty({16, 4}, meta(torch::kFloat));
  const at::Tensor inv_freq = torch::empty({4}, meta(torch::kDouble));
  at::Tensor q = torch::empty({2, 5, 4, 10}, meta(torch::kHalf));
  at::Tensor k = torch::empty({2, 5, 2, 10}, meta(torch::kHalf));
  const at::Tensor each = torch::empty({2, 5}, meta(torch::kLong));
  const at::Tensor fractional = torch::empty({5}, meta(torch::kFloat));
  const auto rotary = apply_rotary_kernel<rotary_loop, empty>;
  expect_device_resident("offset", [&] {
    rotary(q, cos, sin, 2, c10::nullopt, false, false, false, c10::nullopt, 1.0);
  });
  expect_device_resident(
      "[B, L]", [&] { rotary(q, cos, sin, 0, each, true, false, false, c10::nullopt, 1.0); });
  expect_device_resident("past, inv_freq",
                         [&] { rotary(q, cos, sin, 0, each, false, false, true, inv_freq, 1.5); });
  expect_device_resident("offset past, inv_freq", [&] {
    rotary(q, cos, sin, 30, c10::nullopt, false, false, false, inv_freq, 1.0);
  });
  expect_device_resident("fractional", [&] {
    rotary(q, cos, sin, 0, fractional, false, false, false, inv_freq, 1.0);
  });
  expect_device_resident("in place", [&] {
    apply_rotary_inplace_kernel<rotary_loop, empty>(q, cos, sin, 0, each, false, false, false,
                                                    inv_freq, 1.0);
  });
  expect_device_resident("q+k", [&] {
    apply_rotary_qk_kernel<rotary_qk_loop, empty>(q, k, cos, sin, 0, each, false, false, false,
                                                  c10::nullopt, 1.0);
  });
  expect_device_resident("q+k in place, past", [&] {
    apply_rotary_qk_inplace_kernel<rotary_qk_loop, empty>(q, k, cos, sin, 0, each, false, false,
                                                          false, inv_freq, 1.0);
  });
}

TEST(DeviceEntry, TokenAndPositionPreparesWithoutReadingTheDevice) {
  using namespace posenc::ops;
  const at::Tensor tokens = torch::empty({2, 5}, meta(torch::kLong));
  const at::Tensor weight = torch::empty({30, 8}, meta(torch::kFloat));
  const at::Tensor table = torch::empty({16, 8}, meta(torch::kFloat));
  const at::Tensor columns = torch::empty({2, 8}, meta(torch::kDouble));
  const at::Tensor each = torch::empty({2, 5}, meta(torch::kLong));
  const auto token = token_and_position_embedding_kernel<token_loop, empty>;
  expect_device_resident("offset", [&] {
    token(tokens, weight, table, 1, true, c10::nullopt, 1.0, -1, 0.1, true, c10::nullopt);
  });
  expect_device_resident("[B, L]", [&] {
    token(tokens, weight, table, 0, true, each, 2.0, 0, 0.0, false, c10::nullopt);
  });
  expect_device_resident("past, columns", [&] {
    token(tokens, weight, table, 0, true, each, 1.0, -1, 0.0, false, columns);
  });
}

TEST(DeviceEntry, MultimodalTablesPrepareWithoutReadingTheDevice) {
  const at::Tensor cos = torch::empty({16, 8}, meta(torch::kFloat));
  const at::Tensor sin = torch::empty({16, 8}, meta(torch::kFloat));
  const at::Tensor positions = torch::empty({3, 2, 5}, meta(torch::kLong));
  const at::Tensor inv_freq = torch::empty({8}, meta(torch::kDouble));
  for (const bool with_inv_freq : {false, true}) {
    const HostReadCounter counter;
    posenc::ops::MultimodalTablesCall call;
    const std::string error = posenc_test::error_message([&] {
      call = posenc::ops::prepare_multimodal_tables_call(
          cos, sin, positions, {2, 3, 3}, false,
          with_inv_freq ? c10::optional<at::Tensor>(inv_freq) : c10::nullopt, 1.0);
    });
    EXPECT_EQ(error, "<no error>");
    EXPECT_EQ(HostReadCounter::reads(), 0);
    EXPECT_EQ(HostReadCounter::items(), 0);
    EXPECT_EQ(HostReadCounter::uploads(), 0);
    EXPECT_FALSE(call.host_positions.defined());
    EXPECT_EQ(call.inv_freq.defined(), with_inv_freq);
  }
}

// The device path's rows, computed on the CPU: the caches' own rows inside them, and within one
// float32 ulp of the host path's rows past them (at::cos/at::sin against libm's cos/sin in
// float64: both within an ulp or two of the exact angle's float64 value, so their float32
// roundings agree but for the rare value that lies that close to a rounding boundary).
TEST(DeviceEntry, RowsComputedWherePositionsLieMatchTheHostPath) {
  const at::Tensor inv_freq = at::pow(10000.0, -at::arange(0, 16, 2, torch::kDouble) / 16.0);
  at::Tensor cos;
  at::Tensor sin;
  std::tie(cos, sin) = posenc::ops::rotary_tables(32, inv_freq, 1.25);
  const at::Tensor positions = torch::tensor({{0, 5, -1, 31}, {32, 100, 7, 4000}}, torch::kLong);
  at::Tensor device_cos;
  at::Tensor device_sin;
  std::tie(device_cos, device_sin) =
      posenc::ops::rotary_rows_on_device(cos, sin, positions, inv_freq, 1.25);
  at::Tensor host_cos;
  at::Tensor host_sin;
  std::tie(host_cos, host_sin) = posenc::ops::rotary_tables(4001, inv_freq, 1.25);
  const at::Tensor flat = positions.reshape({-1});
  for (int64_t i = 0; i < flat.numel(); ++i) {
    const int64_t p = flat[i].item<int64_t>();
    if (p < 0) {
      continue; // padding: never read
    }
    if (p < 32) {
      EXPECT_TRUE(torch::equal(device_cos[i], cos[p])) << p;
      EXPECT_TRUE(torch::equal(device_sin[i], sin[p])) << p;
    } else {
      const double ulp = 1.25 * std::ldexp(1.0, -23);
      EXPECT_LE((device_cos[i] - host_cos[p]).abs().max().item<float>(), ulp) << p;
      EXPECT_LE((device_sin[i] - host_sin[p]).abs().max().item<float>(), ulp) << p;
    }
  }
}

// The frequencies of a dynamic / LongRoPE call chosen where its positions lie (no read: the
// module's path for device positions) against the host's choice by the call's end, on the CPU:
// LongRoPE selects one of two host-computed sets (exact); dynamic NTK rescales the frequencies by
// ATen's pow of the length ratio, within 8 ulp of float64 of the host's formula (the float32
// rotation they give differs by at most one rounding, checked by test_fake_devices.py against the
// module's own CPU path).
TEST(DeviceEntry, CallFrequenciesFromPositionsMatchTheHostChoice) {
  using posenc::RopeScalingOptions;
  using posenc::RopeType;
  for (const RopeScalingOptions& scaling :
       {RopeScalingOptions(RopeType::kDynamic).factor(3.0).max_position_embeddings(16),
        RopeScalingOptions(RopeType::kLongRope)
            .original_max_position_embeddings(16)
            .max_position_embeddings(64)
            .short_factor({1.0, 1.5, 2.0, 2.5})
            .long_factor({4.0, 5.0, 6.0, 7.0})}) {
    const auto options = posenc::RotaryEmbeddingOptions(8, 64).scaling(scaling).freq_factors(
        {1.0, 2.0, 1.0, 0.5});
    const posenc::detail::RopeSpec spec = posenc::detail::rope_spec(options);
    const auto host_frequencies = [&](c10::optional<int64_t> seq_len) {
      return torch::tensor(posenc::detail::rope_frequencies(spec, seq_len).inv_freq,
                           torch::kDouble);
    };
    const at::Tensor own = scaling.type() == RopeType::kLongRope
                               ? torch::stack({host_frequencies(c10::nullopt), host_frequencies(17)})
                               : host_frequencies(c10::nullopt);
    for (const int64_t end : {1, 5, 16, 17, 20, 64, 100000}) {
      const at::Tensor expected =
          torch::tensor(posenc::detail::rope_frequencies(spec, end).inv_freq, torch::kDouble);
      const at::Tensor with_padding = torch::tensor({int64_t{-1}, end - 1, int64_t{0}}, torch::kLong);
      const at::Tensor fractional = torch::tensor({0.25, static_cast<double>(end) - 0.5});
      for (const at::Tensor& positions : {with_padding, fractional}) {
        const at::Tensor got = posenc::detail::rope_frequencies_at(spec, own, positions);
        ASSERT_EQ(got.scalar_type(), torch::kDouble);
        if (scaling.type() == RopeType::kLongRope) {
          EXPECT_TRUE(torch::equal(got, expected)) << end;
        } else {
          EXPECT_TRUE(torch::allclose(got, expected, 8 * std::ldexp(1.0, -52), 0.0)) << end;
        }
      }
    }
    // Empty positions: the frequencies of the caches.
    EXPECT_TRUE(torch::equal(
        posenc::detail::rope_frequencies_at(spec, own, torch::empty({0}, torch::kLong)),
        host_frequencies(c10::nullopt)));
    // Frequencies on another device than the positions: refused.
    EXPECT_NE(posenc_test::error_message([&] {
                posenc::detail::rope_frequencies_at(
                    spec, own,
                    torch::empty({2}, torch::TensorOptions().dtype(torch::kLong).device(kMeta)));
              }).find("expected the frequencies on the device of the positions (meta)"),
              std::string::npos);
    // On meta: computed there, nothing read (and nothing copied from the host).
    const at::Tensor own_on_meta = own.to(kMeta);
    const HostReadCounter counter;
    const at::Tensor on_meta = posenc::detail::rope_frequencies_at(
        spec, own_on_meta,
        torch::empty({2, 5}, torch::TensorOptions().dtype(torch::kLong).device(kMeta)));
    EXPECT_EQ(on_meta.device(), kMeta);
    EXPECT_EQ(on_meta.sizes(), at::IntArrayRef({4}));
    EXPECT_EQ(HostReadCounter::reads() + HostReadCounter::items(), 0);
    EXPECT_EQ(HostReadCounter::uploads(), 0);
  }
}

// The calls whose values the host makes from their arguments (frequencies, a column plan, an M-RoPE
// axis map, grid coordinates) place them on the device without copying from host memory
// (detail::upload), and every other call on device tensors makes what it needs there: on meta
// (what a CUDA call runs, but for the kernels), no "aten::_to_copy"/"aten::copy_" from the CPU,
// no read, and outputs on meta. The code a CUDA call runs is called directly (the composite
// kernels, the detail functions): the operators' Meta kernels, which a meta call of the operator
// would run instead, compute nothing. (The counter sees the copies the other tests of this file
// and device_test.cpp would make too: they expect none.)
TEST(DeviceEntry, CallsOnADeviceCopyNothingFromTheHost) {
  const auto run = [](const std::string& what, const std::function<std::vector<at::Tensor>()>& call) {
    const HostReadCounter counter;
    std::vector<at::Tensor> outputs;
    const std::string error = posenc_test::error_message([&] { outputs = call(); });
    if (TORCH_VERSION_MAJOR < 2 &&
        error.find("with arguments from the 'AutogradMeta' backend") != std::string::npos) {
      // LibTorch 1.13 has no AutogradMeta fallthrough: posenc operators without an autograd
      // kernel cannot run on meta there (device_test.cpp skips those cases too)
      return;
    }
    EXPECT_EQ(error, "<no error>") << what;
    EXPECT_EQ(HostReadCounter::uploads(), 0) << what << ": a copy from the host";
    EXPECT_EQ(HostReadCounter::reads() + HostReadCounter::items(), 0) << what << ": a read";
    for (const at::Tensor& out : outputs) {
      EXPECT_EQ(out.device(), kMeta) << what;
    }
  };
  const posenc::detail::SinusoidSpec spec{10, 10000.0, posenc::ChannelLayout::kInterleaved,
                                          posenc::FrequencySpacing::kPaper};
  const at::Tensor long_positions = torch::empty({2, 5}, meta(torch::kLong));
  const at::Tensor float_positions = torch::empty({5}, meta(torch::kDouble));
  run("sinusoidal_rows", [&] {
    return std::vector<at::Tensor>{
        posenc::detail::sinusoidal_rows(long_positions, posenc::detail::column_plan(spec),
                                        torch::kFloat),
        posenc::detail::sinusoidal_rows(float_positions, posenc::detail::column_plan(spec),
                                        torch::kFloat)};
  });
  const at::Tensor x = torch::empty({2, 5, 10}, meta(torch::kFloat));
  run("add_positional_encoding with positions (composite kernel)", [&] {
    return std::vector<at::Tensor>{posenc::ops::composite::add_positional_encoding(
        x, 0, 10000.0, true, long_positions, 1.0, "interleaved", "paper")};
  });
  run("add_positional_encoding with an offset (composite kernel)", [&] {
    return std::vector<at::Tensor>{posenc::ops::composite::add_positional_encoding(
        x, 7, 10000.0, false, c10::nullopt, 2.0, "concatenated", "tensor2tensor")};
  });
  const posenc::detail::RopeSpec rope = posenc::detail::rope_spec(
      posenc::RotaryEmbeddingOptions(8, 64).scaling(
          posenc::RopeScalingOptions(posenc::RopeType::kLongRope)
              .original_max_position_embeddings(16)
              .short_factor({1.0, 1.5, 2.0, 2.5})
              .long_factor({4.0, 5.0, 6.0, 7.0})));
  run("rotary_rows", [&] {
    const auto rows = posenc::detail::rotary_rows(
        long_positions, posenc::detail::rope_frequencies(rope, c10::nullopt), torch::kFloat);
    return std::vector<at::Tensor>{rows.first, rows.second};
  });
  for (const char* type : {"dynamic", "longrope"}) {
    posenc::ops::RopeFrequenciesArguments arguments;
    arguments.rotary_dim = 8;
    arguments.scaling = std::string(type) == "dynamic"
                            ? posenc::RopeScalingOptions(posenc::RopeType::kDynamic)
                                  .factor(2.0)
                                  .max_position_embeddings(16)
                            : rope.scaling;
    arguments.positions = long_positions;
    run(std::string("rope_frequencies(positions) ") + type, [&] {
      return std::vector<at::Tensor>{std::get<0>(posenc::ops::rope_frequencies(arguments))};
    });
    arguments.positions = at::Tensor();
    arguments.seq_len = 40;
    arguments.device = kMeta;
    run(std::string("rope_frequencies(seq_len, device) ") + type, [&] {
      return std::vector<at::Tensor>{std::get<0>(posenc::ops::rope_frequencies(arguments))};
    });
  }
  run("multimodal_rotary_tables (composite kernel)", [&] {
    const auto rows = posenc::ops::composite::multimodal_rotary_tables(
        torch::empty({16, 4}, meta(torch::kFloat)), torch::empty({16, 4}, meta(torch::kFloat)),
        torch::empty({3, 2, 5}, meta(torch::kLong)), {1, 1, 2}, true, c10::nullopt, 1.0);
    return std::vector<at::Tensor>{std::get<0>(rows), std::get<1>(rows)};
  });
  run("timestep_embedding (detail)", [&] {
    posenc::detail::TimestepSpec timesteps;
    timesteps.embedding_dim = 33;
    return std::vector<at::Tensor>{posenc::detail::timestep_embedding(
        torch::empty({4}, meta(torch::kFloat)), timesteps, torch::kFloat)};
  });
  run("grid_ids (composite kernel) and axial_rotary_tables (detail)", [&] {
    const at::Tensor ids =
        posenc::ops::grid_ids({3, 4}, {6, 8}, 0.5, "xy", torch::kDouble, kMeta);
    const auto tables = posenc::detail::axial_rotary_tables(ids, {8, 8}, 10000.0, torch::kFloat);
    return std::vector<at::Tensor>{ids, tables.first, tables.second};
  });
  // (relative_position_bias makes its distances with at::arange on the weight's device and
  // buckets them there; its at::embedding and flip have no C++ Meta kernels: device_test marks it)
  run("rotary_tables with frequencies on the device (composite kernel)", [&] {
    const auto tables = posenc::ops::composite::rotary_tables(
        16, torch::empty({4}, meta(torch::kDouble)), 1.0, c10::nullopt, c10::nullopt);
    return std::vector<at::Tensor>{std::get<0>(tables), std::get<1>(tables)};
  });
}

// detail::upload: the host's values, bit for bit, where the CUDA kernels would write them; on the
// CPU the tensor itself, on meta an empty tensor of its shape and dtype. (The CUDA path's thread
// body runs in grid_emulation_test.cpp; DeviceEntry.UploadIsExactOnTheGpu_CUDA runs it there.)
TEST(DeviceEntry, UploadKeepsShapeAndDtype) {
  const at::Tensor host = torch::arange(12, torch::kDouble).view({3, 4});
  EXPECT_TRUE(posenc::detail::upload(host, torch::Device(torch::kCPU)).is_same(host));
  const at::Tensor placed = posenc::detail::upload(host, kMeta);
  EXPECT_EQ(placed.device(), kMeta);
  EXPECT_EQ(placed.sizes(), host.sizes());
  EXPECT_EQ(placed.scalar_type(), torch::kDouble);
  EXPECT_POSENC_ERROR(posenc::detail::upload(placed, kMeta), "expects a CPU tensor");
}

// The tensor form of the sinusoidal rows (used where positions lie on a device) against the host
// form, on the CPU: within one float32 ulp (see the rotary case above), padding rows zero.
TEST(DeviceEntry, SinusoidalRowsFromTensorsMatchTheHostRows) {
  const posenc::detail::SinusoidSpec spec{10, 10000.0, posenc::ChannelLayout::kInterleaved,
                                          posenc::FrequencySpacing::kPaper};
  const posenc::detail::ColumnPlan plan = posenc::detail::column_plan(spec);
  for (const torch::Tensor& positions : {torch::tensor({0, 3, -1, 70000}, torch::kLong),
                                         torch::tensor({0.5, 2.25, 1e6}, torch::kDouble)}) {
    const at::Tensor host = posenc::detail::sinusoidal_rows(positions, plan, torch::kFloat);
    const at::Tensor from = posenc::detail::sinusoidal_rows_from(
        positions, posenc::detail::column_plan_tensor(spec), torch::kFloat);
    EXPECT_LE((host - from).abs().max().item<float>(), std::ldexp(1.0, -24));
    if (positions.scalar_type() == torch::kLong) {
      EXPECT_TRUE(torch::equal(from[2], torch::zeros({10})));
    }
  }
}

// packed_positions' tensor form (used where cu_seqlens lie on a device) equals the host form, and
// its checks hold the host form's conditions (here on the CPU, where check_on_device reads).
TEST(DeviceEntry, PackedPositionsFromTensorsMatchTheHostForm) {
  const std::vector<int64_t> cu = {0, 3, 3, 7, 8};
  const std::vector<int64_t> start = {5, 0, 2, 9};
  for (const bool with_start : {false, true}) {
    const std::vector<int64_t> host =
        posenc::detail::packed_positions(cu, 8, with_start ? start : std::vector<int64_t>());
    const at::Tensor from = posenc::detail::packed_positions_from(
        torch::tensor(cu, torch::kInt), 8,
        with_start ? torch::tensor(start, torch::kLong) : at::Tensor());
    EXPECT_TRUE(torch::equal(from, torch::tensor(host, torch::kLong))) << from;
  }
  for (const auto& bad : {std::vector<int64_t>{1, 3, 8}, std::vector<int64_t>{0, 5, 3, 8},
                          std::vector<int64_t>{0, 3, 7}}) {
    EXPECT_POSENC_ERROR(
        posenc::detail::packed_positions_from(torch::tensor(bad, torch::kLong), 8, at::Tensor()),
        "cu_seqlens must start at 0, never decrease and end at total");
  }
  EXPECT_POSENC_ERROR(
      posenc::detail::packed_positions_from(torch::tensor(cu, torch::kLong), 8,
                                            torch::tensor({1, -2, 0, 0}, torch::kLong)),
      "start_positions be >= 0");
}

// context_parallel_packed_positions' tensor form (used where cu_seqlens lie on a device) equals
// the host form, and its checks hold the host form's conditions.
TEST(DeviceEntry, PackedContextParallelFromTensorsMatchesTheHostForm) {
  const std::vector<int64_t> cu = {0, 8, 8, 16, 40};
  for (const bool zigzag : {false, true}) {
    for (const int64_t world : {1, 2, 4}) {
      for (int64_t rank = 0; rank < world; ++rank) {
        const posenc::detail::PackedShard host =
            posenc::detail::context_parallel_packed_positions(cu, 40, world, rank, zigzag);
        const auto from = posenc::detail::context_parallel_packed_positions_from(
            torch::tensor(cu, torch::kInt), 40, world, rank, zigzag);
        EXPECT_TRUE(torch::equal(from.first, torch::tensor(host.positions, torch::kLong)))
            << from.first;
        EXPECT_TRUE(torch::equal(from.second, torch::tensor(host.indices, torch::kLong)))
            << from.second;
      }
    }
  }
  for (const auto& bad : {std::vector<int64_t>{2, 4, 8}, std::vector<int64_t>{0, 6, 4, 8},
                          std::vector<int64_t>{0, 4, 6}, std::vector<int64_t>{0, 2, 8}}) {
    EXPECT_POSENC_ERROR(posenc::detail::context_parallel_packed_positions_from(
                            torch::tensor(bad, torch::kLong), 8, 2, 0, true),
                        "every sequence's length be a multiple of the chunks");
  }
}

namespace {
// A GPU module's output against the CPU module's (values of magnitude a few units: 1e-6 is a few
// float32 ulp).
bool close_to_cpu(const torch::Tensor& got, const torch::Tensor& expected) {
  return torch::allclose(got.cpu(), expected, /*rtol=*/0.0, /*atol=*/1e-6);
}
} // namespace

// After to(kCUDA), the modules compute from their definition (columns, frequencies) on the GPU:
// it moves with the tables. Within one ulp of float32 of the CPU module (rows past the table come
// from CUDA's float64 sin/cos there, libm's here). Runs under scripts/gpu_check.sh.
TEST(DeviceEntry, ModulesComputeFromTheirDefinitionOnTheGpu_CUDA) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device";
  }
  const torch::Device cuda(torch::kCUDA);
  posenc::PositionalEncoding pe(
      posenc::PositionalEncodingOptions(8, 16).beyond_max_len(posenc::BeyondMaxLen::kExtrapolate));
  const torch::Tensor x = torch::randn({2, 5, 8});
  const torch::Tensor fractional = torch::tensor({0.5, 3.25, 20.0, 5.0, 40.75}, torch::kDouble);
  const torch::Tensor pe_offset = pe(x, 14);
  const torch::Tensor pe_fractional = pe->forward_positions(x, fractional);
  pe->to(cuda);
  EXPECT_TRUE(close_to_cpu(pe(x.to(cuda), 14), pe_offset));
  EXPECT_TRUE(close_to_cpu(pe->forward_positions(x.to(cuda), fractional.to(cuda)), pe_fractional));

  posenc::RotaryEmbedding rope(posenc::RotaryEmbeddingOptions(8, 16).beyond_max_len(
      posenc::BeyondMaxLen::kExtrapolate));
  const torch::Tensor q = torch::randn({2, 5, 3, 8});
  const torch::Tensor rope_offset = rope(q, 14);
  const torch::Tensor rope_fractional = rope->forward_positions(q, fractional);
  rope->to(cuda);
  EXPECT_TRUE(close_to_cpu(rope(q.to(cuda), 14), rope_offset));
  EXPECT_TRUE(close_to_cpu(rope->forward_positions(q.to(cuda), fractional.to(cuda)), rope_fractional));

  posenc::TokenAndPositionEmbedding embed(posenc::TokenAndPositionEmbeddingOptions(30, 8, 16)
                                              .beyond_max_len(posenc::BeyondMaxLen::kExtrapolate));
  const torch::Tensor ids = torch::randint(0, 30, {2, 5}, torch::kLong);
  const torch::Tensor embed_offset = embed(ids, 14);
  embed->to(cuda);
  EXPECT_TRUE(close_to_cpu(embed(ids.to(cuda), 14), embed_offset));
}

// dynamic / LongRoPE with explicit positions: on the GPU the call's frequencies are chosen where
// the positions lie (no read back, no copy from the host); the outputs equal the CPU path's (a host
// read of the call's end) within one float32 rounding of the values, for padding, positions past
// the switch length, fractional positions and q+k.
TEST(DeviceEntry, SwitchingRopeTypesChooseOnTheGpu_CUDA) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device";
  }
  const torch::Device cuda(torch::kCUDA);
  using posenc::RopeScalingOptions;
  using posenc::RopeType;
  for (const RopeScalingOptions& scaling :
       {RopeScalingOptions(RopeType::kDynamic).factor(2.0).max_position_embeddings(16),
        RopeScalingOptions(RopeType::kLongRope)
            .original_max_position_embeddings(16)
            .short_factor({1.0, 1.0, 1.0, 1.0})
            .long_factor({2.0, 3.0, 4.0, 5.0})}) {
    posenc::RotaryEmbedding rope(posenc::RotaryEmbeddingOptions(8, 32).scaling(scaling));
    const torch::Tensor q = torch::randn({2, 5, 4, 8});
    const torch::Tensor k = torch::randn({2, 5, 2, 8});
    const std::vector<torch::Tensor> positions = {
        torch::tensor({0, 3, -1, 5, 6, 1, 2, 3, 4, -1}, torch::kLong).view({2, 5}),
        torch::tensor({0, 3, -1, 25, 6, 1, 2, 3, 31, -1}, torch::kLong).view({2, 5}),
        torch::tensor({0.5, 3.25, 20.0, 5.0, 40.75}, torch::kDouble)};
    std::vector<torch::Tensor> expected;
    for (const torch::Tensor& p : positions) {
      expected.push_back(rope->forward_positions(q, p));
    }
    const auto both = rope->forward_qk_positions(q, k, positions[1]);
    rope->to(cuda);
    for (size_t i = 0; i < positions.size(); ++i) {
      EXPECT_TRUE(close_to_cpu(rope->forward_positions(q.to(cuda), positions[i].to(cuda)), expected[i]))
          << scaling.type() << " " << i;
    }
    const auto got = rope->forward_qk_positions(q.to(cuda), k.to(cuda), positions[1].to(cuda));
    EXPECT_TRUE(close_to_cpu(std::get<0>(got), std::get<0>(both)));
    EXPECT_TRUE(close_to_cpu(std::get<1>(got), std::get<1>(both)));
  }
}

// detail::upload on a GPU: every byte where the host had it, across the chunks of one launch each
// (ops/common/upload.h), on the current stream, for a capture-safe path. Runs under
// scripts/gpu_check.sh.
TEST(DeviceEntry, UploadIsExactOnTheGpu_CUDA) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device";
  }
  const torch::Device cuda(torch::kCUDA);
  for (const int64_t count : {int64_t{1}, int64_t{495}, int64_t{496}, int64_t{497}, int64_t{5000}}) {
    const at::Tensor host = torch::randn({count}, torch::kDouble);
    EXPECT_TRUE(torch::equal(posenc::detail::upload(host, cuda).cpu(), host)) << count;
  }
  const at::Tensor axes = torch::tensor({0, 2, 1, 1, 2, 0}, torch::kLong);
  EXPECT_TRUE(torch::equal(posenc::detail::upload(axes, cuda).cpu(), axes));
}

#ifdef POSENC_WITH_CUDA
// Every module forward that runs on CUDA tensors without waiting for the device can be captured in
// a CUDA graph (a copy from pageable host memory or a read back fails the capture): each call is
// run once, captured on a side stream, replayed, and its replay compared with the eager result,
// bit for bit (the same kernels). Runs under scripts/gpu_check.sh.
TEST(DeviceEntry, ModuleForwardsCaptureInACudaGraph_CUDA) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device";
  }
  const torch::Device cuda(torch::kCUDA);
  const auto captures = [&](const std::string& what, const std::function<at::Tensor()>& call) {
    const at::cuda::CUDAStream side = at::cuda::getStreamFromPool();
    at::cuda::CUDAGraph graph;
    at::Tensor eager;
    at::Tensor captured;
    const std::string error = posenc_test::error_message([&] {
      const c10::cuda::CUDAStreamGuard guard(side);
      eager = call().clone();
      graph.capture_begin();
      captured = call();
      graph.capture_end();
    });
    ASSERT_EQ(error, "<no error>") << what;
    graph.replay();
    torch::cuda::synchronize();
    EXPECT_TRUE(torch::equal(captured, eager)) << what;
  };
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({2, 5, 8}, cuda);
  const torch::Tensor positions = torch::tensor({{0, 3, -1, 5, 6}, {1, 2, 3, 4, -1}}, cuda);
  posenc::PositionalEncoding pe(
      posenc::PositionalEncodingOptions(8, 16).beyond_max_len(posenc::BeyondMaxLen::kExtrapolate));
  pe->to(cuda);
  captures("PositionalEncoding offset", [&] { return pe(x, 3); });
  captures("PositionalEncoding past the table", [&] { return pe(x, 14); });
  captures("PositionalEncoding positions", [&] { return pe->forward_positions(x, positions); });
  posenc::TokenAndPositionEmbedding embed(30, 8, 16);
  embed->to(cuda);
  const torch::Tensor ids = torch::randint(0, 30, {2, 5}, torch::TensorOptions(cuda).dtype(torch::kLong));
  captures("TokenAndPositionEmbedding", [&] { return embed->forward_positions(ids, positions); });
  for (const posenc::RopeScalingOptions& scaling :
       {posenc::RopeScalingOptions(), posenc::RopeScalingOptions(posenc::RopeType::kDynamic)
                                          .factor(2.0)
                                          .max_position_embeddings(16)}) {
    posenc::RotaryEmbedding rope(posenc::RotaryEmbeddingOptions(8, 32).scaling(scaling));
    rope->to(cuda);
    const torch::Tensor q = torch::randn({2, 5, 4, 8}, cuda);
    const torch::Tensor k = torch::randn({2, 5, 2, 8}, cuda);
    captures("RotaryEmbedding offset past the switch", [&] { return rope(q, 20); });
    captures("RotaryEmbedding positions", [&] {
      return std::get<0>(rope->forward_qk_positions(q, k, positions));
    });
  }
  posenc::TimestepEmbedder timesteps(posenc::TimestepEmbedderOptions(32));
  timesteps->to(cuda);
  const torch::Tensor steps = torch::rand({4}, cuda) * 1000;
  captures("TimestepEmbedder", [&] { return timesteps(steps); });
  posenc::VisionRotaryEmbedding vision(posenc::VisionRotaryEmbeddingOptions(16).ref_feat_shape({4, 4}));
  const torch::Tensor patches = torch::randn({2, 3, 1 + 6 * 6, 16}, cuda);
  captures("VisionRotaryEmbedding", [&] { return vision->forward(patches, {6, 6}); });
  posenc::RelativePositionBias t5(posenc::RelativePositionBiasOptions(4));
  t5->to(cuda);
  captures("RelativePositionBias", [&] { return t5(5, 7); });
  posenc::ALiBi alibi(8);
  alibi->to(cuda);
  captures("ALiBi", [&] { return alibi(5, 7, c10::nullopt, true); });
}

// The fused KV-cache write on CUDA gives the CPU's queries and caches bit for bit (the same
// arithmetic: the thread bodies of src/ops/kv_cache/kernels.h, nvcc -fmad=false), for a paged
// and a contiguous cache, every dtype, both pairings, GQA, partial rotary, padding slots and
// positions, int32 and int64 indices. Runs under scripts/gpu_check.sh (and compute-sanitizer).
TEST(DeviceEntry, KvCacheWriteEqualsTheCpu_CUDA) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device";
  }
  const torch::Device cuda(torch::kCUDA);
  torch::manual_seed(31);
  const auto angles = torch::arange(64, torch::kDouble).unsqueeze(1) *
                      torch::pow(10000.0, -torch::arange(0, 8, 2, torch::kDouble) / 8.0);
  const torch::Tensor cos = angles.cos().to(torch::kFloat);
  const torch::Tensor sin = angles.sin().to(torch::kFloat);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf, torch::kDouble}) {
    for (const bool interleaved : {false, true}) {
      for (const auto index : {torch::kInt, torch::kLong}) {
        const auto opts = torch::TensorOptions().dtype(dtype);
        torch::Tensor q = torch::randn({7, 4, 12}, opts);
        const torch::Tensor k = torch::randn({7, 2, 12}, opts);
        const torch::Tensor v = torch::randn({7, 2, 16}, opts);
        torch::Tensor k_cache = torch::randn({4, 4, 2, 12}, opts);
        torch::Tensor v_cache = torch::randn({4, 4, 2, 16}, opts);
        const torch::Tensor positions = torch::tensor({0, 5, -1, 17, 3, 63, 9});
        const torch::Tensor slots = torch::tensor({3, -1, 9, 15, 0, 6, 12}, index);
        torch::Tensor q_gpu = q.to(cuda);
        torch::Tensor k_cache_gpu = k_cache.to(cuda);
        torch::Tensor v_cache_gpu = v_cache.to(cuda);
        posenc::ops::rotary_paged_kv_cache_(q, k, v, k_cache, v_cache, cos, sin, positions, slots,
                                            interleaved);
        posenc::ops::rotary_paged_kv_cache_(q_gpu, k.to(cuda), v.to(cuda), k_cache_gpu,
                                            v_cache_gpu, cos.to(cuda), sin.to(cuda),
                                            positions.to(cuda), slots.to(cuda), interleaved);
        EXPECT_TRUE(torch::equal(q_gpu.cpu(), q)) << c10::toString(dtype);
        EXPECT_TRUE(torch::equal(k_cache_gpu.cpu(), k_cache)) << c10::toString(dtype);
        EXPECT_TRUE(torch::equal(v_cache_gpu.cpu(), v_cache)) << c10::toString(dtype);
        // contiguous, heads-first caches, q out of place
        const torch::Tensor q4 = torch::randn({2, 3, 4, 12}, opts);
        const torch::Tensor k4 = torch::randn({2, 3, 2, 12}, opts);
        const torch::Tensor v4 = torch::randn({2, 3, 2, 16}, opts);
        torch::Tensor kc = torch::zeros({2, 2, 8, 12}, opts);
        torch::Tensor vc = torch::zeros({2, 2, 8, 16}, opts);
        torch::Tensor kc_gpu = kc.to(cuda);
        torch::Tensor vc_gpu = vc.to(cuda);
        const torch::Tensor seqlens = torch::tensor({5, 0}, index);
        const torch::Tensor expected = posenc::ops::rotary_kv_cache(
            q4, k4, v4, kc, vc, cos, sin, seqlens, c10::nullopt, interleaved, false, true);
        const torch::Tensor actual = posenc::ops::rotary_kv_cache(
            q4.to(cuda), k4.to(cuda), v4.to(cuda), kc_gpu, vc_gpu, cos.to(cuda), sin.to(cuda),
            seqlens.to(cuda), c10::nullopt, interleaved, false, true);
        EXPECT_TRUE(torch::equal(actual.cpu(), expected)) << c10::toString(dtype);
        EXPECT_TRUE(torch::equal(kc_gpu.cpu(), kc)) << c10::toString(dtype);
        EXPECT_TRUE(torch::equal(vc_gpu.cpu(), vc)) << c10::toString(dtype);
      }
    }
  }
}

// A serving loop's decode step captured once in a CUDA graph and replayed with new positions and
// slots written into the captured index tensors (what a server does each step): the fused write
// reads nothing back and allocates nothing, so the capture succeeds, and each replay leaves the
// queries and caches an eager call leaves, bit for bit.
TEST(DeviceEntry, KvCacheWriteCapturesInACudaGraph_CUDA) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device";
  }
  const torch::Device cuda(torch::kCUDA);
  torch::manual_seed(32);
  posenc::RotaryEmbedding rope(posenc::RotaryEmbeddingOptions(16, 64));
  rope->to(cuda);
  const auto options = torch::TensorOptions(cuda);
  torch::Tensor q = torch::empty({4, 4, 16}, options);
  torch::Tensor k = torch::empty({4, 2, 16}, options);
  torch::Tensor v = torch::empty({4, 2, 16}, options);
  torch::Tensor k_cache = torch::zeros({8, 4, 2, 16}, options);
  torch::Tensor v_cache = torch::zeros({8, 4, 2, 16}, options);
  torch::Tensor positions = torch::zeros({4}, options.dtype(torch::kLong));
  torch::Tensor slots = torch::tensor({0, 1, 2, 3}, options.dtype(torch::kLong));
  torch::Tensor seqlens = torch::zeros({4}, options.dtype(torch::kInt));
  torch::Tensor q4 = torch::empty({4, 1, 4, 16}, options); // [B = 4, L = 1, H, D]
  torch::Tensor k_contiguous = torch::zeros({4, 16, 2, 16}, options);
  torch::Tensor v_contiguous = torch::zeros({4, 16, 2, 16}, options);
  const auto step = [&] {
    rope->forward_paged_kv_cache_(q, k, v, k_cache, v_cache, positions, slots);
    rope->forward_kv_cache_(q4, k.unsqueeze(1), v.unsqueeze(1), k_contiguous, v_contiguous,
                            seqlens);
  };
  at::cuda::CUDAGraph graph;
  {
    const at::cuda::CUDAStream side = at::cuda::getStreamFromPool();
    const c10::cuda::CUDAStreamGuard guard(side);
    step(); // (warm-up, outside the capture)
    graph.capture_begin();
    step();
    graph.capture_end();
  }
  torch::cuda::synchronize();
  for (int64_t t = 1; t <= 3; ++t) {
    const torch::Tensor q_new = torch::randn({4, 4, 16}, options);
    const torch::Tensor k_new = torch::randn({4, 2, 16}, options);
    const torch::Tensor v_new = torch::randn({4, 2, 16}, options);
    q.copy_(q_new);
    q4.copy_(q_new.unsqueeze(1));
    k.copy_(k_new);
    v.copy_(v_new);
    positions.fill_(10 + t);
    slots.copy_(torch::tensor({4 * t, 4 * t + 1, 4 * t + 2, 4 * t + 3}, options.dtype(torch::kLong)));
    seqlens.fill_(static_cast<int>(t));
    torch::Tensor k_expected = k_cache.clone();
    torch::Tensor v_expected = v_cache.clone();
    torch::Tensor q_expected = q_new.clone();
    posenc::ops::rotary_paged_kv_cache_(q_expected, k_new, v_new, k_expected, v_expected,
                                        rope->cos, rope->sin, positions, slots);
    graph.replay();
    torch::cuda::synchronize();
    EXPECT_TRUE(torch::equal(k_cache, k_expected)) << t;
    EXPECT_TRUE(torch::equal(v_cache, v_expected)) << t;
    EXPECT_TRUE(torch::equal(q, q_expected)) << t;
    // the contiguous cache: each sequence's token at slot t = cache_seqlens, rotated at position t
    const auto [q_rot, k_rot] = posenc::ops::apply_rotary_qk(q_new.unsqueeze(1), k_new.unsqueeze(1),
                                                             rope->cos, rope->sin, t);
    EXPECT_TRUE(torch::equal(q4, q_rot)) << t;
    EXPECT_TRUE(torch::equal(k_contiguous.narrow(1, t, 1), k_rot)) << t;
    EXPECT_TRUE(torch::equal(v_contiguous.select(1, t), v_new)) << t;
  }
}
#endif
