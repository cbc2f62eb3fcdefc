#include "io/file_output.h"
#include "detail/checks.h"

#include <c10/util/Exception.h>

#include <cerrno>
#include <cstdlib>
#include <climits>
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

// Writes `bytes` into `path` as it is (O_TRUNC: an existing file is replaced in place; a device,
// a FIFO or a terminal is written as a stream), never removed. `why` says, in a failure's message,
// why the file was written in place.
void write_in_place(const std::string& path, const std::string& bytes, const char* why) {
  static constexpr detail::CallerName who{};
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, who, ": cannot open '", path, "' for writing: ", reason(errno));
  const int write_error = write_all(fd, bytes);
  const int close_error = ::close(fd) == 0 ? 0 : errno;
  TORCH_CHECK(write_error == 0 && close_error == 0, who, ": cannot write '", path,
              "': ", reason(write_error != 0 ? write_error : close_error), " (", why,
              ", so it was written in place and left there)");
}

// Errors that say a file system does not do an operation, rather than that the data is at risk.
bool unsupported(int error) {
  return error == EINVAL || error == ENOTSUP || error == EOPNOTSUPP || error == EPERM;
}

// Errors that say the directory refuses a new file or a rename in it (the file itself may still
// be writable): permissions, a sticky directory, a read-only mount.
bool refused(int error) {
  return error == EACCES || error == EPERM || error == EROFS;
}

enum class Replaced { kDone, kRefused };

// Writes `bytes` over the regular file (or new file) `path` through a temporary beside it;
// kRefused (nothing changed, no temporary left) where the directory does not allow it.
Replaced replace_file(const std::string& path, const struct stat* existing,
                      const std::string& bytes) {
  static constexpr detail::CallerName who{};
  const auto parts = split(path);
  const std::string& directory = parts.first;
  // A fresh name beside the target (O_EXCL: never someone else's file). A new file is created
  // with 0666, so that the umask gives it the usual permissions; a replacement with 0600 until it
  // has the old file's (its content is never readable by more people than the old file's was).
  std::random_device seed;
  std::mt19937_64 draw(seed());
  std::string temporary;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    temporary =
        directory + "/." + parts.second + "." + std::to_string(draw() % 1000000000) + ".tmp";
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                existing != nullptr ? 0600 : 0666);
    if (fd < 0 && errno != EEXIST) {
      break;
    }
  }
  if (fd < 0 && existing != nullptr && refused(errno)) {
    return Replaced::kRefused;
  }
  TORCH_CHECK(fd >= 0, who, ": cannot write '", path, "': cannot create a file in '", directory,
              "' (", reason(errno), "); the directory must exist and be writable");
  const auto give_up = [&]() {
    ::close(fd);
    ::unlink(temporary.c_str());
    return Replaced::kRefused;
  };
  if (existing != nullptr) {
    // The old file's owner and group (root may give them; another user may keep only a group
    // that is theirs): where they cannot be kept, the file is written in place instead.
    if ((existing->st_uid != ::geteuid() || existing->st_gid != ::getegid()) &&
        ::fchown(fd, existing->st_uid, existing->st_gid) != 0) {
      return give_up();
    }
    if (::fchmod(fd, existing->st_mode & 07777) != 0 && !unsupported(errno)) {
      return give_up();
    }
  }
  int error = write_all(fd, bytes);
  if (error == 0 && ::fsync(fd) != 0 && !unsupported(errno)) {
    error = errno;
  }
  if (::close(fd) != 0 && error == 0) {
    error = errno;
  }
  if (error == 0 && ::rename(temporary.c_str(), path.c_str()) != 0) {
    error = errno;
    if (existing != nullptr && refused(error)) {
      ::unlink(temporary.c_str());
      return Replaced::kRefused; // (a sticky directory: someone else's file)
    }
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
  return Replaced::kDone;
}

// The file a chain of symbolic links ends at (the last link's target where it does not exist yet),
// or `path` itself.
std::string link_target(const std::string& path) {
  std::string current = path;
  for (int hop = 0; hop < 40; ++hop) {
    struct stat link {};
    if (::lstat(current.c_str(), &link) != 0 || !S_ISLNK(link.st_mode)) {
      return current;
    }
    std::string next(static_cast<size_t>(PATH_MAX), '\0');
    const ssize_t length = ::readlink(current.c_str(), &next[0], next.size());
    if (length <= 0 || static_cast<size_t>(length) >= next.size()) {
      return current;
    }
    next.resize(static_cast<size_t>(length));
    // a relative target names a file in the link's directory
    current = next[0] == '/' ? next : split(current).first + "/" + next;
  }
  return current;
}

bool starts_with(const std::string& text, const char* prefix) {
  return text.rfind(prefix, 0) == 0;
}

} // namespace

void write_file_safely(const std::string& path, const std::string& bytes, const char* caller) {
  const detail::CallerScope scope(detail::CallerScope::Rename{}, caller);
  const char* const who = caller;
  TORCH_CHECK(!path.empty(), who, ": the output path is empty; name a file");
  // /dev/stdout, /dev/fd/N, /proc/self/fd/N: a stream the caller opened, written as it is (its
  // file may be deleted, or held by the caller's descriptor, which a rename would leave behind).
  if (starts_with(path, "/dev/") || starts_with(path, "/proc/")) {
    write_in_place(path, bytes, "it names a device or a descriptor");
    return;
  }
  // A symbolic link: the file it names is replaced, the link stays.
  const std::string target_path = link_target(path);
  struct stat target {};
  const bool exists = ::stat(target_path.c_str(), &target) == 0;
  TORCH_CHECK(!(exists && S_ISDIR(target.st_mode)), who, ": '", path,
              "' is a directory; name a file in it");
  if (exists && !S_ISREG(target.st_mode)) {
    write_in_place(path, bytes, "it is not a regular file");
    return;
  }
  if (exists && target.st_nlink > 1) {
    // (a rename would leave the other names with the old content)
    write_in_place(target_path, bytes, "it has other hard links, which must see the new content");
    return;
  }
  if (replace_file(target_path, exists ? &target : nullptr, bytes) == Replaced::kRefused) {
    // The directory refuses a new file (or the old file's owner cannot be kept), but the file
    // itself may be writable: written in place, as a plain open would.
    write_in_place(target_path, bytes,
                   "its directory allows no temporary file beside it, or its owner could not be "
                   "kept");
  }
}

} // namespace io
} // namespace posenc
