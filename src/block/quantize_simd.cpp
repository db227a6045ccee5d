// The block-quantize kernels in Google Highway: each block's amax (or each column's, for blocks
// across rows), then each element under its block's scale, the same steps as scale_down and
// fast_element_rne (nearest_even) or fast_element (other modes; block/quantize_fast.hpp) on whole
// vectors for power-of-two scales, and as scaled_element in double for other scales. Compiled once per SIMD
// target and chosen at run time; a run's last partial vector takes the scalar steps, so both must give the
// same bits (tests compare the fast and generic paths under every target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "block/quantize_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "block/quantize_fast.hpp"
#include "format/codec_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lpemu::block::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// scale_down on whole vectors: x·inv, or the smallest subnormal of x's sign where a non-zero x
// underflows to zero.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> ScaleDownBits(DF /*df*/, hn::Vec<DF> x, hn::Vec<DF> inv) {
  const hn::RebindToUnsigned<DF> du;
  const auto abs_mask = hn::Set(du, kAbsMask);
  const auto zero = hn::Zero(du);
  const auto xb = hn::BitCast(du, x);
  const auto yb = hn::BitCast(du, hn::Mul(x, inv));
  const auto lost = hn::And(hn::Eq(hn::And(yb, abs_mask), zero), hn::Ne(hn::And(xb, abs_mask), zero));
  return hn::IfThenElse(lost, hn::Or(hn::And(xb, hn::Set(du, 0x80000000U)), hn::Set(du, 1U)), yb);
}

void BlockAmax(const float* in, std::size_t len, std::size_t count, std::uint32_t* amax) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const std::size_t lanes = hn::Lanes(df);
  const auto abs_mask = hn::Set(du, kAbsMask);
  for (std::size_t b = 0; b < count; ++b) {
    const float* x = in + b * len;
    auto m = hn::Zero(du);
    std::size_t i = 0;
    for (; i + lanes <= len; i += lanes)
      m = hn::Max(m, hn::And(hn::BitCast(du, hn::LoadU(df, x + i)), abs_mask));
    std::uint32_t s = hn::GetLane(hn::MaxOfLanes(du, m));
    for (; i < len; ++i) {
      const std::uint32_t v = bits_of(x[i]) & kAbsMask;
      s = v > s ? v : s;
    }
    amax[b] = s;
  }
}

// The element step on whole vectors: scaled value bits `yb` (scale_down's result) onto the element
// grid with saturation and the +0 rule, as fast_element_rne (nearest_even: add and subtract
// 2^(qe+23)) or fast_element<M> (the element codec's rounding step, then n·2^qe); `rnd` holds the
// lanes' random bits under stochastic rounding.
template <format::RoundingMode M, class DF>
HWY_INLINE hn::Vec<DF> ElementVec(DF df, const Fast& p, hn::Vec<hn::RebindToUnsigned<DF>> yb,
                                  hn::Vec<hn::RebindToUnsigned<DF>> rnd) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const format::detail::Fast& e = p.element;
  const auto zero = hn::Zero(du);
  const auto a = hn::And(yb, hn::Set(du, kAbsMask));
  const auto maxf = hn::Set(df, p.maxf);
  hn::Vec<DF> v;
  hn::Vec<decltype(du)> sign;
  if constexpr (M == format::RoundingMode::nearest_even) {
    auto c = hn::BitCast(df, hn::ShiftLeft<23>(hn::Set(di, p.int_qe + 150)));
    if (p.is_int == 0) {
      const auto ex = hn::Sub(hn::BitCast(di, hn::ShiftRight<23>(a)), hn::Set(di, 127));
      const auto q_sub = hn::Set(di, e.subnormals != 0 ? e.emin - e.m : e.emin);  // below emin
      const auto qe = hn::IfThenElse(hn::Lt(ex, hn::Set(di, e.emin)), q_sub, hn::Sub(ex, hn::Set(di, e.m)));
      c = hn::BitCast(df, hn::ShiftLeft<23>(hn::Add(qe, hn::Set(di, 150))));
    }
    const auto r = hn::Sub(hn::Add(hn::BitCast(df, a), c), c);
    v = hn::IfThenElse(hn::Lt(r, maxf), r, maxf);
    sign = hn::And(yb, hn::Set(du, 0x80000000U));
    if (p.positive_zero != 0) sign = hn::IfThenZeroElse(hn::Eq(hn::BitCast(du, v), zero), sign);
  } else {
    const auto s = hn::ShiftRight<31>(yb);
    auto qe = hn::Zero(di);
    auto tiny = hn::FirstN(di, 0);
    const auto n = format::detail::HWY_NAMESPACE::RoundVec<M>(du, e, a, s, rnd, qe, tiny);
    // n·2^qe is exact: n < 2^(m+2), qe >= -90.
    const auto v0 = hn::Mul(hn::ConvertTo(df, hn::BitCast(di, n)),
                            hn::BitCast(df, hn::ShiftLeft<23>(hn::Add(qe, hn::Set(di, 127)))));
    v = hn::IfThenElse(hn::Lt(v0, maxf), v0, maxf);
    sign = hn::ShiftLeft<31>(s);
    if (p.positive_zero != 0) sign = hn::IfThenZeroElse(hn::Eq(n, zero), sign);
  }
  return hn::BitCast(df, hn::Or(hn::BitCast(du, v), sign));
}

// fast_element_rne or fast_element<M> for one element (the kernels' last partial vector).
template <format::RoundingMode M>
HWY_INLINE float ElementOne(const Fast& p, float y, std::uint64_t index) {
  if constexpr (M == format::RoundingMode::nearest_even) {
    return fast_element_rne(p, y);
  } else {
    return fast_element<M>(p, y, index);
  }
}

// n elements of `in` to `out` around the element step, element i scaled down by inv[i] and back
// up by scale[i] (kPerElement), or all by inv[0] and scale[0]; element i has stochastic-rounding
// index index0 + i.
template <format::RoundingMode M, bool kPerElement>
HWY_INLINE void QuantizeRun(const Fast& params, const float* in, float* out, std::size_t n,
                            std::uint64_t index0, const float* inv, const float* scale) {
  const Fast p = params;  // a local copy: stores to `out` cannot alias it, so its fields stay in registers
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const std::size_t lanes = hn::Lanes(df);
  if (n == 0) return;
  const std::uint64_t seed = p.element.seed;
  const auto inv0 = hn::Set(df, inv[0]);
  const auto scale0 = hn::Set(df, scale[0]);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto yb = ScaleDownBits(df, hn::LoadU(df, in + i), kPerElement ? hn::LoadU(df, inv + i) : inv0);
    const auto rnd = M == format::RoundingMode::stochastic
                         ? format::detail::HWY_NAMESPACE::RandomBits(du, seed, index0 + i)
                         : hn::Zero(du);
    const auto v = ElementVec<M>(df, p, yb, rnd);
    hn::StoreU(hn::Mul(v, kPerElement ? hn::LoadU(df, scale + i) : scale0), df, out + i);
  }
  for (; i < n; ++i) {
    const std::size_t k = kPerElement ? i : 0;
    out[i] = ElementOne<M>(p, scale_down(in[i], inv[k]), index0 + i) * scale[k];
  }
}

template <format::RoundingMode M>
void BlockQuantizeMode(const Fast& p, const float* in, float* out, std::size_t len, std::size_t count,
                       const std::int32_t* exps, std::uint64_t index0) {
  for (std::size_t b = 0; b < count; ++b) {
    if (exps[b] == kSkipBlock) continue;
    const float inv = std::bit_cast<float>(static_cast<std::uint32_t>(127 - exps[b]) << 23);
    const float scale = std::bit_cast<float>(static_cast<std::uint32_t>(exps[b] + 127) << 23);
    QuantizeRun<M, false>(p, in + b * len, out + b * len, len, index0 + b * len, &inv, &scale);
  }
}

void BlockQuantize(const Fast& p, format::RoundingMode mode, const float* in, float* out, std::size_t len,
                   std::size_t count, const std::int32_t* exps, std::uint64_t index0) {
  format::detail::dispatch_mode(
      mode, [&]<format::RoundingMode M>() { BlockQuantizeMode<M>(p, in, out, len, count, exps, index0); });
}

void RowQuantize(const Fast& p, format::RoundingMode mode, const float* in, float* out, std::size_t n,
                 std::uint64_t index0, const float* inv, const float* scale) {
  format::detail::dispatch_mode(
      mode, [&]<format::RoundingMode M>() { QuantizeRun<M, true>(p, in, out, n, index0, inv, scale); });
}

void RowAmax(const float* in, std::uint32_t* amax, std::size_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const std::size_t lanes = hn::Lanes(df);
  const auto abs_mask = hn::Set(du, kAbsMask);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::And(hn::BitCast(du, hn::LoadU(df, in + i)), abs_mask);
    hn::StoreU(hn::Max(hn::LoadU(du, amax + i), v), du, amax + i);
  }
  for (; i < n; ++i) amax[i] = std::max(amax[i], bits_of(in[i]) & kAbsMask);
}

std::uint32_t FiniteAmax(const float* in, std::size_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const std::size_t lanes = hn::Lanes(df);
  const auto abs_mask = hn::Set(du, kAbsMask);
  const auto inf = hn::Set(du, kInfBits);
  auto m = hn::Zero(du);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto a = hn::And(hn::BitCast(du, hn::LoadU(df, in + i)), abs_mask);
    m = hn::Max(m, hn::IfThenElseZero(hn::Lt(a, inf), a));
  }
  std::uint32_t s = hn::GetLane(hn::MaxOfLanes(du, m));
  for (; i < n; ++i) {
    const std::uint32_t a = bits_of(in[i]) & kAbsMask;
    s = a < kInfBits && a > s ? a : s;
  }
  return s;
}

// grid_exponent on whole vectors of doubles, for magnitude bits `a`.
template <class DD>
HWY_INLINE hn::Vec<hn::RebindToSigned<DD>> QuantumExpD(DD /*dd*/, const FastD& p,
                                                       hn::Vec<hn::RebindToUnsigned<DD>> a) {
  const hn::RebindToSigned<DD> di;
  if (p.is_int) return hn::Set(di, std::int64_t{p.int_qe});
  const auto ex = hn::Sub(hn::BitCast(di, hn::ShiftRight<52>(a)), hn::Set(di, 1023));
  const auto q_sub = hn::Set(di, std::int64_t{p.subnormals ? p.emin - p.m : p.emin});  // below emin
  return hn::IfThenElse(hn::Lt(ex, hn::Set(di, std::int64_t{p.emin})), q_sub,
                        hn::Sub(ex, hn::Set(di, std::int64_t{p.m})));
}

// 2^e on whole vectors of doubles, e in [-1022, 1023].
template <class DD>
HWY_INLINE hn::Vec<DD> Pow2D(DD dd, hn::Vec<hn::RebindToSigned<DD>> e) {
  const hn::RebindToSigned<DD> di;
  return hn::BitCast(dd, hn::ShiftLeft<52>(hn::Add(e, hn::Set(di, 1023))));
}

// The top r bits of sr_random_bits(seed, index0 + j) in lane j, as doubles: one hash per 64-bit lane.
template <class DD>
HWY_INLINE hn::Vec<DD> RandomTopD(DD dd, std::uint64_t seed, std::uint64_t index0, int r) {
  const hn::RebindToUnsigned<DD> du;
  const hn::RebindToSigned<DD> di;
  const auto h = format::detail::HWY_NAMESPACE::SrHash64(du, seed, index0);
  return hn::ConvertTo(dd, hn::BitCast(di, hn::ShiftRightSame(h, 64 - r)));
}

// round_on_grid_d<M> with the constants of p on whole vectors; `rtop` holds RandomTopD's bits
// under stochastic rounding.
template <format::RoundingMode M, class DD>
HWY_INLINE hn::Vec<DD> OnGridD(DD dd, const FastD& p, hn::Vec<DD> y, hn::Vec<DD> rtop) {
  using format::RoundingMode;
  const hn::RebindToUnsigned<DD> du;
  const hn::RebindToSigned<DD> di;
  const auto sign_mask = hn::Set(du, std::uint64_t{1} << 63);
  const auto u = hn::BitCast(du, y);
  const auto a = hn::AndNot(sign_mask, u);
  const auto qe = QuantumExpD(dd, p, a);
  hn::Vec<DD> r;
  if constexpr (M == RoundingMode::nearest_even) {
    const auto c = Pow2D(dd, hn::Add(qe, hn::Set(di, 52)));
    r = hn::Sub(hn::Add(hn::BitCast(dd, a), c), c);
  } else {
    const auto zero = hn::Zero(dd);
    const auto t = hn::Mul(hn::BitCast(dd, a), Pow2D(dd, hn::Sub(hn::Zero(di), qe)));
    const auto n = hn::Floor(t);
    const auto f = hn::Sub(t, n);
    const auto neg = hn::RebindMask(dd, hn::Ne(hn::And(u, sign_mask), hn::Zero(du)));
    auto up = hn::FirstN(dd, 0);  // toward_zero
    if constexpr (M == RoundingMode::nearest_away) up = hn::Ge(f, hn::Set(dd, 0.5));
    if constexpr (M == RoundingMode::toward_positive) up = hn::AndNot(neg, hn::Gt(f, zero));
    if constexpr (M == RoundingMode::toward_negative) up = hn::And(neg, hn::Gt(f, zero));
    if constexpr (M == RoundingMode::stochastic) {
      const auto two_r = hn::Set(dd, std::ldexp(1.0, p.sr_bits));
      up = hn::Ge(hn::Add(hn::Floor(hn::Mul(f, two_r)), rtop), two_r);
    }
    r = hn::Mul(hn::IfThenElse(up, hn::Add(n, hn::Set(dd, 1.0)), n), Pow2D(dd, qe));
  }
  auto sign = hn::And(u, sign_mask);
  const auto maxd = hn::IfThenElse(hn::RebindMask(dd, hn::Ne(sign, hn::Zero(du))), hn::Set(dd, p.maxneg),
                                   hn::Set(dd, p.maxd));
  const auto v = hn::IfThenElse(hn::Lt(r, maxd), r, maxd);
  if (p.positive_zero) sign = hn::IfThenZeroElse(hn::Eq(hn::BitCast(du, v), hn::Zero(du)), sign);
  return hn::BitCast(dd, hn::Or(hn::BitCast(du, v), sign));
}

// scaled_element<M> on whole vectors of doubles: n elements of `in` to `out`, element i under
// scales[i] (kPerElement) or all under scales[0], with stochastic-rounding index index0 + i.
template <format::RoundingMode M, bool kPerElement>
HWY_INLINE void ScaledRun(const FastD& params, const float* in, float* out, std::size_t n,
                          const double* scales, std::uint64_t index0) {
  const FastD p = params;  // a local copy, as in QuantizeRun
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const std::size_t lanes = hn::Lanes(dd);
  if (n == 0) return;
  const auto s0 = hn::Set(dd, scales[0]);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto s = kPerElement ? hn::LoadU(dd, scales + i) : s0;
    const auto y = hn::Div(hn::PromoteTo(dd, hn::LoadU(df, in + i)), s);
    const auto rtop =
        M == format::RoundingMode::stochastic ? RandomTopD(dd, p.seed, index0 + i, p.sr_bits) : hn::Zero(dd);
    hn::StoreU(hn::DemoteTo(df, hn::Mul(OnGridD<M>(dd, p, y, rtop), s)), df, out + i);
  }
  for (; i < n; ++i) out[i] = scaled_element<M>(p, in[i], scales[kPerElement ? i : 0], index0 + i);
}

void ScaledQuantize(const FastD& p, const float* in, float* out, std::size_t len, std::size_t count,
                    const double* scales, std::uint64_t index0) {
  format::detail::dispatch_mode(p.mode, [&]<format::RoundingMode M>() {
    for (std::size_t b = 0; b < count; ++b) {
      if (scales[b] > 0.0)
        ScaledRun<M, false>(p, in + b * len, out + b * len, len, scales + b, index0 + b * len);
    }
  });
}

void ScaledRowQuantize(const FastD& p, const float* in, float* out, std::size_t n, const double* scales,
                       std::uint64_t index0) {
  format::detail::dispatch_mode(
      p.mode, [&]<format::RoundingMode M>() { ScaledRun<M, true>(p, in, out, n, scales, index0); });
}

}  // namespace HWY_NAMESPACE
}  // namespace lpemu::block::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpemu::block::detail {

HWY_EXPORT(BlockAmax);
HWY_EXPORT(BlockQuantize);
HWY_EXPORT(RowQuantize);
HWY_EXPORT(RowAmax);
HWY_EXPORT(FiniteAmax);
HWY_EXPORT(ScaledQuantize);
HWY_EXPORT(ScaledRowQuantize);

void simd_block_amax(const float* in, std::size_t len, std::size_t count, std::uint32_t* amax) {
  HWY_DYNAMIC_DISPATCH(BlockAmax)(in, len, count, amax);
}

void simd_block_quantize(const Fast& p, format::RoundingMode mode, const float* in, float* out,
                         std::size_t len, std::size_t count, const std::int32_t* exps, std::uint64_t index0) {
  HWY_DYNAMIC_DISPATCH(BlockQuantize)(p, mode, in, out, len, count, exps, index0);
}

void simd_row_quantize(const Fast& p, format::RoundingMode mode, const float* in, float* out, std::size_t n,
                       std::uint64_t index0, const float* inv, const float* scale) {
  HWY_DYNAMIC_DISPATCH(RowQuantize)(p, mode, in, out, n, index0, inv, scale);
}

void simd_row_amax(const float* in, std::uint32_t* amax, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(RowAmax)(in, amax, n);
}

std::uint32_t simd_finite_amax(const float* in, std::size_t n) {
  return HWY_DYNAMIC_DISPATCH(FiniteAmax)(in, n);
}

void simd_scaled_quantize(const FastD& p, const float* in, float* out, std::size_t len, std::size_t count,
                          const double* scales, std::uint64_t index0) {
  HWY_DYNAMIC_DISPATCH(ScaledQuantize)(p, in, out, len, count, scales, index0);
}

void simd_scaled_row_quantize(const FastD& p, const float* in, float* out, std::size_t n,
                              const double* scales, std::uint64_t index0) {
  HWY_DYNAMIC_DISPATCH(ScaledRowQuantize)(p, in, out, n, scales, index0);
}

}  // namespace lpemu::block::detail
#endif
