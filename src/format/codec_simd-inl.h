// Per-target pieces of the float32 fast kernel on whole vectors, shared by the Highway kernels of
// the bulk codecs (format/codec_simd.cpp) and of block quantisation (block/quantize_simd.cpp):
// fast_round's rounding step and stochastic rounding's random bits. Included once per target by
// Highway's foreach_target, hence the toggled guard.
#if defined(LPEMU_FORMAT_CODEC_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPEMU_FORMAT_CODEC_SIMD_INL_H_
#undef LPEMU_FORMAT_CODEC_SIMD_INL_H_
#else
#define LPEMU_FORMAT_CODEC_SIMD_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>

#include "format/codec_detail.hpp"

HWY_BEFORE_NAMESPACE();
namespace lpemu::format::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// a · k modulo 2^64 on 64-bit lanes: native where the target multiplies 64-bit lanes, else from
// 32 × 32 → 64-bit products (a·k = aL·kL + 2^32·(aH·kL + aL·kH) mod 2^64).
template <class D64>
HWY_INLINE hn::Vec<D64> MulConst64(D64 d64, hn::Vec<D64> a, std::uint64_t k) {
#if HWY_TARGET == HWY_SSSE3 || HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_NEON
  const hn::Repartition<std::uint32_t, D64> d32;
  const auto k_lo = hn::BitCast(d32, hn::Set(d64, k & 0xFFFFFFFFU));
  const auto k_hi = hn::BitCast(d32, hn::Set(d64, k >> 32));
  const auto a32 = hn::BitCast(d32, a);
  const auto cross =
      hn::Add(hn::MulEven(hn::BitCast(d32, hn::ShiftRight<32>(a)), k_lo), hn::MulEven(a32, k_hi));
  return hn::Add(hn::MulEven(a32, k_lo), hn::ShiftLeft<32>(cross));
#else
  return hn::Mul(a, hn::Set(d64, k));
#endif
}

// mix64 (rounding.hpp) on 64-bit lanes.
template <class D64>
HWY_INLINE hn::Vec<D64> Mix64(D64 d64, hn::Vec<D64> z) {
  z = MulConst64(d64, hn::Xor(z, hn::ShiftRight<30>(z)), 0xBF58476D1CE4E5B9ULL);
  z = MulConst64(d64, hn::Xor(z, hn::ShiftRight<27>(z)), 0x94D049BB133111EBULL);
  return hn::Xor(z, hn::ShiftRight<31>(z));
}

// sr_random_bits's 64-bit hash of index index0 + j in lane j (its high half is the random bits).
template <class D64>
HWY_INLINE hn::Vec<D64> SrHash64(D64 d64, std::uint64_t seed, std::uint64_t index0) {
  const auto seed_k = hn::Set(d64, seed * 0x9E3779B97F4A7C15ULL);
  return Mix64(d64, hn::Add(seed_k, Mix64(d64, hn::Iota(d64, index0 + 0xD1B54A32D192ED03ULL))));
}

// sr_random_bits(seed, index0 + j) in lane j: the hash on two vectors of 64-bit lanes, whose high
// halves are the lanes in order.
template <class DU>
HWY_INLINE hn::Vec<DU> RandomBits(DU du, std::uint64_t seed, std::uint64_t index0) {
#if HWY_TARGET == HWY_SCALAR
  return hn::Set(du, sr_random_bits(seed, index0));
#else
  const hn::Repartition<std::uint64_t, DU> d64;
  const auto lower = SrHash64(d64, seed, index0);
  const auto upper = SrHash64(d64, seed, index0 + hn::Lanes(d64));
  return hn::ConcatOdd(du, hn::BitCast(du, upper), hn::BitCast(du, lower));
#endif
}

// fast_round<M> on whole vectors: the rounded multiple n of the quantum 2^qe (returned) for float32
// magnitude bits `a` with sign lanes `s` (0 or 1); sets `qe` and `tiny` (below 2^emin). `rnd`
// holds the lanes' random bits under stochastic rounding.
template <RoundingMode M, class DU, class DI = hn::Rebind<std::int32_t, DU>>
HWY_INLINE hn::Vec<DU> RoundVec(DU du, const Fast& p, hn::Vec<DU> a, hn::Vec<DU> s, hn::Vec<DU> rnd,
                                hn::Vec<DI>& qe, hn::Mask<DI>& tiny) {
  const DI di;
  using VU = hn::Vec<DU>;
  using VI = hn::Vec<DI>;
  const VU zero = hn::Zero(du);
  const VU one = hn::Set(du, 1U);
  const VU fe = hn::ShiftRight<23>(a);
  const VU fe1 = hn::Max(fe, one);
  const VU sig = hn::Or(hn::And(a, hn::Set(du, 0x7fffffU)),
                        hn::IfThenElseZero(hn::Ne(fe, zero), hn::Set(du, 0x800000U)));
  const VI ex = hn::Sub(hn::BitCast(di, fe1), hn::Set(di, 127));
  tiny = hn::Lt(ex, hn::Set(di, p.emin));
  const std::int32_t tiny_qe = p.subnormals != 0 ? p.emin - p.m : p.emin;
  qe = hn::IfThenElse(tiny, hn::Set(di, tiny_qe), hn::Sub(ex, hn::Set(di, p.m)));
  const VI true_shift = hn::Add(hn::Sub(qe, hn::BitCast(di, fe1)), hn::Set(di, 150));  // >= 1
  const VU shift = hn::BitCast(du, hn::Min(true_shift, hn::Set(di, 31)));
  VU n = hn::Shr(sig, shift);
  const VU rem = hn::And(sig, hn::Sub(hn::Shl(one, shift), one));
  const VU half = hn::Shl(one, hn::Sub(shift, one));
  if constexpr (M == RoundingMode::nearest_even) {
    n = hn::Add(n, hn::Shr(hn::Add(hn::Add(rem, hn::Sub(half, one)), hn::And(n, one)), shift));
  } else if constexpr (M == RoundingMode::nearest_away) {
    n = hn::Add(n, hn::Shr(hn::Add(rem, half), shift));
  } else if constexpr (M == RoundingMode::toward_positive || M == RoundingMode::toward_negative) {
    const VU inexact = hn::Shr(hn::Add(rem, hn::Add(hn::Sub(half, one), half)), shift);  // rem != 0
    n = hn::Add(n, hn::And(inexact, M == RoundingMode::toward_positive ? hn::Xor(s, one) : s));
  } else if constexpr (M == RoundingMode::stochastic) {
    // sr_round_up: the r leading bits of the true_shift-bit fraction rem (rem < 2^24, so shifts
    // past 31 give 0), carried out of r bits by the random bits' top r: frac_r + rr >= 2^r.
    const auto r = hn::Set(di, static_cast<std::int32_t>(p.sr_bits));
    const auto zero_i = hn::Zero(di);
    const auto thirty_one = hn::Set(di, 31);
    const VU down = hn::BitCast(du, hn::Min(hn::Max(hn::Sub(true_shift, r), zero_i), thirty_one));
    const VU up = hn::BitCast(du, hn::Min(hn::Max(hn::Sub(r, true_shift), zero_i), thirty_one));
    const VU frac_r =
        hn::IfThenElse(hn::RebindMask(du, hn::Lt(true_shift, r)), hn::Shl(rem, up), hn::Shr(rem, down));
    const VU rr = hn::ShiftRightSame(rnd, static_cast<int>(32 - p.sr_bits));
    const std::uint32_t r_ones = p.sr_bits >= 32 ? ~0U : (1U << p.sr_bits) - 1U;
    n = hn::Add(n, hn::IfThenElseZero(hn::Gt(frac_r, hn::Sub(hn::Set(du, r_ones), rr)), one));
  }
  return n;
}

}  // namespace HWY_NAMESPACE
}  // namespace lpemu::format::detail
HWY_AFTER_NAMESPACE();

#endif  // LPEMU_FORMAT_CODEC_SIMD_INL_H_
