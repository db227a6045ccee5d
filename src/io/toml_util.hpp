// Private helpers shared by every TOML spec loader (formats, block formats, datapaths, plans,
// experiments, cost files): positions, value printing and the one error-message shape
// "file:line: field 'x' = value: expected ...".
#pragma once

#include <sstream>
#include <string>
#include <string_view>

#include "io/toml.hpp"

#include "lpemu/error.hpp"

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

/// Throws SpecError "origin:line: field 'field' = value: expected expected".
[[noreturn]] inline void fail(std::string_view origin, const toml::node* node, std::string_view field,
                              const std::string& value, std::string_view expected) {
  throw SpecError(where(origin, node) + ": field '" + std::string(field) + "' = " + value + ": expected " +
                  std::string(expected));
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

}  // namespace lpemu::io::detail
