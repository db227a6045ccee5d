// Independent reference for element formats of at most 16 bits.
//
// The value of every code comes from the field formula of the spec (sign, exponent field,
// mantissa field; two's complement for integers), evaluated in double, where every value and
// every midpoint of a format of <= 16 bits is exact. Rounding is a nearest-neighbour search
// over the sorted value table with an explicit rule per mode; it never calls lpemu's codec and
// shares no table with src/. Only the structural fields of a Format (widths, bias, specials,
// subnormals, zero, sign, fraction bits) are read: they are the spec itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lpemu/format/format.hpp"
#include "lpemu/format/rounding.hpp"

namespace lpemu::test::ref {

/// The counter-based stochastic-rounding stream, re-implemented from its documentation in
/// rounding.hpp (SplitMix64 finaliser; Steele, Lea & Flood 2014), not by calling lpemu.
std::uint32_t random_bits(std::uint64_t seed, std::uint64_t index);

/// Options of one reference conversion (mirrors the documented semantics, see element_reference.cpp).
struct Options {
  format::RoundingMode rounding = format::RoundingMode::nearest_even;
  format::Overflow overflow = format::Overflow::native;
  std::uint32_t random = 0;  ///< stochastic: the 32 random bits of this element
  int sr_bits = 32;          ///< stochastic: how many of their top bits are used
  bool ftz = false;          ///< results below min normal become ±0
  bool daz = false;          ///< inputs below float32's min normal are ±0
};

/// A format's value table, built from the field formula.
class Table {
 public:
  explicit Table(const format::Format& f);

  int bits() const { return bits_; }
  /// Value of a code (NaN of the code's sign for NaN codes, ±Inf for Inf codes).
  double value(std::uint64_t code) const;
  bool is_nan(std::uint64_t code) const;
  bool is_inf(std::uint64_t code) const;
  /// False for codes that encode never produces (non-canonical duplicates of another value).
  bool is_canonical(std::uint64_t code) const;

  /// The code lpemu's documented semantics assign to x.
  std::uint64_t round(double x, const Options& o) const;
  /// As round(), with a hint index into the sorted table (for monotone sweeps); updates it.
  std::uint64_t round(double x, const Options& o, std::size_t& hint) const;

  /// Sorted distinct finite values (zero once).
  const std::vector<double>& values() const { return vals_; }
  double max_finite() const { return vals_.back(); }
  double lowest() const { return vals_.front(); }
  double min_positive() const;  ///< smallest value > 0
  double min_normal() const { return min_normal_; }
  /// Step above max finite in the unbounded-exponent grid (the overflow threshold's other side).
  double ulp_at_max() const { return ulp_max_; }
  /// Every midpoint between adjacent values, plus the one between max and max + ulp_at_max (and
  /// its negative for signed formats).
  std::vector<double> midpoints() const;
  std::uint64_t nan_code(bool negative) const;

 private:
  std::uint64_t code_of_value(double v, bool negative_zero) const;
  std::uint64_t overflow_code(bool negative, const Options& o) const;
  std::size_t locate(double x) const;  // largest i with ext_[i] <= x (x inside ext_ range)

  bool is_float_ = true;
  bool signed_ = true;
  bool has_zero_ = true;
  bool has_neg_zero_ = false;
  format::Specials specials_ = format::Specials::none;
  int bits_ = 0;
  int e_ = 0, m_ = 0, bias_ = 0;
  int fraction_bits_ = 0;
  bool subnormals_ = true;
  bool symmetric_ = false;
  double min_normal_ = 0;
  double ulp_max_ = 0;
  std::vector<double> by_code_;          // value of every code (NaN for NaN codes)
  std::vector<std::uint8_t> canonical_;  // per code
  std::vector<double> vals_;             // sorted distinct finite values
  std::vector<std::uint64_t> val_code_;  // canonical code of vals_[i] (+0 for zero)
  std::vector<double> ext_;              // vals_ with a virtual neighbour beyond each end
};

/// Failure description: format, mode, input bits (hex and value), expected and actual code.
std::string describe(const format::Format& f, const Options& o, float x, std::uint64_t expected,
                     std::uint64_t actual, const char* path);

}  // namespace lpemu::test::ref
