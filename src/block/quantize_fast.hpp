// Private to src/block: the power-of-two fast path's constants and its nearest_even element step,
// shared by the scalar kernels (quantize_fast.cpp) and the Highway kernels (quantize_simd.cpp).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "block/quantize_detail.hpp"
#include "format/codec_detail.hpp"

namespace lpemu::block::detail {

/// Per-call constants of the fast path.
struct Fast {
  format::detail::Fast element;  // the element format's fast-kernel constants (floating elements)
  std::int32_t is_int, int_qe;   // integer elements: fixed quantum 2^int_qe (nearest_even only)
  std::uint32_t positive_zero;   // zero results are +0
  float maxf;                    // results saturate to ±maxf
};

/// nearest_even without variable shifts (vectorises on any x86-64): adding C = 2^(qe+23) rounds |y|
// to a multiple of 2^qe in float32's own round-to-nearest-even, and subtracting C is exact. Same
// result as fast_element<nearest_even>; the property tests compare both with the generic path.
[[gnu::always_inline]] inline float fast_element_rne(const Fast& p, float y) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(y);
  const std::uint32_t s = u & 0x80000000U;
  const std::uint32_t a = u & kAbsMask;
  const std::int32_t ex = static_cast<std::int32_t>(a >> 23) - 127;
  const format::detail::Fast& e = p.element;
  const std::int32_t qf = ex < e.emin ? (e.subnormals != 0 ? e.emin - e.m : e.emin) : ex - e.m;
  const std::int32_t qe = p.is_int != 0 ? p.int_qe : qf;
  const float c = std::bit_cast<float>(static_cast<std::uint32_t>(qe + 150) << 23);
  const float r = (std::bit_cast<float>(a) + c) - c;
  const float v = r < p.maxf ? r : p.maxf;
  const std::uint32_t vb = std::bit_cast<std::uint32_t>(v);
  const std::uint32_t sign = (p.positive_zero != 0 && vb == 0) ? 0U : s;
  return std::bit_cast<float>(vb | sign);
}

/// x·2^-s with the sign and non-zeroness of the exact product kept when it underflows to zero.
[[gnu::always_inline]] inline float scale_down(float x, float inv) {
  const float y = x * inv;
  const std::uint32_t yb = std::bit_cast<std::uint32_t>(y);
  const std::uint32_t xb = std::bit_cast<std::uint32_t>(x);
  const bool lost = (yb & kAbsMask) == 0 && (xb & kAbsMask) != 0;
  return lost ? std::bit_cast<float>((xb & 0x80000000U) | 1U) : y;
}

/// The exponent of a block the Highway kernel leaves alone (the caller quantises it another way).
inline constexpr std::int32_t kSkipBlock = std::numeric_limits<std::int32_t>::min();

/// The amax bits (|x| as float32 bits) of `count` consecutive blocks of `len` elements from `in`.
void simd_block_amax(const float* in, std::size_t len, std::size_t count, std::uint32_t* amax);

/// Quantises `count` consecutive blocks of `len` elements with nearest_even: block b as
/// fast_element_rne(p, scale_down(x, 2^-e)) · 2^e with e = exps[b] (in [-126, 126]); blocks with
/// kSkipBlock are not written. `in` and `out` may alias exactly.
void simd_block_quantize_rne(const Fast& p, const float* in, float* out, std::size_t len, std::size_t count,
                             const std::int32_t* exps);

}  // namespace lpemu::block::detail
