// Independent reference for element formats of at most 16 bits; see element_reference.hpp.
//
// Semantics implemented (lpemu's documented choices, rounding.hpp / codec.hpp):
//  - rounding is exact in the format's value set; without subnormals the set is {0} ∪ normals;
//    a tie goes to the neighbour n·q with n even, q = the gap between the two neighbours (the
//    IEEE 754 §4.3.1 rule; it sends e8m0 ties up and the 0 / min-normal tie of a format without
//    subnormals to 0);
//  - stochastic: round away from zero iff floor(frac·2^r) + (random >> (32-r)) >= 2^r, frac the
//    position of |x| between its neighbours;
//  - overflow: above max the grid continues with step ulp(max) (unbounded exponent); a result
//    beyond max is ±max under `saturate`, under directed rounding toward zero, and for formats
//    without NaN/Inf; otherwise ±Inf (ieee) or NaN (fn: sign kept, fnuz: 0x80);
//  - ±Inf inputs: ±max under saturate / without NaN, else ±Inf or NaN;
//  - NaN input: the format's NaN with the input's sign (fnuz: 0x80); +0 without NaN;
//  - unsigned formats: negative non-zero inputs give NaN (native, if any) or code 0;
//  - no zero (e8m0): 0 gives NaN (native) or code 0; values below the minimum give code 0;
//  - fnuz and unsigned formats have no -0: a zero result is +0.
#include "support/reference/element_reference.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace lpemu::test::ref {

using format::Kind;
using format::Overflow;
using format::RoundingMode;
using format::Specials;

std::uint32_t random_bits(std::uint64_t seed, std::uint64_t index) {
  const auto finalise = [](std::uint64_t z) {
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ULL;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return z;
  };
  const std::uint64_t inner = finalise(index + 0xD1B54A32D192ED03ULL);
  return static_cast<std::uint32_t>(finalise(seed * 0x9E3779B97F4A7C15ULL + inner) >> 32);
}

namespace {

bool is_power_of_two(double q) {
  int e = 0;
  return q > 0 && std::frexp(q, &e) == 0.5;
}

bool toward_zero_for(RoundingMode m, bool negative) {
  return m == RoundingMode::toward_zero || (m == RoundingMode::toward_positive && negative) ||
         (m == RoundingMode::toward_negative && !negative);
}

}  // namespace

Table::Table(const format::Format& f) {
  is_float_ = f.kind == Kind::floating;
  signed_ = f.is_signed;
  if (is_float_) {
    e_ = f.exponent_bits;
    m_ = f.mantissa_bits;
    bias_ = f.bias;
    specials_ = f.specials;
    subnormals_ = f.subnormals;
    has_zero_ = f.has_zero;
    bits_ = (signed_ ? 1 : 0) + e_ + m_;
  } else {
    bits_ = f.bits;
    fraction_bits_ = f.fraction_bits;
    symmetric_ = f.symmetric;
    specials_ = Specials::none;
    has_zero_ = true;
  }
  if (bits_ > 16) throw std::logic_error("reference tables are for formats of at most 16 bits");
  has_neg_zero_ = is_float_ && signed_ && has_zero_ && specials_ != Specials::fnuz;

  const std::uint64_t n = std::uint64_t{1} << bits_;
  by_code_.resize(n);
  canonical_.assign(n, 1);
  const std::uint64_t sign_bit = signed_ ? std::uint64_t{1} << (bits_ - 1) : 0;
  for (std::uint64_t c = 0; c < n; ++c) {
    double v = 0;
    if (!is_float_) {
      // Two's complement (or unsigned) integer times 2^-fraction_bits.
      auto k = static_cast<std::int64_t>(c);
      if (signed_ && (c & sign_bit) != 0) k -= static_cast<std::int64_t>(n);
      if (symmetric_ && signed_ && c == sign_bit) {
        k += 1;  // the excluded most-negative code reads as the lowest value (lpemu's choice)
        canonical_[c] = 0;
      }
      v = std::ldexp(static_cast<double>(k), -fraction_bits_);
    } else {
      const bool neg = (c & sign_bit) != 0;
      const std::uint64_t mag = c & ~sign_bit;
      const std::uint64_t field = mag >> m_;
      const std::uint64_t mant = mag & ((std::uint64_t{1} << m_) - 1);
      const std::uint64_t all_e = (std::uint64_t{1} << e_) - 1;
      const std::uint64_t all_m = (std::uint64_t{1} << m_) - 1;
      bool nan = false;
      bool inf = false;
      switch (specials_) {
        case Specials::ieee:
          inf = field == all_e && mant == 0;
          nan = field == all_e && mant != 0;
          break;
        case Specials::fn: nan = field == all_e && mant == all_m; break;
        case Specials::fnuz: nan = c == sign_bit; break;
        case Specials::none: break;
      }
      if (nan) {
        v = std::numeric_limits<double>::quiet_NaN();
        canonical_[c] = c == nan_code(neg) ? 1 : 0;
      } else if (inf) {
        v = std::numeric_limits<double>::infinity();
      } else if (field == 0 && has_zero_) {
        // Subnormal: (-1)^s · 2^(1-bias) · 0.M; without subnormals only 0.000 is used (±0).
        v = subnormals_ ? std::ldexp(static_cast<double>(mant), 1 - bias_ - m_) : 0.0;
        if (!subnormals_ && mant != 0) canonical_[c] = 0;
      } else {
        // Normal: (-1)^s · 2^(E-bias) · 1.M
        v = std::ldexp(static_cast<double>(mant + (std::uint64_t{1} << m_)),
                       static_cast<int>(field) - bias_ - m_);
      }
      if (neg) v = -v;
    }
    by_code_[c] = v;
  }
  // Sorted distinct finite values with their canonical codes; zero is stored once, as +0.
  std::vector<std::pair<double, std::uint64_t>> pairs;
  for (std::uint64_t c = 0; c < n; ++c) {
    const double v = by_code_[c];
    if (!std::isfinite(v) || canonical_[c] == 0) continue;
    if (v == 0 && std::signbit(v)) continue;
    pairs.emplace_back(v, c);
  }
  std::sort(pairs.begin(), pairs.end());
  for (std::size_t i = 1; i < pairs.size(); ++i) {
    if (!(pairs[i - 1].first < pairs[i].first)) throw std::logic_error("reference: duplicate value");
  }
  for (const auto& [v, c] : pairs) {
    vals_.push_back(v);
    val_code_.push_back(c);
  }
  if (is_float_) {
    min_normal_ = std::ldexp(1.0, (has_zero_ ? 1 : 0) - bias_);
    int ex = 0;
    std::frexp(vals_.back(), &ex);  // max = 1.f · 2^(ex-1)
    ulp_max_ = std::ldexp(1.0, ex - 1 - m_);
  } else {
    min_normal_ = std::ldexp(1.0, -fraction_bits_);
    ulp_max_ = min_normal_;
  }
  if (signed_) ext_.push_back(vals_.front() - ulp_max_);
  ext_.insert(ext_.end(), vals_.begin(), vals_.end());
  ext_.push_back(vals_.back() + ulp_max_);
  for (std::size_t i = 1; i < ext_.size(); ++i) {
    if (!is_power_of_two(ext_[i] - ext_[i - 1])) throw std::logic_error("reference: gap not a power of two");
  }
}

double Table::value(std::uint64_t code) const { return by_code_.at(code); }

bool Table::is_nan(std::uint64_t code) const { return std::isnan(by_code_.at(code)); }

bool Table::is_inf(std::uint64_t code) const { return std::isinf(by_code_.at(code)); }

bool Table::is_canonical(std::uint64_t code) const { return canonical_.at(code) != 0; }

double Table::min_positive() const { return *std::upper_bound(vals_.begin(), vals_.end(), 0.0); }

std::vector<double> Table::midpoints() const {
  std::vector<double> out;
  for (std::size_t i = 1; i < ext_.size(); ++i) out.push_back((ext_[i - 1] + ext_[i]) / 2);
  return out;
}

std::uint64_t Table::nan_code(bool negative) const {
  const std::uint64_t sign = negative && signed_ ? std::uint64_t{1} << (bits_ - 1) : 0;
  const std::uint64_t all_e = ((std::uint64_t{1} << e_) - 1) << m_;
  switch (specials_) {
    // Quiet NaN: exponent all ones, leading mantissa bit set (IEEE 754-2019 §6.2.1).
    case Specials::ieee: return sign | all_e | (m_ > 0 ? std::uint64_t{1} << (m_ - 1) : 0);
    case Specials::fn: return sign | all_e | ((std::uint64_t{1} << m_) - 1);
    case Specials::fnuz: return std::uint64_t{1} << (bits_ - 1);
    case Specials::none: break;
  }
  throw std::logic_error("reference: format has no NaN");
}

std::uint64_t Table::code_of_value(double v, bool negative_zero) const {
  if (v == 0) return negative_zero && has_neg_zero_ ? std::uint64_t{1} << (bits_ - 1) : 0;
  const auto it = std::lower_bound(vals_.begin(), vals_.end(), v);
  if (it == vals_.end() || *it != v) throw std::logic_error("reference: value not in table");
  return val_code_[static_cast<std::size_t>(it - vals_.begin())];
}

std::uint64_t Table::overflow_code(bool negative, const Options& o) const {
  const bool has_nan = specials_ != Specials::none;
  if (o.overflow == Overflow::saturate || !has_nan || toward_zero_for(o.rounding, negative)) {
    return negative ? val_code_.front() : val_code_.back();
  }
  if (specials_ == Specials::ieee) {
    const std::uint64_t sign = negative ? std::uint64_t{1} << (bits_ - 1) : 0;
    return sign | (((std::uint64_t{1} << e_) - 1) << m_);
  }
  return nan_code(negative);
}

std::size_t Table::locate(double x) const {
  const auto it = std::upper_bound(ext_.begin(), ext_.end(), x);
  return static_cast<std::size_t>(it - ext_.begin()) - 1;
}

std::uint64_t Table::round(double x, const Options& o) const {
  std::size_t hint = ext_.size();
  return round(x, o, hint);
}

std::uint64_t Table::round(double x, const Options& o, std::size_t& hint) const {
  const bool has_nan = specials_ != Specials::none;
  if (std::isnan(x)) return has_nan ? nan_code(std::signbit(x)) : 0;
  if (o.daz && std::fabs(x) < static_cast<double>(std::numeric_limits<float>::min()))
    x = std::copysign(0.0, x);
  const bool neg = std::signbit(x);
  if (!signed_ && neg && x != 0) {
    return o.overflow == Overflow::native && has_nan ? nan_code(false) : 0;
  }
  if (std::isinf(x)) {
    if (o.overflow == Overflow::saturate || !has_nan) return neg ? val_code_.front() : val_code_.back();
    return overflow_code(neg, Options{RoundingMode::nearest_even, Overflow::native, 0, 32, false, false});
  }
  if (x == 0) {
    if (has_zero_) return code_of_value(0.0, neg);
    return o.overflow == Overflow::native && has_nan ? nan_code(false) : 0;
  }
  if (!has_zero_ && x < vals_.front()) return val_code_.front();  // the minimum absorbs underflow
  if (x >= ext_.back() || x < ext_.front()) {
    // At or beyond the virtual neighbour: overflow in every mode (toward zero: max).
    return x == ext_.back() || x > ext_.back() ? overflow_code(false, o) : overflow_code(true, o);
  }
  // Locate lo <= x < hi in the extended table.
  std::size_t i = hint;
  if (i + 1 < ext_.size() && ext_[i] <= x && x < ext_[i + 1]) {
  } else if (i + 2 < ext_.size() && ext_[i + 1] <= x && x < ext_[i + 2]) {
    ++i;
  } else if (i > 0 && i < ext_.size() && ext_[i - 1] <= x && x < ext_[i]) {
    --i;
  } else {
    i = locate(x);
  }
  hint = i;
  const double lo = ext_[i];
  const double hi = ext_[i + 1];
  std::size_t w = i;  // index into ext_ of the result
  if (x != lo) {
    const std::size_t small = neg ? i + 1 : i;  // smaller magnitude
    const std::size_t large = neg ? i : i + 1;
    const double q = hi - lo;
    const double mid = lo + q / 2;
    switch (o.rounding) {
      case RoundingMode::nearest_even:
      case RoundingMode::nearest_away:
        if (x < mid) {
          w = i;
        } else if (x > mid) {
          w = i + 1;
        } else if (o.rounding == RoundingMode::nearest_away) {
          w = large;
        } else {
          w = std::fmod(lo / q, 2.0) == 0 ? i : i + 1;  // the neighbour n·q with n even
        }
        break;
      case RoundingMode::toward_zero: w = small; break;
      case RoundingMode::toward_positive: w = i + 1; break;
      case RoundingMode::toward_negative: w = i; break;
      case RoundingMode::stochastic: {
        const double frac = (std::fabs(x) - std::fabs(ext_[small])) / q;  // exact: q is a power of two
        const auto t = static_cast<std::uint64_t>(std::floor(std::ldexp(frac, o.sr_bits)));
        const std::uint64_t rnd = static_cast<std::uint64_t>(o.random) >> (32 - o.sr_bits);
        w = t + rnd >= (std::uint64_t{1} << o.sr_bits) ? large : small;
        break;
      }
    }
  }
  const std::size_t first = signed_ ? 1 : 0;  // ext_[first + k] == vals_[k]
  if (w + 1 == ext_.size()) return overflow_code(false, o);
  if (w < first) return overflow_code(true, o);
  const std::size_t k = w - first;
  if (vals_[k] == 0 || (o.ftz && is_float_ && std::fabs(vals_[k]) < min_normal_))
    return code_of_value(0.0, neg);
  return val_code_[k];
}

std::string describe(const format::Format& f, const Options& o, float x, std::uint64_t expected,
                     std::uint64_t actual, const char* path) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%s: format %s, rounding %s, overflow %s, sr_bits %d, random 0x%08x, ftz %d, daz %d: "
                "input 0x%08x (%.9g): expected code 0x%llx, got 0x%llx",
                path, f.name.c_str(), std::string(format::to_string(o.rounding)).c_str(),
                std::string(format::to_string(o.overflow)).c_str(), o.sr_bits, o.random, o.ftz ? 1 : 0,
                o.daz ? 1 : 0, std::bit_cast<std::uint32_t>(x), static_cast<double>(x),
                static_cast<unsigned long long>(expected), static_cast<unsigned long long>(actual));
  return buf;
}

}  // namespace lpemu::test::ref
