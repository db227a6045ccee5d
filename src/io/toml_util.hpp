// Private helpers shared by every TOML spec loader (formats, block formats, datapaths, plans,
// experiments, cost files): positions, value printing and the one error-message shape
// "file:line: field 'x' = value: expected ...".
#pragma once

#include <sstream>
#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "lpemu/error.hpp"

namespace lpemu::io::detail {

/// Parses a TOML document; a syntax error becomes SpecError "origin:line: not valid TOML: why".
inline toml::table parse(std::string_view text, std::string_view origin) {
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    throw SpecError(std::string(origin) + ":" + std::to_string(e.source().begin.line) +
                    ": not valid TOML: " + std::string(e.description()));
  }
}

/// "origin:line" of a node (just origin when the node has no position).
inline std::string where(std::string_view origin, const toml::node* node) {
  std::string out(origin);
  if (node != nullptr && node->source().begin.line > 0) out += ":" + std::to_string(node->source().begin.line);
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
