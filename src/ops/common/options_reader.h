#pragma once

// The reader of posenc.nn's keyword arguments, sent as JSON text to the operators that check them
// (check_module_options, src/ops/common/module_options.cpp) or hold them (rotary_embedding_call,
// src/ops/rotary/module.cpp): each read once with its type checked, under the module's name, with
// the numbers JSON cannot hold spelled "nan", "inf" or "-inf" (detail::spelled_number).

#include "detail/attention_bias.h"
#include "detail/checks.h"
#include "detail/enum_names.h"
#include "detail/rope_parameters.h"

#include <posenc/enums.h>
#include <posenc/options/fields.h>

#include <c10/util/Exception.h>
#include <c10/util/Optional.h>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace posenc {
namespace ops {

// The keyword arguments of one posenc.nn constructor: each read once, with its type checked;
// finish() refuses the keys nothing read.
class OptionsReader {
 public:
  /// Reads `options` for the entry point of the current CallerScope, whose name starts the
  /// messages.
  explicit OptionsReader(const nlohmann::json& options)
      : who_(detail::caller()), options_(options) {}

  // The value of `key`, or null where it is left out. Null (Python's None) stands for the default
  // only where the option may be None (`nullable`: padding_idx, heads, ...); elsewhere posenc.nn
  // would keep the None it was given while the check read the default.
  const nlohmann::json* find(const char* key, bool nullable = false) {
    read_.insert(key);
    const auto found = options_.find(key);
    if (found == options_.end()) {
      return nullptr;
    }
    TORCH_CHECK(nullable || !found->is_null(), who_, ": ", key,
                " must not be None; leave it out for its default");
    return found->is_null() ? nullptr : &*found;
  }

  int64_t integer(const char* key, int64_t fallback, bool nullable = false) {
    const nlohmann::json* value = find(key, nullable);
    return value == nullptr ? fallback : as_integer(key, *value);
  }

  c10::optional<int64_t> optional_integer(const char* key) {
    const nlohmann::json* value = find(key, /*nullable=*/true);
    return value == nullptr ? c10::nullopt : c10::make_optional(as_integer(key, *value));
  }

  double number(const char* key, double fallback, bool nullable = false) {
    const nlohmann::json* value = find(key, nullable);
    return value == nullptr ? fallback : as_number(key, *value);
  }

  bool boolean(const char* key, bool fallback, bool nullable = false) {
    const nlohmann::json* value = find(key, nullable);
    if (value == nullptr) {
      return fallback;
    }
    TORCH_CHECK(value->is_boolean(), who_, ": ", key, " must be True or False, but got ",
                value->dump());
    return value->get<bool>();
  }

  std::vector<int64_t> integers(const char* key, std::vector<int64_t> fallback,
                                bool nullable = false) {
    return list(key, std::move(fallback), nullable, "integers", &OptionsReader::as_integer);
  }

  std::vector<double> numbers(const char* key, std::vector<double> fallback,
                              bool nullable = false) {
    return list(key, std::move(fallback), nullable, "numbers", &OptionsReader::as_number);
  }

  // A value of Enum named by its table (EnumNames), e.g. layout: "interleaved" or "concatenated";
  // the message lists the names as posenc.nn's keyword arguments take them.
  template <typename Enum>
  Enum choice(const char* key, Enum fallback, bool nullable = false) {
    const nlohmann::json* value = find(key, nullable);
    if (value == nullptr) {
      return fallback;
    }
    if (value->is_string()) {
      if (const c10::optional<Enum> named =
              detail::enum_value<Enum>(value->get_ref<const std::string&>())) {
        return *named;
      }
    }
    TORCH_CHECK(false, who_, ": ", key, " must be one of ", detail::enum_names_list<Enum>("'"),
                ", but got ",
                value->is_string() ? "'" + value->get<std::string>() + "'" : value->dump());
  }

  // Reads `key` into `value` by the value's type, leaving it as it is where the key is left out
  // or, for a `nullable` one, None (refused otherwise); the form of AttentionTemperature is read
  // as its operator reads it (detail::attention_temperature_form, its message).
  template <typename T>
  void read_into(const char* key, T& value, bool nullable) {
    if constexpr (std::is_same<T, bool>::value) {
      value = boolean(key, value, nullable);
    } else if constexpr (std::is_same<T, int64_t>::value) {
      value = integer(key, value, nullable);
    } else if constexpr (std::is_same<T, double>::value) {
      value = number(key, value, nullable);
    } else if constexpr (std::is_same<T, c10::optional<int64_t>>::value) {
      if (const nlohmann::json* given = find(key, nullable)) {
        value = as_integer(key, *given);
      }
    } else if constexpr (std::is_same<T, std::vector<int64_t>>::value) {
      value = integers(key, std::move(value), nullable);
    } else if constexpr (std::is_same<T, AttentionTemperatureForm>::value) {
      if (const nlohmann::json* given = find(key, nullable)) {
        value = detail::attention_temperature_form(given->is_string() ? given->get<std::string>()
                                                                      : given->dump());
      }
    } else {
      static_assert(std::is_enum<T>::value, "an option of a type OptionsReader cannot read");
      value = choice(key, value, nullable);
    }
  }

  // Every key was read: a misspelt one is the cause of whatever follows, so it is refused first.
  void finish() const {
    for (const auto& item : options_.items()) {
      TORCH_CHECK(read_.count(item.key()) == 1, who_, " has no option '", item.key(),
                  "'; see its keyword arguments (help(posenc.nn.", who_, "))");
    }
  }

 private:
  template <typename T>
  std::vector<T> list(const char* key, std::vector<T> fallback, bool nullable, const char* what,
                      T (OptionsReader::*element)(const char*, const nlohmann::json&) const) {
    const nlohmann::json* value = find(key, nullable);
    if (value == nullptr) {
      return fallback;
    }
    TORCH_CHECK(value->is_array(), who_, ": ", key, " must be a list of ", what, ", but got ",
                value->dump());
    std::vector<T> result;
    for (const nlohmann::json& item : *value) {
      result.push_back((this->*element)(key, item));
    }
    return result;
  }

  int64_t as_integer(const char* key, const nlohmann::json& value) const {
    TORCH_CHECK(value.is_number_integer(), who_, ": ", key,
                " must be an integer in int64's range, but got ", value.dump());
    if (value.is_number_unsigned()) {
      TORCH_CHECK(
          value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), who_,
          ": ", key, " must be an integer in int64's range, but got ", value.dump());
    }
    return value.get<int64_t>();
  }

  double as_number(const char* key, const nlohmann::json& value) const {
    if (const c10::optional<double> spelled = detail::spelled_number(value)) {
      return *spelled; // (a number JSON has no literal for)
    }
    TORCH_CHECK(value.is_number(), who_, ": ", key, " must be a number, but got ", value.dump());
    return value.get<double>();
  }

  const char* who_;
  const nlohmann::json& options_;
  std::set<std::string> read_;
};

// The options of `Options` from posenc.nn's keyword arguments, by its field table
// (<posenc/options/fields.h>): the constructor's arguments first (0 or empty where left out, for
// the checks to refuse), then each other option over its default; then finish().
template <typename Options>
Options read_options(OptionsReader& read) {
  const auto fields = OptionTable<Options>::fields();
  constexpr std::size_t constructor_arguments = OptionTable<Options>::kConstructorArguments;
  const auto argument = [&read](const auto& field) {
    typename std::decay_t<decltype(field)>::type value{};
    read.read_into(field.name, value, field.has(kNullable));
    return value;
  };
  Options options = std::apply(
      [&argument](const auto&... field) {
        return Options{argument(field)...}; // (braces: read in order)
      },
      posenc::detail::first_fields<constructor_arguments>(fields));
  std::size_t index = 0;
  for_each_option<Options>([&](const auto& field) {
    if (index++ >= constructor_arguments) {
      read.read_into(field.name, field.ref(options), field.has(kNullable));
    }
  });
  read.finish();
  return options;
}

} // namespace ops
} // namespace posenc
