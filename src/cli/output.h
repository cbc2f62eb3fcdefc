#pragma once

// Writing the programs' output files (the posenc program's exports, the figures of plot/): the
// whole content is made in memory first, then written
// with every error checked, so that a full disk or an unwritable path is an error message and a
// non-zero exit, never an abort (LibTorch's zip writer throws from its destructor when a write
// fails, which terminates the process).

#include <string>

namespace posenc {
namespace cli {

/// Writes `bytes` to `path` (replacing it); throws c10::Error naming the path and the
/// system's reason when opening, writing or closing fails.
void write_file(const std::string& path, const std::string& bytes);

/// Flushes standard output; throws c10::Error when something printed could not be
/// written (e.g. `posenc table ... > /dev/full`).
void flush_stdout();

} // namespace cli
} // namespace posenc
