// Private: reading cost-model TOML files with errors in the house style
// (origin:line: field 'x' = value: expected ...).
#pragma once

#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include "io/toml.hpp"

#include "io/toml_util.hpp"
#include "lpemu/error.hpp"

namespace lpemu::cost::detail {

using io::detail::fail;
using io::detail::show;
using io::detail::where;

inline toml::table parse(std::string_view text, std::string_view origin) {
  return io::detail::parse(text, origin);
}

/// Reads fields of one table; `prefix` ("memory.") names nested fields in messages.
struct Reader {
  const toml::table& t;
  std::string_view origin;
  std::string prefix;

  std::string field(std::string_view key) const { return prefix + std::string(key); }

  void only(const std::set<std::string, std::less<>>& allowed) const {
    for (const auto& [key, value] : t) {
      if (allowed.find(key.str()) == allowed.end()) {
        std::string list;
        for (const auto& k : allowed) list += (list.empty() ? "" : ", ") + k;
        fail(origin, &value, field(key.str()), show(value), "a known key (" + list + ")");
      }
    }
  }

  std::string str(std::string_view key, bool required, std::string def = {}) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) {
      if (required) fail(origin, &t, field(key), "(missing)", "a string");
      return def;
    }
    if (!n->is_string()) fail(origin, n, field(key), show(*n), "a string");
    return *n->value<std::string>();
  }

  double number(std::string_view key, bool required, double def, double lo, double hi,
                std::string_view what) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) {
      if (required) fail(origin, &t, field(key), "(missing)", what);
      return def;
    }
    if (!n->is_number()) fail(origin, n, field(key), show(*n), what);
    const double v = n->is_integer() ? static_cast<double>(*n->value<std::int64_t>()) : *n->value<double>();
    if (!(v >= lo && v <= hi)) fail(origin, n, field(key), show(*n), what);
    return v;
  }

  long long integer(std::string_view key, bool required, long long def, long long lo, long long hi,
                    std::string_view what) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) {
      if (required) fail(origin, &t, field(key), "(missing)", what);
      return def;
    }
    if (!n->is_integer()) fail(origin, n, field(key), show(*n), what);
    const auto v = *n->value<std::int64_t>();
    if (v < lo || v > hi) fail(origin, n, field(key), std::to_string(v), what);
    return v;
  }

  bool boolean(std::string_view key, bool def) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) return def;
    if (!n->is_boolean()) fail(origin, n, field(key), show(*n), "true or false");
    return *n->value<bool>();
  }

  const toml::table* table(std::string_view key, bool required) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) {
      if (required) fail(origin, &t, field(key), "(missing)", "a table");
      return nullptr;
    }
    if (!n->is_table()) fail(origin, n, field(key), show(*n), "a table");
    return n->as_table();
  }
};

}  // namespace lpemu::cost::detail
