#include "support/reference/block_reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <boost/multiprecision/cpp_int.hpp>

namespace lpemu::test::ref {
namespace {

using Rat = boost::multiprecision::cpp_rational;
using Int = boost::multiprecision::cpp_int;

Rat exact(double x) {
  // x = m · 2^e with integer m (53 bits): exact conversion without lpemu code.
  int e = 0;
  const double fr = std::frexp(x, &e);
  const auto m = static_cast<long long>(std::ldexp(fr, 53));
  Rat r(m);
  const int sh = e - 53;
  if (sh >= 0) {
    r *= Rat(Int(1) << sh);
  } else {
    r /= Rat(Int(1) << (-sh));
  }
  return r;
}

Rat pow2(int e) { return e >= 0 ? Rat(Int(1) << e) : Rat(Int(1), Int(1) << (-e)); }

// Exponent of a positive rational: 2^e <= r < 2^(e+1).
int rat_floor_log2(const Rat& r) {
  int e = 0;
  while (r >= pow2(e + 1)) ++e;
  while (r < pow2(e)) --e;
  return e;
}

double to_double(const Rat& r) {
  // Values here are grid values times powers of two: exact in double. Convert via num/den.
  return static_cast<double>(boost::multiprecision::numerator(r)) /
         static_cast<double>(boost::multiprecision::denominator(r));
}

Rat round_rat(const Rat& x, const Grid& g, Mode mode) {
  const bool neg = x < 0;
  const Rat a = neg ? Rat(-x) : x;
  if (a == 0) return Rat(0);
  int qexp = 0;
  if (g.fixed) {
    qexp = g.quantum_exp;
  } else {
    const int e = std::max(rat_floor_log2(a), g.emin);
    qexp = g.subnormals ? e - g.p + 1 : (rat_floor_log2(a) < g.emin ? g.emin : e - g.p + 1);
  }
  const Rat q = pow2(qexp);
  const Rat n = a / q;
  Int fl = boost::multiprecision::numerator(n) / boost::multiprecision::denominator(n);
  const Rat frac = n - Rat(fl);
  bool up = false;
  switch (mode) {
    case Mode::nearest_even: up = frac > Rat(1, 2) || (frac == Rat(1, 2) && (fl % 2) != 0); break;
    case Mode::nearest_away: up = frac >= Rat(1, 2); break;
    case Mode::toward_zero: up = false; break;
    case Mode::toward_positive: up = frac != 0 && !neg; break;
    case Mode::toward_negative: up = frac != 0 && neg; break;
  }
  if (up) fl += 1;
  Rat v = Rat(fl) * q;
  if (!g.fixed && !g.subnormals && rat_floor_log2(a) < g.emin && fl == 0) v = 0;
  const Rat mx = exact(g.max);
  if (v > mx) v = mx;
  return neg ? Rat(-v) : v;
}

// Zero results keep x's sign, except on integer grids, which have no −0.
double signed_result(const Rat& v, double x, const Grid& g) {
  const double d = to_double(v);
  if (d != 0.0) return d;
  return g.fixed ? 0.0 : std::copysign(0.0, x);
}

}  // namespace

Grid fp8_e4m3() { return {false, 4, -6, 448.0, true, 0}; }
Grid fp8_e5m2() { return {false, 3, -14, 57344.0, true, 0}; }
Grid fp6_e2m3() { return {false, 4, 0, 7.5, true, 0}; }
Grid fp6_e3m2() { return {false, 3, -2, 28.0, true, 0}; }
Grid fp4_e2m1() { return {false, 2, 0, 6.0, true, 0}; }
Grid mxint8() { return {true, 0, 0, 127.0 / 64.0, false, -6}; }
Grid int8() { return {true, 0, 0, 127.0, false, 0}; }
Grid fp32() { return {false, 24, -126, static_cast<double>(std::numeric_limits<float>::max()), true, 0}; }

int floor_log2(double a) { return rat_floor_log2(exact(a)); }

int grid_emax(const Grid& g) { return floor_log2(g.max); }

double round_to_grid(double x, const Grid& g, Mode mode) {
  return signed_result(round_rat(exact(x), g, mode), x, g);
}

double round_scaled_pow2(double x, int s, const Grid& g, Mode mode) {
  const Rat v = round_rat(exact(x) / pow2(s), g, mode) * pow2(s);
  return signed_result(v, x, g);
}

double round_scaled(double x, double s1, double s2, const Grid& g, Mode mode) {
  const Rat S = exact(s1) * exact(s2);
  const Rat v = round_rat(exact(x) / S, g, mode) * S;
  // The product may need more than 53 bits only for wide formats; callers use narrow ones.
  return signed_result(v, x, g);
}

MxBlock mx_block(const std::vector<float>& x, const Grid& elem, const std::string& rule, Mode mode) {
  MxBlock b;
  double amax = 0;
  for (float v : x) {
    if (!std::isfinite(v)) {
      b.nan = true;
      b.out.assign(x.size(), std::numeric_limits<double>::quiet_NaN());
      return b;
    }
    amax = std::max(amax, std::fabs(static_cast<double>(v)));
  }
  const int emax = grid_emax(elem);
  int s = -127;
  if (amax > 0) {
    if (rule == "ocp") {
      s = floor_log2(amax) - emax;
    } else if (rule == "ceil") {
      s = -400;
      while (exact(amax) > exact(elem.max) * pow2(s)) ++s;
    } else if (rule == "even") {
      const int p = elem.fixed ? emax - elem.quantum_exp + 1 : elem.p;
      const Grid g{false, p, -100000, std::numeric_limits<double>::max(), true, 0};
      s = floor_log2(round_to_grid(amax, g, Mode::nearest_away)) - emax;
    } else {
      throw std::invalid_argument("mx_block: unknown rule " + rule);
    }
  }
  if (s > 127) {
    b.nan = true;
    b.out.assign(x.size(), std::numeric_limits<double>::quiet_NaN());
    return b;
  }
  s = std::max(s, -127);
  b.shared_exp = s;
  for (float v : x) b.out.push_back(round_scaled_pow2(v, s, elem, mode));
  return b;
}

std::vector<double> nvfp4(const std::vector<float>& x) {
  double amax_t = 0;
  for (float v : x) amax_t = std::max(amax_t, std::fabs(static_cast<double>(v)));
  double g = 1;
  if (amax_t > 0) {
    const Rat gr = round_rat(exact(amax_t) / Rat(6 * 448), fp32(), Mode::nearest_even);
    g = to_double(gr);
    if (g == 0) g = 1;
  }
  std::vector<double> out;
  for (std::size_t b0 = 0; b0 < x.size(); b0 += 16) {
    const std::size_t b1 = std::min(x.size(), b0 + 16);
    double amax = 0;
    for (std::size_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
    const Rat sb = round_rat(exact(amax) / (Rat(6) * exact(g)), fp8_e4m3(), Mode::nearest_even);
    const double sbd = to_double(sb);
    for (std::size_t i = b0; i < b1; ++i) {
      if (sbd == 0) {
        out.push_back(std::copysign(0.0, static_cast<double>(x[i])));
        continue;
      }
      const double v = round_scaled(x[i], sbd, g, fp4_e2m1(), Mode::nearest_even);
      out.push_back(static_cast<double>(static_cast<float>(v)));
    }
  }
  return out;
}

}  // namespace lpemu::test::ref
