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

void write_file(const std::string& path, const std::string& bytes) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    fail("cannot open '" + path + "' for writing", errno);
  }
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), file);
  const int write_error = written == bytes.size() ? 0 : errno;
  // fclose flushes what fwrite buffered: a full disk often shows only here.
  const int close_status = std::fclose(file);
  const int close_error = close_status == 0 ? 0 : errno;
  if (write_error != 0 || written != bytes.size() || close_status != 0) {
    std::remove(path.c_str()); // no truncated file left behind
    fail("cannot write '" + path + "'", write_error != 0 ? write_error : close_error);
  }
}

void flush_stdout() {
  std::cout.flush();
  if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) {
    fail("cannot write to standard output", errno != 0 ? errno : EIO);
  }
}

} // namespace cli
} // namespace posenc
