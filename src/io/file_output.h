#pragma once

// Writing a whole file so that a failure loses nothing (part of posenc::io; used by
// save_safetensors, the posenc program's exports and the figures of plot/). The content is made in
// memory first; then:
//   - a regular file (or a path that does not exist yet) is written to a temporary file beside it
//     (same directory, so the rename cannot cross file systems), flushed with fsync and renamed
//     over the target: a reader sees the old file or the new one, never a part. On any failure the
//     temporary is removed and the target is left as it was. A replaced file keeps its
//     permissions; a new one gets the process's default (0666 less the umask).
//   - a path that is not a regular file (/dev/null, /dev/stdout, a FIFO, a terminal) is written
//     directly and never removed, whatever happens; a directory is refused.
// Every error (cannot create the temporary, a full disk, a file-size limit, a read-only
// directory) is a c10::Error that names `who`, the path and the system's reason.

#include <string>

namespace posenc {
namespace io {

/// Writes `bytes` to `path` as described above; messages start with `who`.
void write_file_safely(const std::string& path, const std::string& bytes, const char* who);

} // namespace io
} // namespace posenc
