// Names of things: one name/value table per enum drives parsing, printing and the list of
// accepted spellings; one "closest known names" wording for every unknown name.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lpemu::detail {

/// One spelling of an enum value. A table lists a value's printed name first, its aliases after.
template <class E>
struct EnumName {
  std::string_view name;
  E value;
};

/// The name `value` prints as: its first spelling in `table` ("?" when the table lacks it).
template <class E, std::size_t N>
constexpr std::string_view enum_name(const EnumName<E> (&table)[N], E value) {
  for (const auto& e : table) {
    if (e.value == value) return e.name;
  }
  return "?";
}

/// The value spelled `text` in `table`, or nullopt.
template <class E, std::size_t N>
constexpr std::optional<E> enum_value(const EnumName<E> (&table)[N], std::string_view text) {
  for (const auto& e : table) {
    if (e.name == text) return e.value;
  }
  return std::nullopt;
}

/// Every spelling in `table`, in order, each between `quote`s.
template <class E, std::size_t N>
std::vector<std::string> enum_spellings(const EnumName<E> (&table)[N], std::string_view quote = "") {
  std::vector<std::string> out;
  for (const auto& e : table) out.push_back(std::string(quote) + std::string(e.name) + std::string(quote));
  return out;
}

/// `items` joined by ", ", the last two by `last` (", " keeps a plain list; " or " reads "a, b or c").
inline std::string join_names(const std::vector<std::string>& items, std::string_view last = ", ") {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 == items.size() ? std::string(last) : std::string(", ");
    out += items[i];
  }
  return out;
}

/// The `n` known names closest to `name` (edit distance), for "did you mean" messages.
std::vector<std::string> closest_names(std::string_view name, const std::vector<std::string>& known,
                                       std::size_t n = 3);

/// "; closest known names: a, b, c" for `name` among `known` ("" when none is close): the one
/// wording of every "did you mean" in lpemu.
inline std::string closest_names_hint(std::string_view name, const std::vector<std::string>& known) {
  const auto near = closest_names(name, known);
  return near.empty() ? std::string() : "; closest known names: " + join_names(near);
}

}  // namespace lpemu::detail
