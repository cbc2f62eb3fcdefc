#include "cli/output.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

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

std::ostream& report_stream(const std::string& written) {
  struct stat file {};
  struct stat out {};
  const bool same = ::stat(written.c_str(), &file) == 0 && ::fstat(STDOUT_FILENO, &out) == 0 &&
                    file.st_dev == out.st_dev && file.st_ino == out.st_ino;
  return same ? std::cerr : std::cout;
}

} // namespace cli
} // namespace posenc
