#pragma once

// The posenc program's standard output, flushed with every error checked. (Its files, and the
// figures of plot/, are written by posenc::io::write_file_safely, src/io/file_output.h: made in
// memory first, so that a failed write is an error message and a non-zero exit, never an abort
// from LibTorch's zip writer, and never loses the file that was there.)

#include <ostream>
#include <string>

namespace posenc {
namespace cli {

/// Flushes standard output; throws c10::Error when something printed could not be
/// written (e.g. `posenc table ... > /dev/full`).
void flush_stdout();

/// Where to say that `written` was written: standard error when `written` is the file standard
/// output goes to (`-o /dev/stdout > model.pt`, `-o model.pt > model.pt`), so that the message does
/// not land inside the file; standard output otherwise.
std::ostream& report_stream(const std::string& written);

} // namespace cli
} // namespace posenc
