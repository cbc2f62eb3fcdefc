#pragma once

// Validators of the program's numeric options, with messages that say what must hold: CLI11's own
// range validators print the whole double range ("not in range 0.000000 to 1797...").

#include <posenc/enums.h>

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace posenc {
namespace cli {

/// Reads the whole of `text` as an int64 the way CLI11 stores it (strtoll with base 0: "012" is
/// octal, "0x10" hexadecimal), but false for a number int64 cannot hold, which CLI11's conversion
/// saturates to int64's largest value, and for anything that is not a number.
inline bool parse_int64(const std::string& text, int64_t& value) {
  if (text.empty()) {
    return false;
  }
  errno = 0;
  char* end = nullptr;
  const long long read = std::strtoll(text.c_str(), &end, 0);
  if (errno == ERANGE || end != text.c_str() + text.size()) {
    return false;
  }
  value = static_cast<int64_t>(read);
  return true;
}

/// An integer option that must be >= `lowest` (checked on the text, so that a negative number
/// given to an unsigned option is rejected rather than wrapped around).
inline CLI::Validator at_least(int64_t lowest) {
  return CLI::Validator(
      [lowest](std::string& text) -> std::string {
        int64_t value = 0;
        if (!parse_int64(text, value) || value < lowest) {
          int64_t saturated = 0;
          const bool too_large = CLI::detail::lexical_cast(text, saturated) && saturated > lowest;
          return "must be an integer >= " + std::to_string(lowest) +
                 (too_large ? " and <= 2^63 - 1" : "") + ", but got " + text;
        }
        return std::string();
      },
      ">= " + std::to_string(lowest));
}

/// An integer option that must be a multiple of `step` (combine with at_least for the range).
inline CLI::Validator multiple_of(int64_t step) {
  return CLI::Validator(
      [step](std::string& text) -> std::string {
        int64_t value = 0;
        if (!parse_int64(text, value) || value % step != 0) {
          return "must be a multiple of " + std::to_string(step) + ", but got " + text;
        }
        return std::string();
      },
      "multiple of " + std::to_string(step));
}

/// A number option that must be finite and > `bound` (or >= `bound` when `inclusive`).
inline CLI::Validator finite_above(double bound, bool inclusive = false) {
  std::string condition = (inclusive ? ">= " : "> ") + CLI::detail::to_string(bound);
  return CLI::Validator(
      [bound, inclusive, condition](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) ||
            !(inclusive ? value >= bound : value > bound) || value > 1.7976931348623157e308) {
          return "must be a finite number " + condition + ", but got " + text;
        }
        return std::string();
      },
      condition);
}

/// A number option that must be finite and > 0.
inline CLI::Validator positive() {
  return finite_above(0.0);
}

/// The names of E's values (EnumNames, the one table of them), for CLI::IsMember.
template <typename E>
std::vector<std::string> enum_names() {
  std::vector<std::string> names;
  for (const EnumName<E>& entry : EnumNames<E>::values) {
    names.emplace_back(entry.name);
  }
  return names;
}

/// The value of E named `name`, which CLI::IsMember(enum_names<E>()) has checked.
template <typename E>
E enum_named(const std::string& name) {
  for (const EnumName<E>& entry : EnumNames<E>::values) {
    if (name == entry.name) {
      return entry.value;
    }
  }
  throw CLI::ValidationError("'" + name + "' is not a name of this option's values");
}

} // namespace cli
} // namespace posenc
