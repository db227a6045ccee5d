// One dot product d = c + Σ a_i·b_i, bit-exact under a Datapath (tensor-cores.md §1).
#pragma once

#include <climits>
#include <cstdint>
#include <span>

#include "lpemu/datapath/datapath.hpp"

namespace lpemu::datapath {

/// A scale exponent that stands for a NaN scale (E8M0 code 0xFF): the result is NaN.
inline constexpr std::int32_t kNanScale = INT32_MIN;

/// Per-block power-of-two scales of a and b: element k of a is scaled by 2^a[k / scale_block].
/// Empty spans mean no scaling (exponent 0).
struct BlockScales {
  std::span<const std::int32_t> a;
  std::span<const std::int32_t> b;
};

/// d = c + Σ a_i·b_i as `dp` computes it: a and b are codes of dp.a / dp.b, c and the result are
/// codes of dp.output(). `index` selects the stochastic-rounding stream of this output element.
/// Throws ShapeError if the sizes disagree or a code is wider than its format.
std::uint64_t dot(const Datapath& dp, std::span<const std::uint64_t> a, std::span<const std::uint64_t> b,
                  std::uint64_t c, const BlockScales& scales = {}, std::uint64_t index = 0);

}  // namespace lpemu::datapath
