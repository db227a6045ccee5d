// How lpemu writes numbers and codes as text (one formatter for reals, one for hex codes) and
// reads the simple fields of its text inputs (lists, unsigned integers).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lpemu::io {

/// How format_number writes a double.
enum class NumberStyle : std::uint8_t {
  shortest,     ///< the shortest decimal that reads back as the same double ("448", "0.001953125")
  significant,  ///< `digits` significant digits, as printf's %g ("1.23e+04")
  fixed,        ///< `digits` digits after the point, as printf's %f
  trimmed,      ///< as fixed, then trailing zeros and a trailing point dropped; "-0" is "0"
};

/// `v` as text in `style`: NaN is "nan" ("-nan" with the sign bit set), ±Inf is "inf" / "-inf".
inline std::string format_number(double v, NumberStyle style = NumberStyle::shortest, int digits = 6) {
  if (std::isnan(v)) return std::signbit(v) ? "-nan" : "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[512];
  if (style == NumberStyle::shortest) {
    const auto res = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, res.ptr);
  }
  std::snprintf(buf, sizeof buf, style == NumberStyle::significant ? "%.*g" : "%.*f", digits, v);
  std::string s = buf;
  if (style == NumberStyle::trimmed && s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return style == NumberStyle::trimmed && s == "-0" ? "0" : s;
}

/// `v` in lowercase hex, zero-padded to at least `digits` digits, after "0x" when `prefix`.
inline std::string format_hex(std::uint64_t v, int digits = 1, bool prefix = true) {
  char buf[40];
  std::snprintf(buf, sizeof buf, prefix ? "0x%0*llx" : "%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

/// `s` cut at every `sep` (a trailing `sep` gives a last empty field; "" gives no field).
inline std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.emplace_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

/// `s` without leading spaces/tabs and trailing spaces/tabs/carriage returns.
inline std::string trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return std::string(s);
}

/// An unsigned integer written in decimal, 0x hex or 0b binary (all of `text`); nullopt when
/// `text` is not one or does not fit 64 bits.
inline std::optional<std::uint64_t> parse_unsigned(std::string_view text) {
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
    base = 16;
  } else if (text.size() > 2 && text[0] == '0' && (text[1] == 'b' || text[1] == 'B')) {
    text.remove_prefix(2);
    base = 2;
  }
  std::uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v, base);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return v;
}

}  // namespace lpemu::io
