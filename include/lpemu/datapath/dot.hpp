// One dot product d = c + Σ a_i·b_i, bit-exact under a Datapath (the BFMA model of datapath.hpp).
#pragma once

#include <climits>
#include <cstdint>
#include <span>

#include "lpemu/datapath/datapath.hpp"

namespace lpemu::datapath {

/// A scale exponent that stands for a NaN scale (E8M0 code 0xFF): the result is NaN.
inline constexpr std::int32_t kNanScale = INT32_MIN;

/// Per-block scales of a and b: element k of a is scaled by a_significand[k / scale_block] ·
/// 2^a[k / scale_block] (an E8M0 scale is a power of two; an E4M3 scale has an integer significand).
/// Empty spans mean exponent 0 / significand 1.
struct BlockScales {
  std::span<const std::int32_t> a;
  std::span<const std::int32_t> b;
  std::span<const std::uint32_t> a_significand = {};
  std::span<const std::uint32_t> b_significand = {};
};

/// d = c + Σ a_i·b_i as `dp` computes it: a and b are codes of dp.a / dp.b, c and the result are
/// codes of dp.output(). `index` selects the stochastic-rounding stream of this output element.
/// Throws ShapeError if the sizes disagree or a code is wider than its format.
std::uint64_t dot(const Datapath& dp, std::span<const std::uint64_t> a, std::span<const std::uint64_t> b,
                  std::uint64_t c, const BlockScales& scales = {}, std::uint64_t index = 0);

}  // namespace lpemu::datapath
