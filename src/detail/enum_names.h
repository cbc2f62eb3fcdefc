#pragma once

// Reading an enumeration's name (EnumNames, <posenc/enums.h>): the one table of names of each
// enumeration, read by the operators' string arguments, posenc.nn's JSON options and the program.

#include <posenc/enums.h>

#include <c10/util/Optional.h>
#include <c10/util/string_view.h>

#include <string>

namespace posenc {
namespace detail {

/// The value named `name` in E's table, or nullopt.
template <typename E>
c10::optional<E> enum_value(c10::string_view name) {
  for (const EnumName<E>& entry : EnumNames<E>::values) {
    if (name == entry.name) {
      return entry.value;
    }
  }
  return c10::nullopt;
}

/// E's names, each between `quote`s, joined by ", " (e.g. "'ij', 'xy'").
template <typename E>
std::string enum_names_list(const char* quote) {
  std::string list;
  for (const EnumName<E>& entry : EnumNames<E>::values) {
    list += (list.empty() ? "" : ", ") + std::string(quote) + entry.name + quote;
  }
  return list;
}

/// E's names, each between `quote`s, as alternatives: "'a' or 'b'", "'a', 'b' or 'c'".
template <typename E>
std::string enum_alternatives(const char* quote) {
  std::string list;
  const size_t count = EnumNames<E>::values.size();
  for (size_t i = 0; i < count; ++i) {
    list += (i == 0           ? ""
             : i + 1 == count ? " or "
                              : ", ") +
            std::string(quote) + EnumNames<E>::values[i].name + quote;
  }
  return list;
}

} // namespace detail
} // namespace posenc
