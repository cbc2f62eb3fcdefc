#include "io/file_output.h"

#include <c10/util/Exception.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace posenc {
namespace io {
namespace {

// Writes all of `bytes` to `fd`; 0 or the errno of the first failing write.
int write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t written = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (written < 0) {
      if (errno == EINTR) {
        continue;
      }
      return errno;
    }
    if (written == 0) {
      return EIO;
    }
    done += static_cast<size_t>(written);
  }
  return 0;
}

std::string reason(int error) {
  return std::strerror(error);
}

// The directory part of `path` ("." for a bare name) and the name part.
std::pair<std::string, std::string> split(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) {
    return {".", path};
  }
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// A path not a regular file: written as it is (a device, a FIFO, a terminal), never removed.
void write_in_place(const std::string& path, const std::string& bytes, const char* who) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, who, ": cannot open '", path, "' for writing: ", reason(errno));
  const int write_error = write_all(fd, bytes);
  const int close_error = ::close(fd) == 0 ? 0 : errno;
  TORCH_CHECK(write_error == 0 && close_error == 0, who, ": cannot write '", path,
              "': ", reason(write_error != 0 ? write_error : close_error),
              " (it is not a regular file, so it was written in place and left there)");
}

// Writes `bytes` over the regular file (or new file) `path` through a temporary beside it.
void replace_file(const std::string& path, const struct stat* existing, const std::string& bytes,
                  const char* who) {
  const auto parts = split(path);
  const std::string& directory = parts.first;
  // A fresh name beside the target (O_EXCL: never someone else's file), created with 0666 so that
  // the umask gives a new file its usual permissions.
  std::random_device seed;
  std::mt19937_64 draw(seed());
  std::string temporary;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    temporary =
        directory + "/." + parts.second + "." + std::to_string(draw() % 1000000000) + ".tmp";
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) {
      break;
    }
  }
  TORCH_CHECK(fd >= 0, who, ": cannot write '", path, "': cannot create a file in '", directory,
              "' (", reason(errno), "); the directory must exist and be writable");
  int error = write_all(fd, bytes);
  if (error == 0 && existing != nullptr && ::fchmod(fd, existing->st_mode & 07777) != 0) {
    error = errno;
  }
  if (error == 0 && ::fsync(fd) != 0) {
    error = errno;
  }
  if (::close(fd) != 0 && error == 0) {
    error = errno;
  }
  if (error == 0 && ::rename(temporary.c_str(), path.c_str()) != 0) {
    error = errno;
  }
  if (error != 0) {
    ::unlink(temporary.c_str());
    TORCH_CHECK(false, who, ": cannot write '", path, "': ", reason(error),
                existing != nullptr ? "; the file that was there is unchanged"
                                    : "; nothing was written");
  }
  // The rename itself reaches the disk with the directory (best effort: some file systems refuse
  // to open or sync a directory, and the file is in place either way).
  const int directory_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directory_fd >= 0) {
    (void)::fsync(directory_fd);
    ::close(directory_fd);
  }
}

} // namespace

void write_file_safely(const std::string& path, const std::string& bytes, const char* who) {
  TORCH_CHECK(!path.empty(), who, ": the output path is empty; name a file");
  // A symbolic link: the file it names is replaced, the link stays.
  std::string target_path = path;
  struct stat link {};
  if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
    char* real = ::realpath(path.c_str(), nullptr);
    if (real != nullptr) {
      target_path = real;
      std::free(real);
    }
  }
  struct stat target {};
  const bool exists = ::stat(target_path.c_str(), &target) == 0;
  TORCH_CHECK(!(exists && S_ISDIR(target.st_mode)), who, ": '", path,
              "' is a directory; name a file in it");
  if (exists && !S_ISREG(target.st_mode)) {
    write_in_place(path, bytes, who);
    return;
  }
  replace_file(target_path, exists ? &target : nullptr, bytes, who);
}

} // namespace io
} // namespace posenc
