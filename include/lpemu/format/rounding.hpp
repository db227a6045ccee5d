// Rounding modes, overflow policies and conversion options.
#pragma once

#include <cstdint>
#include <string_view>

namespace lpemu::format {

/// How a value between two representable neighbours is rounded. Enumerators are spelled as in
/// TOML and on the command line.
enum class RoundingMode : std::uint8_t {
  nearest_even,     ///< IEEE 754 roundTiesToEven
  nearest_away,     ///< IEEE 754 roundTiesToAway
  toward_zero,      ///< truncation
  toward_positive,  ///< ceiling
  toward_negative,  ///< floor
  stochastic,       ///< round up with probability floor(frac·2^r)/2^r, r random bits
};

/// What happens to finite values beyond the largest finite value, and to ±Inf inputs.
///  saturate: clamp to ±max finite (the OCP OFP8 Rev 1.0 "saturating" conversion: Inf → ±max too);
///  native:   the format's own rule — Inf where it has Inf, NaN where it has only NaN (directed
///            rounding toward zero still gives max finite, IEEE 754 §7.4). Formats with neither
///            (fp6, fp4, integers) always saturate.
enum class Overflow : std::uint8_t { saturate, native };

/// Every conversion option. Defaults: nearest_even, native overflow, no flushing.
struct ConvertOptions {
  RoundingMode rounding = RoundingMode::nearest_even;
  Overflow overflow = Overflow::native;
  std::uint64_t seed = 0;                ///< stochastic rounding: the stream's seed
  int sr_bits = 32;                      ///< stochastic rounding: random bits r, 1..32
  std::uint64_t index_offset = 0;        ///< stochastic rounding: element index of the first element
  bool flush_subnormal_outputs = false;  ///< results below min normal become ±0 (FTZ)
  bool flush_subnormal_inputs = false;   ///< inputs subnormal in their own type are ±0 (DAZ)

  friend bool operator==(const ConvertOptions&, const ConvertOptions&) = default;
};

/// Parses a rounding mode name; throws SpecError listing the valid names otherwise.
RoundingMode parse_rounding(std::string_view text);
/// Parses an overflow policy name ("saturate" or "native"); throws SpecError otherwise.
Overflow parse_overflow(std::string_view text);
/// Throws SpecError if an option is out of range (sr_bits must be 1..32).
void validate(const ConvertOptions& o);
/// The TOML/CLI spelling of a rounding mode.
std::string_view to_string(RoundingMode m);
/// The TOML/CLI spelling of an overflow policy.
std::string_view to_string(Overflow o);

/// All rounding modes, in declaration order (for cartesian tests and CLI help).
inline constexpr RoundingMode kAllRoundingModes[] = {
    RoundingMode::nearest_even,    RoundingMode::nearest_away,    RoundingMode::toward_zero,
    RoundingMode::toward_positive, RoundingMode::toward_negative, RoundingMode::stochastic};
/// All overflow policies.
inline constexpr Overflow kAllOverflowPolicies[] = {Overflow::saturate, Overflow::native};

/// The SplitMix64 finaliser (Steele, Lea & Flood, "Fast splittable pseudorandom number
/// generators", 2014): a bijective mix of 64 bits.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// The next number of the SplitMix64 generator with state `state` (advanced by the golden gamma).
constexpr std::uint64_t splitmix64(std::uint64_t& state) { return mix64(state += 0x9E3779B97F4A7C15ULL); }

/// The counter-based random stream of stochastic rounding: 32 random bits for element `index`
/// under `seed`. Depends on nothing else, so results are reproducible and independent of threads.
/// Definition: h = mix64(seed · 0x9E3779B97F4A7C15 + mix64(index + 0xD1B54A32D192ED03)), returns
/// the high 32 bits of h.
constexpr std::uint32_t sr_random_bits(std::uint64_t seed, std::uint64_t index) {
  const std::uint64_t h = mix64(seed * 0x9E3779B97F4A7C15ULL + mix64(index + 0xD1B54A32D192ED03ULL));
  return static_cast<std::uint32_t>(h >> 32);
}

/// Stochastic rounding's decision, the one definition every layer uses: with `frac_r` the r leading
/// bits of the discarded fraction (frac_r < 2^r, 1 <= r <= 32), round away from zero when frac_r
/// plus the top r bits of `random` carry out of r bits (probability frac_r / 2^r).
constexpr bool sr_carries(std::uint64_t frac_r, int r, std::uint32_t random) {
  return ((frac_r + (static_cast<std::uint64_t>(random) >> (32 - r))) >> r) != 0;
}

}  // namespace lpemu::format
