// Private pieces of the conversion path shared by the scalar and bulk codecs, and by the block
// layer's fast path (src/block/quantize_fast.cpp), which rounds its pre-scaled values with fast_round.
#pragma once

#include <bit>
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
  return sr_carries(frac_r, r, random) ? 1U : 0U;
}

// ---- the float32 fast kernel ------------------------------------------------------------------
// Branch-free and integer-only, one element at a time: the definition the Highway kernels of the
// bulk codecs (codec_simd.cpp, codec_simd-inl.h) and of block quantisation (block/quantize_simd.cpp,
// on pre-scaled values) follow on whole vectors, and take for their last partial vector.

/// Per-call constants of the fast kernel: everything that depends on the format and the options.
struct Fast {
  std::int32_t m, emin, bias, sign_shift;
  std::uint32_t max_code, sub_limit;  // sub_limit = 2^m: magnitudes below it are subnormal
  std::uint32_t subnormals, ftz, daz, is_signed, neg_zero;
  std::uint32_t nan_code[2], inf_code[2], ovf_code[2], neg_code;
  std::uint32_t sr_bits;
  std::uint64_t seed;
  float sub_quantum;         // 2^(emin - m): value of subnormal code 1
  std::uint32_t sub_fields;  // exponent fields decoded as frac·sub_quantum: 1, or 0 (see make_fast)
  // Decoding specials: the Inf magnitude (~0 if none), whether magnitudes above max_code are NaN
  // (ieee, fn), whether the bare sign bit is NaN (fnuz), and the sign mask of NaN results.
  std::uint32_t inf_mag, nan_above_max, nan_sign_bit, nan_keeps_sign;
};

/// Whether f takes the fast kernel: a floating format with a zero, m <= 22, that fits float32.
bool fast_eligible(const Format& f);

/// The fast kernel's constants for f under o (the special outcomes come from convert() itself).
Fast make_fast(const Format& f, const ConvertOptions& o);

// The kernels below use only integer arithmetic, comparisons and masks (no bool made from an
// integer, no control flow), so that GCC if-converts and vectorises them.

/// Branch-free selection: c ? a : b for an all-ones/all-zero mask m.
[[gnu::always_inline]] inline std::uint32_t selm(std::uint32_t m, std::uint32_t a, std::uint32_t b) {
  return b ^ ((a ^ b) & m);
}

/// All-ones when `c` holds.
[[gnu::always_inline]] inline std::uint32_t mask(bool c) { return 0U - static_cast<std::uint32_t>(c); }

/// The rounding step's result n·2^qe, before any range check; `tiny` (a mask) when below 2^emin.
struct FastRounded {
  std::uint32_t n;
  std::int32_t qe;
  std::uint32_t tiny;  // all ones when tiny
};

/// Rounds float32 magnitude bits `a` (sign bit `s`) to the format's grid under M; `index` drives stochastic
/// rounding.
template <RoundingMode M>
[[gnu::always_inline]] inline FastRounded fast_round(const Fast& p, std::uint32_t a, std::uint32_t s,
                                                     std::uint64_t index) {
  const std::int32_t fe = static_cast<std::int32_t>(a >> 23);
  const std::int32_t fe1 = fe > 1 ? fe : 1;
  const std::uint32_t sig = (a & 0x7fffffU) | (mask(fe != 0) & 0x800000U);
  const std::int32_t ex = fe1 - 127;
  const bool tiny = ex < p.emin;
  const std::int32_t tiny_qe = p.subnormals != 0 ? p.emin - p.m : p.emin;  // loop-invariant
  const std::int32_t qe = tiny ? tiny_qe : ex - p.m;
  const std::int32_t true_shift = qe - (fe1 - 150);              // >= 1 because m <= 22
  const std::int32_t shift = true_shift < 31 ? true_shift : 31;  // past 24 every bit is discarded anyway
  const std::uint32_t n = sig >> shift;
  const std::uint32_t rem = sig & ((1U << shift) - 1U);
  const std::uint32_t half = 1U << (shift - 1);
  std::uint32_t up = 0;
  if constexpr (M == RoundingMode::nearest_even) {
    up = (rem + half - 1U + (n & 1U)) >> shift;  // rem > half, or rem == half with n odd
  } else if constexpr (M == RoundingMode::nearest_away) {
    up = (rem + half) >> shift;  // rem >= half
  } else if constexpr (M == RoundingMode::toward_positive) {
    up = ((rem + (half - 1U) + half) >> shift) & (s ^ 1U);  // rem != 0, positive
  } else if constexpr (M == RoundingMode::toward_negative) {
    up = ((rem + (half - 1U) + half) >> shift) & s;  // rem != 0, negative
  } else if constexpr (M == RoundingMode::stochastic) {
    // The r leading discarded bits, exactly, in 64 bits (the true shift may exceed 31).
    const std::uint64_t rem64 = true_shift >= 32 ? sig : rem;
    up = sr_round_up(rem64, true_shift, static_cast<int>(p.sr_bits), sr_random_bits(p.seed, index));
  }
  return {n + up, qe, mask(tiny)};
}

/// Rounds float32 bits `u` to a code of the format (the definition is convert()'s); `index` is the
/// element's stochastic-rounding index.
template <RoundingMode M>
[[gnu::always_inline]] inline std::uint32_t fast_encode_one(const Fast& p, std::uint32_t u,
                                                            std::uint64_t index) {
  const std::uint32_t s = u >> 31;
  const std::uint32_t negm = 0U - s;  // all ones for negative inputs
  std::uint32_t a = u & 0x7fffffffU;
  a = selm(mask((p.daz != 0) & (a < 0x00800000U)), 0U, a);
  const FastRounded r = fast_round<M>(p, a, s, index);
  const std::uint32_t normal_mag = (static_cast<std::uint32_t>(r.qe + p.m + p.bias - 1) << p.m) + r.n;
  const std::uint32_t tiny_mag = r.n << (p.subnormals != 0 ? 0 : p.m);  // loop-invariant shift
  std::uint32_t mag = selm(r.tiny, tiny_mag, normal_mag);
  mag = selm(mask((p.ftz != 0) & (mag < p.sub_limit)), 0U, mag);
  const std::uint32_t zero_code = (s << p.sign_shift) & mask(p.neg_zero != 0);
  std::uint32_t code = selm(mask(mag == 0), zero_code, mag | ((s & p.is_signed) << p.sign_shift));
  code = selm(mask(mag > p.max_code), selm(negm, p.ovf_code[1], p.ovf_code[0]), code);
  code = selm(negm & mask((p.is_signed == 0) & (a != 0)), p.neg_code, code);
  code = selm(mask(a == 0x7f800000U), selm(negm, p.inf_code[1], p.inf_code[0]), code);
  code = selm(mask(a > 0x7f800000U), selm(negm, p.nan_code[1], p.nan_code[0]), code);
  return code;
}

/// Value of a code of a fast-eligible format (NaN/Inf codes included), as decode() gives it.
[[gnu::always_inline]] inline float fast_decode_one(const Fast& p, std::uint32_t code) {
  const std::uint32_t s = p.is_signed != 0 ? (code >> p.sign_shift) & 1U : 0U;
  const std::uint32_t mag = p.is_signed != 0 ? code & ((1U << p.sign_shift) - 1U) : code;
  const std::uint32_t field = mag >> p.m;
  const std::uint32_t frac = mag & (p.sub_limit - 1U);
  // Normal: rebuild float bits directly; subnormal: frac · 2^(emin-m), an exact product.
  const std::uint32_t normal_bits =
      (static_cast<std::uint32_t>(static_cast<std::int32_t>(field) - p.bias + 127) << 23) |
      (frac << (23 - p.m));
  const float sub = static_cast<float>(static_cast<std::int32_t>(frac)) * p.sub_quantum;
  const std::uint32_t sub_bits = std::bit_cast<std::uint32_t>(sub) & mask(p.subnormals != 0);
  std::uint32_t bits = selm(mask(field < p.sub_fields), sub_bits, normal_bits) | (s << 31);
  const std::uint32_t inf_m = mask(mag == p.inf_mag);
  const std::uint32_t nan_m = (mask(p.nan_above_max != 0) & mask(mag > p.max_code) & ~inf_m) |
                              (mask(p.nan_sign_bit != 0) & mask(mag == 0) & (0U - s));
  bits = selm(inf_m, 0x7f800000U | (s << 31), bits);
  bits = selm(nan_m, 0x7fc00000U | ((s & p.nan_keeps_sign) << 31), bits);
  return std::bit_cast<float>(bits);
}

}  // namespace lpemu::format::detail
