#pragma once

/// The field tables of posenc's module options: one table per Options struct, which names each
/// option once, with how `pretty_print` shows it and whether the TorchScript export keeps it as
/// an attribute. posenc.nn's keyword arguments (read from JSON by the operators that check them),
/// the modules' `pretty_print` and the exported modules' attributes are all derived from it, so
/// that an option is added as its field, its line in the table and its test.

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

namespace posenc {

/// What an option's table line says of it (combined with `|`).
enum OptionFlags : unsigned {
  /// `pretty_print` shows it always (no flag: the default, e.g. for a constructor argument).
  kShowAlways = 0U,
  /// `pretty_print` shows it only where it differs from its default.
  kShowIfChanged = 1U << 0,
  /// `pretty_print` leaves it out.
  kShowNever = 1U << 1,
  /// The TorchScript export registers it as an attribute of the same name (an enumeration as its
  /// name).
  kTorchScript = 1U << 2,
  /// posenc.nn may pass None for it, which stands for its default; without it, None is refused.
  kNullable = 1U << 3,
};

/// One option of `Options`: its name (the C++ setter, posenc.nn's keyword and the JSON key), the
/// accessors TORCH_ARG defines, and its flags.
template <typename Options, typename T>
struct OptionField {
  /// The option's type.
  using type = T;
  /// Its name.
  const char* name;
  /// Its value in an options object, to change.
  T& (*ref)(Options&);
  /// Its value in an options object.
  const T& (*get)(const Options&);
  /// OptionFlags, combined.
  unsigned flags;

  /// Whether the table line sets `flag`.
  constexpr bool has(OptionFlags flag) const {
    return (flags & flag) != 0U;
  }
};

/// The field of `Options` read by `ref` and `get`, its two accessors (what POSENC_OPTION_FIELD
/// makes).
template <typename Options, typename Ref, typename Get>
constexpr auto option_field(const char* name, Ref ref, Get get, unsigned flags) {
  using T = std::decay_t<decltype(ref(std::declval<Options&>()))>;
  return OptionField<Options, T>{name, ref, get, flags};
}

/// The table line of the option `name` of `Options` (a TORCH_ARG), with OptionFlags `flags`.
#define POSENC_OPTION_FIELD(Options, name, flags)                       \
  ::posenc::option_field<Options>(                                      \
      #name, [](Options & options) -> auto& { return options.name(); }, \
      [](const Options& options) -> const auto& { return options.name(); }, flags)

/// The field table of an Options struct, specialised next to each struct: `fields()`, a tuple of
/// OptionField in the order `pretty_print` shows them and posenc.nn's keywords are read (the
/// keyword order of posenc.nn's constructor, AttentionTemperature's `form` aside), whose first
/// `kConstructorArguments` are the constructor's arguments.
template <typename Options>
struct OptionTable;

namespace detail {

template <typename Tuple, std::size_t... I>
auto take_fields(const Tuple& fields, std::index_sequence<I...> /*indices*/) {
  return std::make_tuple(std::get<I>(fields)...);
}

/// The first `count` fields of a table.
template <std::size_t count, typename Tuple>
auto first_fields(const Tuple& fields) {
  return take_fields(fields, std::make_index_sequence<count>());
}

template <typename Options, typename Visit, std::size_t... I>
void visit_fields(Visit&& visit, std::index_sequence<I...> /*indices*/) {
  const auto fields = OptionTable<Options>::fields();
  (visit(std::get<I>(fields)), ...);
}

} // namespace detail

/// Calls `visit(field)` on each field of `Options`' table, in order.
template <typename Options, typename Visit>
void for_each_option(Visit&& visit) {
  constexpr std::size_t count = std::tuple_size<decltype(OptionTable<Options>::fields())>::value;
  detail::visit_fields<Options>(std::forward<Visit>(visit), std::make_index_sequence<count>());
}

/// The options its constructor makes from the constructor arguments of `options`: every other
/// option at its default (the reference of OptionFlags::kShowIfChanged).
template <typename Options>
Options option_defaults(const Options& options) {
  const auto fields = OptionTable<Options>::fields();
  return std::apply([&](const auto&... field) { return Options(field.get(options)...); },
                    detail::first_fields<OptionTable<Options>::kConstructorArguments>(fields));
}

} // namespace posenc
