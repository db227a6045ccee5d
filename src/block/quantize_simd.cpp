// The block-quantize kernels of power-of-two scales in Google Highway: each block's amax (or each
// column's, for blocks across rows), then each element under its block's scale, the same steps as
// scale_down and fast_element_rne (nearest_even) or fast_element (other modes;
// block/quantize_fast.hpp) on whole vectors. Compiled once per SIMD target and chosen at run time;
// a run's last partial vector takes the scalar steps, so both must give the same bits (tests
// compare the fast and generic paths under every target).
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

}  // namespace HWY_NAMESPACE
}  // namespace lpemu::block::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpemu::block::detail {

HWY_EXPORT(BlockAmax);
HWY_EXPORT(BlockQuantize);
HWY_EXPORT(RowQuantize);
HWY_EXPORT(RowAmax);

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

}  // namespace lpemu::block::detail
#endif
