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

/// An integer option that must be a multiple of `step` (combine with at_least for the range).
inline CLI::Validator multiple_of(int64_t step) {
  return CLI::Validator(
      [step](std::string& text) -> std::string {
        int64_t value = 0;
        if (!CLI::detail::lexical_cast(text, value) || value % step != 0) {
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

} // namespace cli
} // namespace posenc
