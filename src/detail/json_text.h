#pragma once

// Limits on the JSON text posenc reads (config.json files, rope_parameters blocks, the option texts
// posenc.nn sends), checked on the text before any parser builds a tree of it: nlohmann-json parses
// without recursion, but copying, printing or destroying the tree it built recurses once per level,
// so a text of 200,000 '[' would exhaust the stack of whoever touches the value next.

#include <c10/util/string_view.h>

#include <cstddef>
#include <string>

namespace posenc {
namespace detail {

/// The most levels of objects and arrays posenc reads in one JSON text. transformers' configs nest
/// four levels (a multimodal config's text_config.rope_parameters.mrope_section); option texts two.
constexpr int kMaxJsonDepth = 64;
/// The most bytes of an option text or a rope_parameters block (a module's options are a few
/// hundred bytes; LongRoPE's factor lists a few kilobytes).
constexpr size_t kMaxOptionTextBytes = size_t{1} << 20;
/// The most bytes of a config.json (the largest of transformers' model configs, with label maps
/// of thousands of classes, are a few megabytes).
constexpr size_t kMaxConfigFileBytes = size_t{64} << 20;

/// The byte offset in `text` of the first '{' or '[' (outside strings) that opens level
/// `max_depth + 1`, or std::string::npos where the text nests at most `max_depth` levels. A linear
/// scan with no recursion; it does not validate the text (the parser does).
size_t json_depth_exceeded_at(c10::string_view text, int max_depth);

/// Checks `text` against the limits before it is parsed: at most `max_bytes` bytes and
/// kMaxJsonDepth levels. `what` names the text in the message ("posenc::check_module_options:
/// options", a config's path), which says the limit and what to do.
void check_json_limits(c10::string_view text, size_t max_bytes, const std::string& what);

} // namespace detail
} // namespace posenc
