#pragma once

// The posenc program's standard output, flushed with every error checked. (Its files, and the
// figures of plot/, are written by posenc::io::write_file_safely, src/io/file_output.h: made in
// memory first, so that a failed write is an error message and a non-zero exit, never an abort
// from LibTorch's zip writer, and never loses the file that was there.)

#include <string>

namespace posenc {
namespace cli {

/// Flushes standard output; throws c10::Error when something printed could not be
/// written (e.g. `posenc table ... > /dev/full`).
void flush_stdout();

} // namespace cli
} // namespace posenc
