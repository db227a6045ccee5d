// Private pieces of the conversion path shared by the scalar and bulk codecs.
#pragma once

#include <cstdint>

#include "lpemu/format/codec.hpp"

namespace lpemu::format::detail {

/// Result of one conversion: the code and its value.
struct Converted {
  std::uint64_t code;
  double value;
};

/// Rounds the finite magnitude a >= 0 to an integer multiple n of 2^qe under `mode` (`negative`
/// is the sign of the original value, for directed modes); returns n. Exact integer arithmetic.
std::uint64_t round_to_quantum(double a, int qe, RoundingMode mode, bool negative, std::uint32_t random,
                               int sr_bits);

/// The generic conversion of x; inputs below `input_min_normal` are flushed under DAZ.
Converted convert(const Format& f, double x, const ConvertOptions& o, std::uint64_t index,
                  double input_min_normal);

/// Calls f.template operator()<M>() with the rounding mode m as a template argument, so that
/// kernels are compiled once per mode and the mode is chosen once per call.
template <class F>
void dispatch_mode(RoundingMode m, F&& f) {
  switch (m) {
    case RoundingMode::nearest_even: f.template operator()<RoundingMode::nearest_even>(); break;
    case RoundingMode::nearest_away: f.template operator()<RoundingMode::nearest_away>(); break;
    case RoundingMode::toward_zero: f.template operator()<RoundingMode::toward_zero>(); break;
    case RoundingMode::toward_positive: f.template operator()<RoundingMode::toward_positive>(); break;
    case RoundingMode::toward_negative: f.template operator()<RoundingMode::toward_negative>(); break;
    case RoundingMode::stochastic: f.template operator()<RoundingMode::stochastic>(); break;
  }
}

/// Stochastic rounding's decision: 1 when the r leading bits of the discarded fraction `rem`
/// (the low `shift` bits of the significand, shift >= 1) plus the top r of `random` carry out
/// of r bits, else 0. Shared by the scalar, bulk and block kernels.
inline std::uint32_t sr_round_up(std::uint64_t rem, int shift, int r, std::uint32_t random) {
  std::uint64_t frac_r = 0;
  if (shift >= r) {
    frac_r = (shift - r) >= 64 ? 0 : rem >> (shift - r);
  } else {
    frac_r = rem << (r - shift);
  }
  const std::uint64_t rnd = static_cast<std::uint64_t>(random) >> (32 - r);
  return static_cast<std::uint32_t>((frac_r + rnd) >> r);
}

}  // namespace lpemu::format::detail
