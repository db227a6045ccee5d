// Private helpers shared by every TOML spec loader (formats, block formats, datapaths, plans,
// experiments, cost files): positions, value printing, the one error-message shape
// "file:line: field 'x' = value: expected ..." and TableReader, the one way a loader reads fields.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/toml.hpp"

#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::io::detail {

/// Throws SpecError at the first byte >= 0x80 outside a comment or string. TOML 1.0 allows
/// non-ASCII only there, and toml++ 3.3 (Debian 12) reaches __builtin_unreachable() in
/// is_non_ascii_horizontal_whitespace() on some such characters (found by tests/fuzz).
inline void check_ascii_outside_strings(std::string_view text, std::string_view origin) {
  enum class In { code, comment, basic, literal, ml_basic, ml_literal } state = In::code;
  int line = 1;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const auto starts = [&](std::string_view w) { return text.substr(i, w.size()) == w; };
    if (c == '\n') {
      ++line;
      if (state == In::comment || state == In::basic || state == In::literal) state = In::code;
      continue;
    }
    switch (state) {
      case In::code:
        if (static_cast<unsigned char>(c) >= 0x80) {
          throw SpecError(std::string(origin) + ":" + std::to_string(line) +
                          ": not valid TOML: a non-ASCII character outside a string or comment");
        }
        if (c == '#')
          state = In::comment;
        else if (starts("\"\"\"")) {
          state = In::ml_basic;
          i += 2;
        } else if (starts("'''")) {
          state = In::ml_literal;
          i += 2;
        } else if (c == '"')
          state = In::basic;
        else if (c == '\'')
          state = In::literal;
        break;
      case In::comment: break;
      case In::basic:
        if (c == '\\' && i + 1 < text.size() && text[i + 1] != '\n')
          ++i;
        else if (c == '"')
          state = In::code;
        break;
      case In::literal:
        if (c == '\'') state = In::code;
        break;
      case In::ml_basic:
        if (c == '\\' && i + 1 < text.size() && text[i + 1] != '\n')
          ++i;
        else if (starts("\"\"\"")) {
          state = In::code;
          i += 2;
        }
        break;
      case In::ml_literal:
        if (starts("'''")) {
          state = In::code;
          i += 2;
        }
        break;
    }
  }
}

/// Parses a TOML document; a syntax error becomes SpecError "origin:line: not valid TOML: why".
/// Defined in toml_parse.cpp, the one place toml++'s parser is compiled (with its internal
/// checks turned into errors).
toml::table parse(std::string_view text, std::string_view origin);

/// "origin:line" of a node (just origin when the node has no position).
inline std::string where(std::string_view origin, const toml::node* node) {
  std::string out(origin);
  if (node != nullptr && node->source().begin.line > 0)
    out += ":" + std::to_string(node->source().begin.line);
  return out;
}

/// "origin:line: field 'field' = value: expected expected": the one wording of a bad field.
inline std::string field_message(std::string_view origin, const toml::node* node, std::string_view field,
                                 const std::string& value, std::string_view expected) {
  return where(origin, node) + ": field '" + std::string(field) + "' = " + value + ": expected " +
         std::string(expected);
}

/// Throws SpecError "origin:line: field 'field' = value: expected expected".
[[noreturn]] inline void fail(std::string_view origin, const toml::node* node, std::string_view field,
                              const std::string& value, std::string_view expected) {
  throw SpecError(field_message(origin, node, field, value, expected));
}

/// A node's value as a user wrote it ("\"text\"", 3, true), or "a table" / "an array".
inline std::string show(const toml::node& n) {
  std::ostringstream s;
  if (n.is_string()) {
    s << '"' << n.value<std::string>().value_or("") << '"';
  } else if (n.is_table()) {
    s << "a table";
  } else if (n.is_array()) {
    s << "an array";
  } else {
    n.visit([&](const auto& v) { s << v; });
  }
  return s.str();
}

/// Reads the fields of one table with every error in the one wording. `prefix` ("memory.") names
/// the fields of a nested table; a reader of an absent table finds no keys, and points errors
/// about missing ones at the enclosing table.
class TableReader {
 public:
  /// A reader of `t`, from the file `origin`, naming its fields `prefix` + key.
  TableReader(const toml::table& t, std::string_view origin, std::string prefix = {})
      : t_(&t), at_(&t), origin_(origin), prefix_(std::move(prefix)) {}

  /// The file the table comes from.
  std::string_view origin() const { return origin_; }
  /// The table read (nullptr for an absent one).
  const toml::table* table() const { return t_; }
  /// The node errors about the table point at: the table, or where an absent one would be.
  const toml::node* anchor() const { return at_; }
  /// The field name of `key` in messages: prefix + key.
  std::string field(std::string_view key) const { return prefix_ + std::string(key); }
  /// The value of `key`, or nullptr.
  const toml::node* node(std::string_view key) const { return t_ == nullptr ? nullptr : t_->get(key); }
  /// Whether the table has `key`.
  bool has(std::string_view key) const { return node(key) != nullptr; }

  /// The message of a bad `key` = `value` (at the key's line, else the table's).
  std::string message(std::string_view key, const std::string& value, std::string_view expected) const {
    const toml::node* n = node(key);
    return field_message(origin_, n != nullptr ? n : at_, field(key), value, expected);
  }
  /// Throws SpecError: `key` = `value` is not `expected`.
  [[noreturn]] void fail(std::string_view key, const std::string& value, std::string_view expected) const {
    throw SpecError(message(key, value, expected));
  }
  /// Throws SpecError: `key` (its value as written, or "(missing)") is not `expected`.
  [[noreturn]] void fail(std::string_view key, std::string_view expected) const {
    const toml::node* n = node(key);
    fail(key, n != nullptr ? show(*n) : std::string("(missing)"), expected);
  }
  /// Throws SpecError at node `n` (an array element, say) of field `key`.
  [[noreturn]] void fail_at(const toml::node& n, std::string_view key, std::string_view expected) const {
    io::detail::fail(origin_, &n, field(key), show(n), expected);
  }

  /// Refuses any key not in `keys`: "expected <what> (a, b, c); closest known names: ...".
  void only(std::vector<std::string_view> keys, std::string_view what = "a known key") const {
    if (t_ == nullptr) return;
    std::sort(keys.begin(), keys.end());
    for (const auto& [k, v] : *t_) {
      if (std::find(keys.begin(), keys.end(), k.str()) != keys.end()) continue;
      const std::vector<std::string> known(keys.begin(), keys.end());
      io::detail::fail(origin_, &v, field(k.str()), show(v),
                       std::string(what) + " (" + lpemu::detail::join_names(known) + ")" +
                           lpemu::detail::closest_names_hint(k.str(), known));
    }
  }

  /// An optional string.
  std::optional<std::string> opt_str(std::string_view key) const {
    const toml::node* n = node(key);
    if (n == nullptr) return std::nullopt;
    if (!n->is_string()) fail(key, "a string");
    return *n->value<std::string>();
  }
  /// An optional string, `def` when absent.
  std::string str(std::string_view key, std::string def = {}) const {
    return opt_str(key).value_or(std::move(def));
  }
  /// A required string.
  std::string required_str(std::string_view key) const {
    auto s = opt_str(key);
    if (!s) fail(key, "a string");
    return *s;
  }

  /// An optional integer in lo..hi (`expected` defaults to "an integer in lo..hi").
  std::optional<long long> opt_integer(std::string_view key, long long lo, long long hi,
                                       std::string_view expected = {}) const {
    const toml::node* n = node(key);
    if (n == nullptr) return std::nullopt;
    const std::string what = expected.empty() ? range_text(lo, hi) : std::string(expected);
    if (!n->is_integer()) fail(key, what);
    const auto v = *n->value<std::int64_t>();
    if (v < lo || v > hi) fail(key, std::to_string(v), what);
    return v;
  }
  /// An optional integer in lo..hi, `def` when absent.
  long long integer(std::string_view key, long long def, long long lo, long long hi,
                    std::string_view expected = {}) const {
    return opt_integer(key, lo, hi, expected).value_or(def);
  }
  /// A required integer in lo..hi.
  long long required_integer(std::string_view key, long long lo, long long hi,
                             std::string_view expected = {}) const {
    const auto v = opt_integer(key, lo, hi, expected);
    if (!v) fail(key, expected.empty() ? range_text(lo, hi) : std::string(expected));
    return *v;
  }

  /// An optional number (integer or float) in lo..hi.
  std::optional<double> opt_number(std::string_view key, double lo, double hi,
                                   std::string_view expected) const {
    const toml::node* n = node(key);
    if (n == nullptr) return std::nullopt;
    if (!n->is_number()) fail(key, expected);
    const double v = n->is_integer() ? static_cast<double>(*n->value<std::int64_t>()) : *n->value<double>();
    if (!(v >= lo && v <= hi)) fail(key, expected);
    return v;
  }
  /// An optional number in lo..hi, `def` when absent.
  double number(std::string_view key, double def, double lo, double hi, std::string_view expected) const {
    return opt_number(key, lo, hi, expected).value_or(def);
  }
  /// A required number in lo..hi.
  double required_number(std::string_view key, double lo, double hi, std::string_view expected) const {
    const auto v = opt_number(key, lo, hi, expected);
    if (!v) fail(key, expected);
    return *v;
  }

  /// An optional boolean, `def` when absent.
  bool boolean(std::string_view key, bool def) const {
    const toml::node* n = node(key);
    if (n == nullptr) return def;
    if (!n->is_boolean()) fail(key, "true or false");
    return *n->value<bool>();
  }

  /// An optional sub-table, read with prefix "key." (absent: a reader that finds no keys).
  TableReader sub(std::string_view key) const {
    const toml::node* n = node(key);
    if (n == nullptr) return TableReader(nullptr, at_, origin_, field(key) + ".");
    if (!n->is_table()) fail(key, "a table");
    return TableReader(*n->as_table(), origin_, field(key) + ".");
  }
  /// A required sub-table, read with prefix "key.".
  TableReader required_sub(std::string_view key) const {
    if (!has(key)) fail(key, "a table");
    return sub(key);
  }
  /// An optional array of tables ([[key]]), each read with prefix "key.".
  std::vector<TableReader> tables(std::string_view key) const {
    std::vector<TableReader> out;
    const toml::node* n = node(key);
    if (n == nullptr) return out;
    const std::string what = "an array of tables ([[" + field(key) + "]])";
    if (!n->is_array()) fail(key, what);
    for (const toml::node& e : *n->as_array()) {
      if (!e.is_table()) fail_at(e, key, what);
      out.emplace_back(*e.as_table(), origin_, field(key) + ".");
    }
    return out;
  }

  /// An optional array of strings (empty when absent).
  std::vector<std::string> strings(std::string_view key) const {
    std::vector<std::string> out;
    const toml::node* n = node(key);
    if (n == nullptr) return out;
    if (!n->is_array()) fail(key, "an array of strings");
    for (const toml::node& e : *n->as_array()) {
      if (!e.is_string()) fail_at(e, key, "an array of strings");
      out.push_back(*e.value<std::string>());
    }
    return out;
  }
  /// An optional array of integers in lo..hi (empty when absent; `expected` defaults to "an
  /// array of integers in lo..hi").
  template <class I = int>
  std::vector<I> integers(std::string_view key, long long lo, long long hi,
                          std::string_view expected = {}) const {
    std::vector<I> out;
    const toml::node* n = node(key);
    if (n == nullptr) return out;
    const std::string what = expected.empty()
                                 ? "an array of integers in " + std::to_string(lo) + ".." + std::to_string(hi)
                                 : std::string(expected);
    if (!n->is_array()) fail(key, what);
    for (const toml::node& e : *n->as_array()) {
      const auto v = e.value<std::int64_t>();
      if (!e.is_integer() || !v || *v < lo || *v > hi) fail_at(e, key, what);
      out.push_back(static_cast<I>(*v));
    }
    return out;
  }

  /// An optional string naming a value of `table` (an enum name table of lpemu/detail/names.hpp):
  /// "expected one of "a", "b", "c"; closest known names: ..." otherwise.
  template <class E, std::size_t N>
  std::optional<E> opt_choice(std::string_view key, const lpemu::detail::EnumName<E> (&table)[N]) const {
    const auto s = opt_str(key);
    if (!s) return std::nullopt;
    if (const auto v = lpemu::detail::enum_value(table, *s)) return *v;
    fail(key, '"' + *s + '"',
         "one of " + lpemu::detail::join_names(lpemu::detail::enum_spellings(table, "\"")) +
             lpemu::detail::closest_names_hint(*s, lpemu::detail::enum_spellings(table)));
  }
  /// An optional choice of `table`, `def` when absent.
  template <class E, std::size_t N>
  E choice(std::string_view key, E def, const lpemu::detail::EnumName<E> (&table)[N]) const {
    return opt_choice(key, table).value_or(def);
  }

 private:
  TableReader(std::nullptr_t, const toml::node* at, std::string_view origin, std::string prefix)
      : at_(at), origin_(origin), prefix_(std::move(prefix)) {}

  static std::string range_text(long long lo, long long hi) {
    return "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
  }

  const toml::table* t_ = nullptr;
  const toml::node* at_ = nullptr;
  std::string_view origin_;
  std::string prefix_;
};

/// Writes TOML text, the one way a record's to_toml spells its fields: keys in the order written,
/// strings quoted with TOML basic-string escapes, reals as the shortest decimal that reads back as
/// the same double (io::format_number), tables as [header] / [[header]] sections.
class TomlWriter {
 public:
  /// A TOML basic string: `s` between double quotes, with \\ \" and control characters escaped.
  static std::string quote(std::string_view s) {
    std::string out = "\"";
    for (const char c : s) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
            out += buf;
          } else {
            out += c;
          }
      }
    }
    return out + "\"";
  }
  /// A key: bare when it is A-Za-z0-9_- only, else quoted.
  static std::string key(std::string_view k) {
    const bool bare = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
             c == '-';
    });
    return bare ? std::string(k) : quote(k);
  }
  /// A real: the shortest round-trip decimal ("448", "0.1", "1e-06", "nan", "inf"); zeros and
  /// integral values beyond int64 get ".0" so that TOML reads a float ("-0.0" keeps its sign).
  static std::string number_text(double v) {
    std::string s = io::format_number(v, io::NumberStyle::shortest);
    // "-0" and integers beyond int64 would read as TOML integers (losing the sign, or failing).
    if (s.find_first_of(".eEni") == std::string::npos && (v == 0 || v >= 9.2e18 || v <= -9.2e18)) s += ".0";
    return s;
  }
  /// An array of strings ["a", "b"].
  static std::string strings_text(const std::vector<std::string>& v) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + quote(v[i]);
    return out + "]";
  }
  /// An array of integers [1, 2].
  template <class I>
  static std::string integers_text(const std::vector<I>& v) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
    return out + "]";
  }
  /// An inline table { k = v, ... } of already spelled values.
  static std::string inline_table(const std::vector<std::pair<std::string, std::string>>& kv) {
    std::string out = "{ ";
    for (std::size_t i = 0; i < kv.size(); ++i)
      out += (i ? ", " : "") + key(kv[i].first) + " = " + kv[i].second;
    return out + (kv.empty() ? "}" : " }");
  }

  /// `# text` on a line of its own.
  TomlWriter& comment(std::string_view text) {
    out_ += "# " + std::string(text) + "\n";
    return *this;
  }
  /// key = value, `value` already spelled in TOML.
  TomlWriter& raw(std::string_view k, std::string_view value) {
    out_ += key(k) + " = " + std::string(value) + "\n";
    return *this;
  }
  TomlWriter& str(std::string_view k, std::string_view v) { return raw(k, quote(v)); }
  /// key = "v" unless v is empty.
  TomlWriter& str_if(std::string_view k, std::string_view v) { return v.empty() ? *this : str(k, v); }
  TomlWriter& integer(std::string_view k, long long v) { return raw(k, std::to_string(v)); }
  TomlWriter& number(std::string_view k, double v) { return raw(k, number_text(v)); }
  TomlWriter& boolean(std::string_view k, bool v) { return raw(k, v ? "true" : "false"); }
  TomlWriter& strings(std::string_view k, const std::vector<std::string>& v) {
    return raw(k, strings_text(v));
  }
  /// key = [...] unless v is empty.
  TomlWriter& strings_if(std::string_view k, const std::vector<std::string>& v) {
    return v.empty() ? *this : strings(k, v);
  }
  template <class I>
  TomlWriter& integers(std::string_view k, const std::vector<I>& v) {
    return raw(k, integers_text(v));
  }
  /// A [header] section (dotted headers as given: "derive.rates.fp4").
  TomlWriter& table(std::string_view header) {
    out_ += "\n[" + std::string(header) + "]\n";
    return *this;
  }
  /// A [[header]] element of an array of tables.
  TomlWriter& array_table(std::string_view header) {
    out_ += "\n[[" + std::string(header) + "]]\n";
    return *this;
  }
  /// The text written so far.
  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

}  // namespace lpemu::io::detail
