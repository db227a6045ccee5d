// Scalar conversions on a double carrier: the generic path every format takes, and the
// definition the fast bulk kernels (codec_bulk.cpp) must match bit for bit.
#include "lpemu/format/codec.hpp"
#include "lpemu/io/text.hpp"

#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "format/codec_detail.hpp"
#include "lpemu/error.hpp"

namespace lpemu::format {
namespace detail {

std::uint64_t round_to_quantum(double a, int qe, RoundingMode mode, bool negative, std::uint32_t random,
                               int sr_bits) {
  const auto u = std::bit_cast<std::uint64_t>(a);
  const int be = static_cast<int>(u >> 52);
  const std::uint64_t frac = u & ((std::uint64_t{1} << 52) - 1);
  const std::uint64_t sig = be == 0 ? frac : (frac | (std::uint64_t{1} << 52));
  const int lsb_e = (be == 0 ? 1 : be) - 1075;  // value = sig · 2^lsb_e
  const int shift = qe - lsb_e;
  if (shift <= 0) return sig << -shift;  // exact; callers keep a/2^qe below 2^63
  std::uint64_t n = 0;
  std::uint64_t rem = sig;
  bool above_half = false;
  bool at_half = false;
  if (shift < 64) {
    n = sig >> shift;
    rem = sig & ((std::uint64_t{1} << shift) - 1);
    const std::uint64_t half = std::uint64_t{1} << (shift - 1);
    above_half = rem > half;
    at_half = rem == half;
  }
  bool up = false;
  switch (mode) {
    case RoundingMode::nearest_even: up = above_half || (at_half && (n & 1) != 0); break;
    case RoundingMode::nearest_away: up = above_half || at_half; break;
    case RoundingMode::toward_zero: up = false; break;
    case RoundingMode::toward_positive: up = rem != 0 && !negative; break;
    case RoundingMode::toward_negative: up = rem != 0 && negative; break;
    case RoundingMode::stochastic: {
      // The r leading bits of the discarded fraction plus r random bits; a carry rounds up.
      up = sr_round_up(rem, shift, sr_bits, random) != 0;
      break;
    }
  }
  return n + (up ? 1 : 0);
}

namespace {

bool toward_zero_for(RoundingMode mode, bool negative) {
  return mode == RoundingMode::toward_zero || (mode == RoundingMode::toward_positive && negative) ||
         (mode == RoundingMode::toward_negative && !negative);
}

// Code of a finite magnitude `v` (exactly representable, v >= 0) of a floating format.
std::uint64_t float_magnitude_code(const Format& f, double v) {
  if (v == 0.0) return 0;
  const int m = f.mantissa_bits;
  const int ex = std::ilogb(v);
  if (ex < f.emin) {  // subnormal: field 0
    return static_cast<std::uint64_t>(std::ldexp(v, m - f.emin));
  }
  const auto field = static_cast<std::uint64_t>(ex + f.bias);
  const auto sig = static_cast<std::uint64_t>(std::ldexp(v, m - ex));  // in [2^m, 2^(m+1))
  return (field << m) | (sig - (std::uint64_t{1} << m));
}

Converted special(const Format& f, std::uint64_t code) { return {code, decode(f, code)}; }

Converted convert_integer(const Format& f, double x, const ConvertOptions& o, std::uint64_t index) {
  const std::uint64_t mask = f.code_mask();
  if (std::isnan(x)) return {0, 0.0};  // integers have no NaN: documented result +0
  const bool neg = std::signbit(x);
  const double a = std::fabs(x);
  double v = 0;
  const double bound = neg ? -f.lowest : f.max_finite;
  if (a > bound) {
    v = bound;  // integers always saturate (also ±Inf)
  } else {
    const std::uint32_t rnd = o.rounding == RoundingMode::stochastic ? sr_random_bits(o.seed, index) : 0;
    const std::uint64_t n = round_to_quantum(a, -f.fraction_bits, o.rounding, neg, rnd, o.sr_bits);
    v = std::fmin(std::ldexp(static_cast<double>(n), -f.fraction_bits), bound);
  }
  if (v == 0.0) return {0, 0.0};
  const double k = std::ldexp(neg ? -v : v, f.fraction_bits);  // exact integer
  const auto code = static_cast<std::uint64_t>(static_cast<std::int64_t>(k)) & mask;
  return {code, neg ? -v : v};
}

}  // namespace

Converted convert(const Format& f, double x, const ConvertOptions& o, std::uint64_t index,
                  double input_min_normal) {
  if (o.flush_subnormal_inputs && std::fabs(x) < input_min_normal) x = std::copysign(0.0, x);
  if (f.kind == Kind::integer) return convert_integer(f, x, o, index);

  const bool neg = std::signbit(x);
  const std::uint64_t sign = neg && f.is_signed ? f.sign_bit() : 0;
  // Full codes of the special outcomes for this sign.
  const auto signed_nan = [&] { return f.specials == Specials::fnuz ? f.nan_code() : (f.nan_code() | sign); };
  const auto max_code = [&] { return f.max_code | sign; };

  if (std::isnan(x)) return f.has_nan() ? special(f, signed_nan()) : Converted{0, 0.0};
  if (!f.is_signed && neg && x != 0.0) {
    // Negative input to an unsigned format is out of range (NaN where the format has one).
    if (o.overflow == Overflow::native && f.has_nan()) return special(f, f.nan_code());
    return special(f, 0);  // code 0: zero, or the minimum of a zero-less format
  }
  if (std::isinf(x)) {
    if (o.overflow == Overflow::saturate || !f.has_nan()) return special(f, max_code());
    return special(f, f.has_inf() ? (f.inf_code() | sign) : signed_nan());
  }
  const double a = std::fabs(x);
  if (!f.has_zero && a == 0.0) {
    // Zero is not representable (E8M0): NaN under the native rule, else the minimum.
    return special(f, o.overflow == Overflow::native && f.has_nan() ? f.nan_code() : 0);
  }

  double v = 0;
  if (a != 0.0) {
    const int m = f.mantissa_bits;
    const int ex = std::ilogb(a);
    // IEEE 754-2019 §4.3: round to the grid of the binade of `a`; below the
    // smallest normal the grid is the subnormal quantum, or min normal itself without subnormals.
    const int qe = ex >= f.emin ? ex - m : (f.subnormals ? f.emin - m : f.emin);
    if (ex > f.emax + 1) {
      v = std::numeric_limits<double>::infinity();  // certainly overflows; avoids a huge shift
    } else {
      const std::uint32_t rnd = o.rounding == RoundingMode::stochastic ? sr_random_bits(o.seed, index) : 0;
      const std::uint64_t n = round_to_quantum(a, qe, o.rounding, neg, rnd, o.sr_bits);
      v = std::ldexp(static_cast<double>(n), qe);
    }
    if (v > f.max_finite) {
      const bool to_max =
          o.overflow == Overflow::saturate || !f.has_nan() || toward_zero_for(o.rounding, neg);
      if (to_max) return special(f, max_code());
      return special(f, f.has_inf() ? (f.inf_code() | sign) : signed_nan());
    }
    if (v < f.min_normal && o.flush_subnormal_outputs) v = 0;
    if (!f.has_zero && v < f.min_normal) v = f.min_normal;  // no zero: the minimum absorbs underflow
  }
  std::uint64_t code = float_magnitude_code(f, v);
  if (code != 0 || f.has_negative_zero()) code |= sign;
  return special(f, code);
}

}  // namespace detail

double quantize(const Format& fmt, double x, const ConvertOptions& opts, std::uint64_t index) {
  return detail::convert(fmt, x, opts, index, std::numeric_limits<double>::min()).value;
}

double quantize(const Format& fmt, float x, const ConvertOptions& opts, std::uint64_t index) {
  return detail::convert(fmt, x, opts, index, std::numeric_limits<float>::min()).value;
}

std::uint64_t encode(const Format& fmt, double x, const ConvertOptions& opts, std::uint64_t index) {
  return detail::convert(fmt, x, opts, index, std::numeric_limits<double>::min()).code;
}

std::uint64_t encode(const Format& fmt, float x, const ConvertOptions& opts, std::uint64_t index) {
  return detail::convert(fmt, x, opts, index, std::numeric_limits<float>::min()).code;
}

bool is_nan_code(const Format& f, std::uint64_t code) {
  code &= f.code_mask();
  switch (f.kind == Kind::integer ? Specials::none : f.specials) {
    case Specials::ieee: {
      const std::uint64_t mag = code & ~f.sign_bit();
      return mag > f.inf_code();
    }
    case Specials::fn: return (code & ~f.sign_bit()) == f.nan_code();
    case Specials::fnuz: return code == f.nan_code();
    case Specials::none: return false;
  }
  return false;
}

bool is_inf_code(const Format& f, std::uint64_t code) {
  return f.has_inf() && (code & f.code_mask() & ~f.sign_bit()) == f.inf_code();
}

double decode(const Format& f, std::uint64_t code) {
  code &= f.code_mask();
  if (f.kind == Kind::integer) {
    std::int64_t k = static_cast<std::int64_t>(code);
    if (f.is_signed && (code & f.sign_bit()) != 0) k -= static_cast<std::int64_t>(std::uint64_t{1} << f.bits);
    if (f.symmetric && k < 0 && -static_cast<double>(k) * std::ldexp(1.0, -f.fraction_bits) > -f.lowest) {
      k += 1;  // the excluded most-negative code reads as the lowest value
    }
    return std::ldexp(static_cast<double>(k), -f.fraction_bits);
  }
  const bool neg = (code & f.sign_bit()) != 0;
  if (is_nan_code(f, code)) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return f.specials == Specials::fnuz ? nan : std::copysign(nan, neg ? -1.0 : 1.0);
  }
  const std::uint64_t mag = code & ~f.sign_bit();
  double v = 0;
  if (is_inf_code(f, code)) {
    v = std::numeric_limits<double>::infinity();
  } else {
    const int m = f.mantissa_bits;
    const std::uint64_t field = mag >> m;
    const std::uint64_t frac = mag & ((std::uint64_t{1} << m) - 1);
    if (field == 0 && f.has_zero) {
      v = f.subnormals ? std::ldexp(static_cast<double>(frac), f.emin - m) : 0.0;
    } else {
      v = std::ldexp(static_cast<double>(frac | (std::uint64_t{1} << m)),
                     static_cast<int>(field) - f.bias - m);
    }
  }
  return neg ? -v : v;
}

std::string fielded_binary(const Format& f, std::uint64_t code) {
  code &= f.code_mask();
  std::string out;
  const auto bits_of = [&](int from, int count) {
    for (int i = count - 1; i >= 0; --i) out += ((code >> (from + i)) & 1) != 0 ? '1' : '0';
  };
  if (f.kind == Kind::integer) {
    bits_of(0, f.bits);
    return out;
  }
  if (f.is_signed) {
    bits_of(f.bits - 1, 1);
    out += '\'';
  }
  bits_of(f.mantissa_bits, f.exponent_bits);
  if (f.mantissa_bits > 0) {
    out += '\'';
    bits_of(0, f.mantissa_bits);
  }
  return out;
}

std::string hex_code(const Format& f, std::uint64_t code) {
  return io::format_hex(code & f.code_mask(), (f.bits + 3) / 4);
}

void require_code_fits(const Format& f, std::uint64_t code, std::string_view what) {
  if ((code & ~f.code_mask()) == 0) return;
  throw SpecError(std::string(what) + ": code " + io::format_hex(code) + " is wider than format '" + f.name +
                  "' (" + std::to_string(f.bits) + " bits); expected a code in " + hex_code(f, 0) + ".." +
                  hex_code(f, f.code_mask()));
}

bool fits_in_float(const Format& f) {
  if (f.kind == Kind::integer) {
    return f.bits <= 25 && f.fraction_bits <= 149 && f.fraction_bits >= -100;
  }
  return f.mantissa_bits <= 23 && f.emax <= 127 && f.emin - f.mantissa_bits >= -149;
}

}  // namespace lpemu::format
