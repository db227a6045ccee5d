// The exact value of c + Σ a_i·b_i (exact integer arithmetic, Boost.Multiprecision inside), so
// that every datapath's error can be measured.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lpemu/datapath/dot.hpp"
#include "lpemu/format/format.hpp"

namespace lpemu::datapath {

/// An exact binary value ±magnitude·2^exponent (or NaN / ±Inf).
struct ExactValue {
  bool negative = false;
  bool nan = false;
  bool inf = false;
  std::vector<std::uint32_t> magnitude;  ///< little-endian 32-bit limbs; empty = zero
  int exponent = 0;

  /// The value correctly rounded (to nearest even) to a double.
  double to_double() const;
  /// The value in decimal scientific notation with `digits` significant digits ("0", "inf", "nan").
  std::string to_string(int digits = 25) const;
};

/// c + Σ a_i·b_i computed exactly from the codes (a in fa, b in fb, c in fc); scales as in dot()
/// with `scale_block` products per scale. NaN inputs or Inf − Inf give NaN.
ExactValue exact_dot(const format::Format& fa, const format::Format& fb, const format::Format& fc,
                     std::span<const std::uint64_t> a, std::span<const std::uint64_t> b, std::uint64_t c,
                     const BlockScales& scales = {}, int scale_block = 0);

/// exact_dot with the formats of a datapath (dp.a, dp.b, dp.output()).
ExactValue exact_dot(const Datapath& dp, std::span<const std::uint64_t> a, std::span<const std::uint64_t> b,
                     std::uint64_t c, const BlockScales& scales = {});

}  // namespace lpemu::datapath
