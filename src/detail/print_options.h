#pragma once

// A module's pretty_print from its options' field table (<posenc/options/fields.h>):
// "posenc::Name(a=1, b=2, ...)", each option shown as its table line says.

#include <posenc/enums.h>
#include <posenc/options/fields.h>

#include <c10/util/ArrayRef.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <ostream>
#include <sstream>
#include <type_traits>
#include <vector>

namespace posenc {
namespace detail {

template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<c10::optional<T>> : std::true_type {};

/// Writes one option's value: bools as true/false, lists as [a, b], enumerations by name, an
/// empty optional as None.
template <typename T>
void print_option_value(std::ostream& stream, const T& value) {
  if constexpr (std::is_same<T, bool>::value) {
    stream << (value ? "true" : "false");
  } else if constexpr (std::is_same<T, std::vector<int64_t>>::value) {
    stream << c10::IntArrayRef(value);
  } else if constexpr (is_optional<T>::value) {
    if (value.has_value()) {
      print_option_value(stream, *value);
    } else {
      stream << "None";
    }
  } else {
    stream << value;
  }
}

/// Writes "posenc::<module>(" and `options` as their table shows them (kShowIfChanged: where they
/// differ from option_defaults), then `extra` (", ..." or empty) and ")"; formatted on its own,
/// whatever format flags `stream` has (std::fixed, std::hex, ...).
template <typename Options>
void print_options(std::ostream& stream, const char* module, const Options& options,
                   const char* extra = "") {
  const Options defaults = option_defaults(options);
  std::ostringstream text;
  text << "posenc::" << module << "(";
  bool first = true;
  for_each_option<Options>([&](const auto& field) {
    if (field.has(kShowNever) ||
        (field.has(kShowIfChanged) && field.get(options) == field.get(defaults))) {
      return;
    }
    text << (first ? "" : ", ") << field.name << "=";
    print_option_value(text, field.get(options));
    first = false;
  });
  text << extra << ")";
  stream << text.str();
}

} // namespace detail
} // namespace posenc
