// Private to src/block: the power-of-two fast path's constants and its nearest_even element step,
// shared by the scalar kernels (quantize_fast.cpp) and the Highway kernels (quantize_simd.cpp).
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

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

/// nearest_even onto an element grid without variable shifts (vectorises on any x86-64), in float
/// or double: adding C = 2^(qe + mantissa bits) rounds |y| to a multiple of 2^qe in T's own
/// round-to-nearest-even, and subtracting C is exact; qe from the element's emin and m (a fixed
/// quantum 2^int_qe for integer elements); saturates at max_value; zero results are +0 when
/// positive_zero. Same result as fast_element<nearest_even>; the property tests compare both with
/// the generic path.
/// The element grid's quantum exponent qe for a value of unbiased exponent ex: ex − m for normal
/// values, emin − m below 2^emin (emin without subnormals), int_qe for integer elements.
template <class I>
[[gnu::always_inline]] inline I grid_exponent(I ex, std::int32_t emin, std::int32_t m, bool subnormals,
                                              bool is_int, std::int32_t int_qe) {
  if (is_int) return I{int_qe};
  return ex < emin ? (subnormals ? I{emin} - m : I{emin}) : ex - m;
}

template <class T>
[[gnu::always_inline]] inline T rne_on_grid(T y, std::int32_t emin, std::int32_t m, bool subnormals,
                                            bool is_int, std::int32_t int_qe, bool positive_zero,
                                            T max_value) {
  using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  using I = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
  constexpr int kMant = std::numeric_limits<T>::digits - 1;        // 23 or 52
  constexpr int kBias = std::numeric_limits<T>::max_exponent - 1;  // 127 or 1023
  constexpr U kSign = U{1} << (sizeof(T) * 8 - 1);
  const U u = std::bit_cast<U>(y);
  const U s = u & kSign;
  const U a = u & ~kSign;
  const I ex = static_cast<I>(a >> kMant) - kBias;
  const I qe = grid_exponent<I>(ex, emin, m, subnormals, is_int, int_qe);
  const T c = std::bit_cast<T>(static_cast<U>(qe + kBias + kMant) << kMant);
  const T r = (std::bit_cast<T>(a) + c) - c;
  const T v = r < max_value ? r : max_value;
  const U vb = std::bit_cast<U>(v);
  const U sign = (positive_zero && vb == 0) ? U{0} : s;
  return std::bit_cast<T>(vb | sign);
}

/// rne_on_grid in float32 with the fast path's constants.
[[gnu::always_inline]] inline float fast_element_rne(const Fast& p, float y) {
  const format::detail::Fast& e = p.element;
  return rne_on_grid<float>(y, e.emin, e.m, e.subnormals != 0, p.is_int != 0, p.int_qe, p.positive_zero != 0,
                            p.maxf);
}

/// Rounds the scaled input y (finite) to the element grid with saturation: the element format's
/// rounding step (the same definition as the element codec's), then n·2^qe clamped to ±max.
template <format::RoundingMode M>
[[gnu::always_inline]] inline float fast_element(const Fast& p, float y, std::uint64_t index) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(y);
  const std::uint32_t s = u >> 31;
  const format::detail::FastRounded r = format::detail::fast_round<M>(p.element, u & kAbsMask, s, index);
  const float v0 =
      static_cast<float>(r.n) * std::bit_cast<float>(static_cast<std::uint32_t>(r.qe + 127) << 23);
  const float v = v0 < p.maxf ? v0 : p.maxf;
  const std::uint32_t sign = (s << 31) & ~format::detail::mask((p.positive_zero != 0) & (r.n == 0));
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) | sign);
}

/// x·2^-s with the sign and non-zeroness of the exact product kept when it underflows to zero.
[[gnu::always_inline]] inline float scale_down(float x, float inv) {
  const float y = x * inv;
  const std::uint32_t yb = std::bit_cast<std::uint32_t>(y);
  const std::uint32_t xb = std::bit_cast<std::uint32_t>(x);
  const bool lost = (yb & kAbsMask) == 0 && (xb & kAbsMask) != 0;
  return lost ? std::bit_cast<float>((xb & 0x80000000U) | 1U) : y;
}

/// Per-call constants of the non-power-of-two path (elements under a double scale S).
struct FastD {
  std::int32_t m, emin, int_qe;
  bool is_int, subnormals, positive_zero;
  double maxd, maxneg;  // results saturate to maxd, negative ones to −maxneg (INT8: 127 and 128)
  format::RoundingMode mode;
  std::uint64_t seed;    // stochastic rounding: the stream's seed
  std::int32_t sr_bits;  // stochastic rounding: random bits r, 1..32
};

/// 2^e as a double, e in [-1022, 1023].
[[gnu::always_inline]] inline double pow2d(std::int64_t e) {
  return std::bit_cast<double>(static_cast<std::uint64_t>(e + 1023) << 52);
}

/// A finite double y onto the element grid under M with saturation and the +0 rule, as the
/// element codec rounds it (IEEE 754-2019 §4.3 for the directed and nearest modes; stochastic
/// rounding's decision is sr_carries): |y| = t·2^qe with grid_exponent's qe, n = floor(t), and M's
/// step from the discarded fraction t − n, all exact in double (qe >= -149 and |y| >= 2^-400 on
/// this path, so t and 2^±qe are normal); then n·2^qe clamped to maxd (maxneg when negative).
/// nearest_even is rne_on_grid<double> itself.
template <format::RoundingMode M>
[[gnu::always_inline]] inline double round_on_grid_d(const FastD& p, double y, std::uint64_t index) {
  using format::RoundingMode;
  const bool neg = std::signbit(y);
  const double max_value = neg ? p.maxneg : p.maxd;
  if constexpr (M == RoundingMode::nearest_even) {
    return rne_on_grid<double>(y, p.emin, p.m, p.subnormals, p.is_int, p.int_qe, p.positive_zero, max_value);
  } else {
    const double a = std::fabs(y);
    const auto ex = static_cast<std::int64_t>(std::bit_cast<std::uint64_t>(a) >> 52) - 1023;
    const std::int64_t qe = grid_exponent<std::int64_t>(ex, p.emin, p.m, p.subnormals, p.is_int, p.int_qe);
    const double t = a * pow2d(-qe);
    const double n = std::floor(t);
    const double f = t - n;
    bool up = false;
    if constexpr (M == RoundingMode::nearest_away) up = f >= 0.5;
    if constexpr (M == RoundingMode::toward_positive) up = f > 0.0 && !neg;
    if constexpr (M == RoundingMode::toward_negative) up = f > 0.0 && neg;
    if constexpr (M == RoundingMode::stochastic) {
      const auto frac_r = static_cast<std::uint64_t>(std::ldexp(f, p.sr_bits));  // the r leading bits
      up = format::sr_carries(frac_r, p.sr_bits, format::sr_random_bits(p.seed, index));
    }
    const double r = (n + (up ? 1.0 : 0.0)) * pow2d(qe);
    const double v = r < max_value ? r : max_value;
    return (p.positive_zero && v == 0.0) ? 0.0 : std::copysign(v, y);
  }
}

/// One element on the non-power-of-two path: y = x / S in double (the generic path's quotient),
/// round_on_grid_d, times S, narrowed to float; `index` is its stochastic-rounding index.
template <format::RoundingMode M>
[[gnu::always_inline]] inline float scaled_element(const FastD& p, float x, double scale,
                                                   std::uint64_t index) {
  return narrow(round_on_grid_d<M>(p, static_cast<double>(x) / scale, index) * scale);
}

/// The exponent of a block the Highway kernel leaves alone (the caller quantises it another way).
inline constexpr std::int32_t kSkipBlock = std::numeric_limits<std::int32_t>::min();

/// The amax bits (|x| as float32 bits) of `count` consecutive blocks of `len` elements from `in`.
void simd_block_amax(const float* in, std::size_t len, std::size_t count, std::uint32_t* amax);

/// Quantises `count` consecutive blocks of `len` elements under `mode`: block b's elements as
/// fast_element_rne (nearest_even) or fast_element<mode> of scale_down(x, 2^-e), times 2^e, with
/// e = exps[b] (in [-126, 126]); element i of block b has stochastic-rounding index
/// index0 + b·len + i. Blocks with kSkipBlock are not written. `in` and `out` may alias exactly.
void simd_block_quantize(const Fast& p, format::RoundingMode mode, const float* in, float* out,
                         std::size_t len, std::size_t count, const std::int32_t* exps, std::uint64_t index0);

/// As simd_block_quantize for n elements with a scale per element: element i scaled down by inv[i]
/// and up by scale[i] (powers of two), stochastic-rounding index index0 + i.
void simd_row_quantize(const Fast& p, format::RoundingMode mode, const float* in, float* out, std::size_t n,
                       std::uint64_t index0, const float* inv, const float* scale);

/// amax[i] = max(amax[i], |in[i]| as float32 bits) for i < n.
void simd_row_amax(const float* in, std::uint32_t* amax, std::size_t n);

/// The largest |in[i]| over the finite elements, as float32 bits (0 when none is finite).
std::uint32_t simd_finite_amax(const float* in, std::size_t n);

/// Quantises `count` consecutive blocks of `len` elements under p.mode, block b as scaled_element
/// under S = scales[b] (positive, with maxd·S ≤ FLT_MAX so no result overflows float), or not at
/// all where scales[b] is 0; element i of block b has stochastic-rounding index index0 + b·len + i.
/// `in` and `out` may alias exactly.
void simd_scaled_quantize(const FastD& p, const float* in, float* out, std::size_t len, std::size_t count,
                          const double* scales, std::uint64_t index0);

/// As simd_scaled_quantize for n elements with a scale per element (element i under scales[i],
/// stochastic-rounding index index0 + i).
void simd_scaled_row_quantize(const FastD& p, const float* in, float* out, std::size_t n,
                              const double* scales, std::uint64_t index0);

}  // namespace lpemu::block::detail
