#pragma once

// Small helpers shared by the test files.

#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/utils.h>

#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

namespace posenc_test {

/// A fixture that seeds LibTorch's generator, so that every run draws the same random inputs.
class SeededTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(0);
  }
};

/// What `pretty_print` writes for `module`.
inline std::string printed(const torch::nn::Module& module) {
  std::ostringstream stream;
  module.pretty_print(stream);
  return stream.str();
}

/// Runs `fn` and returns the message of the `c10::Error` it throws (without the backtrace), or
/// "<no error>" when it returns normally. Any other exception fails the test.
template <typename Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "<no error>";
}

/// Like error_message, but also takes the message of any other std::exception: the TorchScript
/// exceptions an exported module throws carry the raised text after the TorchScript traceback.
template <typename Fn>
std::string any_error(Fn&& fn) {
  try {
    return error_message(std::forward<Fn>(fn));
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Counts, on this thread, posenc's reads from the device ("posenc::host_read"), ATen's scalar
// reads (item(), "aten::_local_scalar_dense") and copies from the CPU to another device (an
// "aten::_to_copy" of a CPU tensor to another device, or an "aten::copy_" into a non-CPU tensor
// from a CPU one: what `.to(device)` of a host-made tensor does, a wait for a CUDA device) while
// it lives.
class HostReadCounter {
 public:
  HostReadCounter() {
    reads() = 0;
    items() = 0;
    uploads() = 0;
    handle_ = at::addThreadLocalCallback(
        at::RecordFunctionCallback(
            [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
              const char* name = fn.name();
              if (std::strcmp(name, "posenc::host_read") == 0) {
                ++reads();
              } else if (std::strcmp(name, "aten::_local_scalar_dense") == 0) {
                ++items();
              } else if (is_upload(name, fn.inputs())) {
                ++uploads();
              }
              return nullptr;
            })
            .needsInputs(true));
  }
  ~HostReadCounter() {
    at::removeCallback(handle_);
  }
  static int& reads() {
    static thread_local int count = 0;
    return count;
  }
  static int& items() {
    static thread_local int count = 0;
    return count;
  }
  static int& uploads() {
    static thread_local int count = 0;
    return count;
  }

  /// Whether the call `name` with `inputs` copies a CPU tensor's values to another device.
  template <typename Inputs>
  static bool is_upload(const char* name, const Inputs& inputs) {
    const auto on_cpu = [&](size_t i) {
      return inputs.size() > i && inputs[i].isTensor() && inputs[i].toTensor().defined() &&
             inputs[i].toTensor().device().is_cpu() && inputs[i].toTensor().numel() > 0;
    };
    if (std::strcmp(name, "aten::_to_copy") == 0) {
      return on_cpu(0) && inputs.size() > 3 && inputs[3].isDevice() && !inputs[3].toDevice().is_cpu();
    }
    if (std::strcmp(name, "aten::copy_") == 0) {
      return on_cpu(1) && inputs[0].isTensor() && !inputs[0].toTensor().device().is_cpu();
    }
    return false;
  }

 private:
  at::CallbackHandle handle_;
};

} // namespace posenc_test

/// Expects `statement` to throw a c10::Error whose message contains `substring`.
#define EXPECT_POSENC_ERROR(statement, substring)                                         \
  do {                                                                                    \
    const std::string posenc_message_ = ::posenc_test::error_message([&] { statement; }); \
    EXPECT_NE(posenc_message_.find(substring), std::string::npos)                         \
        << "expected a c10::Error containing\n  " << (substring) << "\nbut got\n  "       \
        << posenc_message_;                                                               \
  } while (false)
