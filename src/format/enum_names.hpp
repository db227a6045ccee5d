// Private: the format layer's name tables (rounding modes, overflow policies, specials, kinds),
// one per enum, shared by its parse/to_string functions and by the spec loaders that read them.
#pragma once

#include "lpemu/detail/names.hpp"
#include "lpemu/format/format.hpp"
#include "lpemu/format/rounding.hpp"

namespace lpemu::format::detail {

inline constexpr lpemu::detail::EnumName<RoundingMode> kRoundingNames[] = {
    {"nearest_even", RoundingMode::nearest_even},       {"nearest_away", RoundingMode::nearest_away},
    {"toward_zero", RoundingMode::toward_zero},         {"toward_positive", RoundingMode::toward_positive},
    {"toward_negative", RoundingMode::toward_negative}, {"stochastic", RoundingMode::stochastic}};

inline constexpr lpemu::detail::EnumName<Overflow> kOverflowNames[] = {{"saturate", Overflow::saturate},
                                                                       {"native", Overflow::native}};

inline constexpr lpemu::detail::EnumName<Specials> kSpecialsNames[] = {
    {"ieee", Specials::ieee}, {"fn", Specials::fn}, {"fnuz", Specials::fnuz}, {"none", Specials::none}};

inline constexpr lpemu::detail::EnumName<Kind> kKindNames[] = {{"float", Kind::floating},
                                                               {"int", Kind::integer}};

}  // namespace lpemu::format::detail
