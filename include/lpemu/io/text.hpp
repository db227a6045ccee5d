// How lpemu writes numbers and codes as text: one formatter for reals, one for hex codes.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

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

}  // namespace lpemu::io
