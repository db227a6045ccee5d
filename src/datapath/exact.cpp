// Exact c + Σ a_i·b_i with Boost.Multiprecision: every decoded value is an exact double
// (format::decode is exact for every format), so each term is m·2^e with integer m and the sum is
// one cpp_int at the smallest exponent. Independent of the block engine in dot.cpp.
#include "lpemu/datapath/exact.hpp"

#include <climits>
#include <cmath>
#include <sstream>

#include <boost/multiprecision/cpp_bin_float.hpp>
#include <boost/multiprecision/cpp_int.hpp>

#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::datapath {
namespace {

using boost::multiprecision::cpp_int;

struct Part {
  cpp_int m;  // signed
  int e;
};

// x = m·2^e with an integer m of at most 53 bits.
Part split(double x) {
  int ex = 0;
  const double fr = std::frexp(x, &ex);
  const auto m = static_cast<std::int64_t>(std::ldexp(fr, 53));
  return Part{cpp_int(m), ex - 53};
}

ExactValue from_cpp(const cpp_int& s, int e) {
  ExactValue v;
  v.negative = s < 0;
  cpp_int m = v.negative ? cpp_int(-s) : s;
  v.exponent = e;
  while (m != 0) {
    v.magnitude.push_back(static_cast<std::uint32_t>(m & 0xffffffffu));
    m >>= 32;
  }
  return v;
}

cpp_int to_cpp(const ExactValue& v) {
  cpp_int m = 0;
  for (std::size_t i = v.magnitude.size(); i-- > 0;) m = (m << 32) | v.magnitude[i];
  return m;
}

using Big = boost::multiprecision::number<boost::multiprecision::cpp_bin_float<200>>;

}  // namespace

double ExactValue::to_double() const {
  if (nan) return std::nan("");
  if (inf) return negative ? -HUGE_VAL : HUGE_VAL;
  if (magnitude.empty()) return negative ? -0.0 : 0.0;
  // Round the integer to 53 bits (nearest even) by hand, then scale exactly (ldexp of a 53-bit
  // integer is exact unless the result is subnormal, where ldexp rounds once more: acceptable for
  // error measurement, documented).
  cpp_int m = to_cpp(*this);
  int e = exponent;
  const auto w = static_cast<int>(boost::multiprecision::msb(m)) + 1;
  if (w > 53) {
    const int sh = w - 53;
    const cpp_int rem = m & ((cpp_int(1) << sh) - 1);
    m >>= sh;
    const cpp_int half = cpp_int(1) << (sh - 1);
    if (rem > half || (rem == half && (m & 1) != 0)) m += 1;
    e += sh;
  }
  const double d = std::ldexp(static_cast<double>(static_cast<std::uint64_t>(m)), e);
  return negative ? -d : d;
}

std::string ExactValue::to_string(int digits) const {
  if (nan) return "nan";
  if (inf) return negative ? "-inf" : "inf";
  if (magnitude.empty()) return negative ? "-0" : "0";
  Big v(to_cpp(*this));
  v = boost::multiprecision::ldexp(v, exponent);
  if (negative) v = -v;
  std::ostringstream s;
  s.precision(digits > 1 ? digits - 1 : 0);
  s << std::scientific << v;
  return s.str();
}

ExactValue exact_dot(const format::Format& fa, const format::Format& fb, const format::Format& fc,
                     std::span<const std::uint64_t> a, std::span<const std::uint64_t> b, std::uint64_t c,
                     const BlockScales& scales, int scale_block) {
  if (a.size() != b.size()) {
    throw ShapeError("exact_dot: a has " + std::to_string(a.size()) + " elements but b has " +
                     std::to_string(b.size()));
  }
  bool nan = false;
  bool pinf = false;
  bool ninf = false;
  std::vector<Part> parts;
  parts.reserve(a.size() + 1);
  auto scale = [&](std::span<const std::int32_t> s, std::size_t k) -> std::int32_t {
    if (s.empty() || scale_block <= 0) return 0;
    return s[k / static_cast<std::size_t>(scale_block)];
  };
  for (std::size_t k = 0; k < a.size(); ++k) {
    const double x = format::decode(fa, a[k]);
    const double y = format::decode(fb, b[k]);
    const std::int32_t s = scale(scales.a, k);
    const std::int32_t t = scale(scales.b, k);
    if (std::isnan(x) || std::isnan(y) || s == kNanScale || t == kNanScale) {
      nan = true;
      continue;
    }
    if (std::isinf(x) || std::isinf(y)) {
      if (x == 0.0 || y == 0.0)
        nan = true;
      else
        ((std::signbit(x) != std::signbit(y)) ? ninf : pinf) = true;
      continue;
    }
    if (x == 0.0 || y == 0.0) continue;
    Part px = split(x);
    const Part py = split(y);
    cpp_int m = px.m * py.m;
    const std::size_t blk = scale_block > 0 ? k / static_cast<std::size_t>(scale_block) : 0;
    if (scale_block > 0 && !scales.a_significand.empty()) m *= scales.a_significand[blk];
    if (scale_block > 0 && !scales.b_significand.empty()) m *= scales.b_significand[blk];
    if (m == 0) continue;
    parts.push_back(Part{m, px.e + py.e + s + t});
  }
  const double cv = format::decode(fc, c);
  if (std::isnan(cv))
    nan = true;
  else if (std::isinf(cv))
    (cv < 0 ? ninf : pinf) = true;
  else if (cv != 0.0)
    parts.push_back(split(cv));
  ExactValue out;
  if (nan || (pinf && ninf)) {
    out.nan = true;
    return out;
  }
  if (pinf || ninf) {
    out.inf = true;
    out.negative = ninf;
    return out;
  }
  if (parts.empty()) return out;
  int emin = INT_MAX;
  for (const Part& p : parts) emin = std::min(emin, p.e);
  cpp_int sum = 0;
  for (const Part& p : parts) sum += p.m << (p.e - emin);
  return from_cpp(sum, emin);
}

ExactValue exact_dot(const Datapath& dp, std::span<const std::uint64_t> a, std::span<const std::uint64_t> b,
                     std::uint64_t c, const BlockScales& scales) {
  return exact_dot(dp.a, dp.b, dp.output(), a, b, c, scales, dp.scale_block);
}

}  // namespace lpemu::datapath
