#pragma once

// Writing a whole file so that a failure loses nothing (part of posenc::io; used by
// save_safetensors, the posenc program's exports and the figures of plot/). The content is made in
// memory first; then:
//   - a regular file (or a path that does not exist yet) is written to a temporary file beside it
//     (same directory, so the rename cannot cross file systems), flushed with fsync and renamed
//     over the target: a reader sees the old file or the new one, never a part. On any failure the
//     temporary is removed and the target is left as it was. A replaced file keeps its owner,
//     group and permissions (the temporary is private until it has them); a new one gets the
//     process's default (0666 less the umask). A symbolic link is followed: the file it names is
//     replaced, the link stays.
//   - where that cannot be done, the file is written in place (opened with O_TRUNC, as a plain
//     open would), so that what could be written before still can: a file with other hard links
//     (which must see the new content), a directory that allows no new file or rename (a file
//     writable in a read-only directory, someone else's file in a sticky one), an owner that
//     cannot be kept. Only then can a failed write leave a partial file.
//   - a path that is not a regular file (/dev/null, /dev/stdout, /dev/fd/N, /proc/self/fd/N, a
//     FIFO, a terminal) is written directly and never removed, whatever happens; a directory is
//     refused.
// Every error (cannot create the temporary, a full disk, a file-size limit, a read-only
// directory) is a c10::Error that names the caller, the path and the system's reason. (A process
// over its file-size limit gets SIGXFSZ, which ends it unless ignored: the posenc program ignores
// it, so that the write fails with EFBIG; a program of its own that writes large files should do
// the same. A temporary can only outlive a process that is killed while writing; its name is
// ".<file>.<number>.tmp".)

#include <string>

namespace posenc {
namespace io {

/// Writes `bytes` to `path` as described above; messages start with `caller` (the name of the
/// program or function that writes: the programs above libposenc name themselves here).
void write_file_safely(const std::string& path, const std::string& bytes, const char* caller);

} // namespace io
} // namespace posenc
