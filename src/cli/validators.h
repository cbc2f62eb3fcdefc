#pragma once

// Validators of the program's numeric options, with messages that say what must hold: CLI11's own
// range validators print the whole double range ("not in range 0.000000 to 1797...").

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace posenc {
namespace cli {

/// An integer option that must be >= `lowest` (checked on the text, so that a negative number
/// given to an unsigned option is rejected rather than wrapped around).
inline CLI::Validator at_least(int64_t lowest) {
  return CLI::Validator(
      [lowest](std::string& text) -> std::string {
        int64_t value = 0;
        if (!CLI::detail::lexical_cast(text, value) || value < lowest) {
          return "must be an integer >= " + std::to_string(lowest) + ", but got " + text;
        }
        return std::string();
      },
      ">= " + std::to_string(lowest));
}

/// A number option that must be finite and > 0.
inline CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !(value > 0) ||
            value > 1.7976931348623157e308) {
          return "must be a finite number > 0, but got " + text;
        }
        return std::string();
      },
      "> 0");
}

} // namespace cli
} // namespace posenc
