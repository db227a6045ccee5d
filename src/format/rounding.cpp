#include "lpemu/format/rounding.hpp"

#include <string>

#include "lpemu/error.hpp"

namespace lpemu::format {

RoundingMode parse_rounding(std::string_view text) {
  for (const RoundingMode m : kAllRoundingModes) {
    if (to_string(m) == text) return m;
  }
  throw SpecError("rounding mode '" + std::string(text) +
                  "': expected one of nearest_even, nearest_away, toward_zero, toward_positive, "
                  "toward_negative, stochastic");
}

Overflow parse_overflow(std::string_view text) {
  if (text == "saturate") return Overflow::saturate;
  if (text == "native") return Overflow::native;
  throw SpecError("overflow policy '" + std::string(text) + "': expected saturate or native");
}

std::string_view to_string(RoundingMode m) {
  switch (m) {
    case RoundingMode::nearest_even: return "nearest_even";
    case RoundingMode::nearest_away: return "nearest_away";
    case RoundingMode::toward_zero: return "toward_zero";
    case RoundingMode::toward_positive: return "toward_positive";
    case RoundingMode::toward_negative: return "toward_negative";
    case RoundingMode::stochastic: return "stochastic";
  }
  return "?";
}

std::string_view to_string(Overflow o) { return o == Overflow::saturate ? "saturate" : "native"; }

void validate(const ConvertOptions& o) {
  if (o.sr_bits < 1 || o.sr_bits > 32) {
    throw SpecError("sr_bits = " + std::to_string(o.sr_bits) + ": expected 1..32 random bits");
  }
}

}  // namespace lpemu::format
