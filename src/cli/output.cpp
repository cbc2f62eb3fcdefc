#include "cli/output.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include <c10/util/Exception.h>

namespace posenc {
namespace cli {

namespace {
[[noreturn]] void fail(const std::string& what, int error) {
  TORCH_CHECK(false, what, ": ", std::strerror(error));
}
} // namespace

void flush_stdout() {
  std::cout.flush();
  if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) {
    fail("cannot write to standard output", errno != 0 ? errno : EIO);
  }
}

} // namespace cli
} // namespace posenc
