// The training layer's one stream mixer, shared by its quantisation sites.
#pragma once

#include <cstdint>

namespace lpemu::train::detail {

/// SplitMix64's finaliser (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", OOPSLA 2014): distinct random streams from distinct (site, step, operand) keys.
inline std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace lpemu::train::detail
