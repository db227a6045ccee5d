#include "lpemu/format/rounding.hpp"

#include <string>

#include "format/enum_names.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"

namespace lpemu::format {
using detail::kOverflowNames;
using detail::kRoundingNames;

RoundingMode parse_rounding(std::string_view text) {
  if (const auto m = lpemu::detail::enum_value(kRoundingNames, text)) return *m;
  throw SpecError("rounding mode '" + std::string(text) + "': expected one of " +
                  lpemu::detail::join_names(lpemu::detail::enum_spellings(kRoundingNames)));
}

Overflow parse_overflow(std::string_view text) {
  if (const auto o = lpemu::detail::enum_value(kOverflowNames, text)) return *o;
  throw SpecError("overflow policy '" + std::string(text) + "': expected " +
                  lpemu::detail::join_names(lpemu::detail::enum_spellings(kOverflowNames), " or "));
}

std::string_view to_string(RoundingMode m) { return lpemu::detail::enum_name(kRoundingNames, m); }

std::string_view to_string(Overflow o) { return lpemu::detail::enum_name(kOverflowNames, o); }

void validate(const ConvertOptions& o) {
  if (o.sr_bits < 1 || o.sr_bits > 32) {
    throw SpecError("sr_bits = " + std::to_string(o.sr_bits) + ": expected 1..32 random bits");
  }
}

}  // namespace lpemu::format
