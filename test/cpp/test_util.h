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

// Counts, on this thread, posenc's reads from the device ("posenc::host_read") and ATen's scalar
// reads (item(), "aten::_local_scalar_dense") while it lives.
class HostReadCounter {
 public:
  HostReadCounter() {
    reads() = 0;
    items() = 0;
    handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(
        [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
          const char* name = fn.name();
          if (std::strcmp(name, "posenc::host_read") == 0) {
            ++reads();
          } else if (std::strcmp(name, "aten::_local_scalar_dense") == 0) {
            ++items();
          }
          return nullptr;
        }));
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
