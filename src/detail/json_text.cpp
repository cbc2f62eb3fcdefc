#include "detail/json_text.h"

#include <c10/util/Exception.h>

namespace posenc {
namespace detail {

size_t json_depth_exceeded_at(c10::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) {
        return i;
      }
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return std::string::npos;
}

void check_json_limits(c10::string_view text, size_t max_bytes, const std::string& what) {
  TORCH_CHECK(text.size() <= max_bytes, what, " has ", text.size(), " bytes, more than the ",
              max_bytes, " bytes posenc reads in one JSON text; pass the text that was meant "
              "(a config.json or a module's options are far smaller)");
  const size_t at = json_depth_exceeded_at(text, kMaxJsonDepth);
  TORCH_CHECK(at == std::string::npos, what, " nests deeper than ", kMaxJsonDepth,
              " levels of objects and arrays (level ", kMaxJsonDepth + 1, " opens at byte ", at,
              "); posenc reads JSON of at most ", kMaxJsonDepth,
              " levels (transformers' configs nest 4): the text is corrupt or not what was meant");
}

} // namespace detail
} // namespace posenc
