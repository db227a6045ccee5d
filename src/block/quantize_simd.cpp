// The block-quantize kernels in Google Highway for blocks that are contiguous runs: each block's
// amax, then each element under the block's power-of-two scale, the same steps as scale_down and
// fast_element_rne (nearest_even) or fast_element (other modes; block/quantize_fast.hpp) on whole
// vectors. Compiled once per
// SIMD target and chosen at run time; a block's last partial vector takes the scalar steps, so
// both must give the same bits (tests compare the fast and generic paths under every target).
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

void BlockQuantizeRne(const Fast& p, const float* in, float* out, std::size_t len, std::size_t count,
                      const std::int32_t* exps) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const std::size_t lanes = hn::Lanes(df);
  // Loop invariants (fast_element_rne's conditionals on p become constants or lane masks).
  const format::detail::Fast& e = p.element;
  const auto abs_mask = hn::Set(du, kAbsMask);
  const auto sign_mask = hn::Set(du, 0x80000000U);
  const auto zero = hn::Zero(du);
  const auto emin = hn::Set(di, e.emin);
  const auto q_sub = hn::Set(di, e.subnormals != 0 ? e.emin - e.m : e.emin);  // below emin
  const auto m = hn::Set(di, e.m);
  const auto bias = hn::Set(di, 127);
  const auto c_bias = hn::Set(di, 150);
  const auto int_c = hn::BitCast(df, hn::ShiftLeft<23>(hn::Set(di, p.int_qe + 150)));
  const bool is_int = p.is_int != 0;
  const bool positive_zero = p.positive_zero != 0;
  const auto maxf = hn::Set(df, p.maxf);
  for (std::size_t b = 0; b < count; ++b) {
    if (exps[b] == kSkipBlock) continue;
    const float inv_s = std::bit_cast<float>(static_cast<std::uint32_t>(127 - exps[b]) << 23);
    const float sc_s = std::bit_cast<float>(static_cast<std::uint32_t>(exps[b] + 127) << 23);
    const auto inv = hn::Set(df, inv_s);
    const auto sc = hn::Set(df, sc_s);
    const float* x = in + b * len;
    float* y = out + b * len;
    std::size_t i = 0;
    for (; i + lanes <= len; i += lanes) {
      const auto yb = ScaleDownBits(df, hn::LoadU(df, x + i), inv);
      // fast_element_rne: round |y| at 2^qe by adding and subtracting 2^(qe+23), clamp, sign.
      const auto s = hn::And(yb, sign_mask);
      const auto a = hn::And(yb, abs_mask);
      auto c = int_c;
      if (!is_int) {
        const auto ex = hn::Sub(hn::BitCast(di, hn::ShiftRight<23>(a)), bias);
        const auto qe = hn::IfThenElse(hn::Lt(ex, emin), q_sub, hn::Sub(ex, m));
        c = hn::BitCast(df, hn::ShiftLeft<23>(hn::Add(qe, c_bias)));
      }
      const auto r = hn::Sub(hn::Add(hn::BitCast(df, a), c), c);
      const auto vb = hn::BitCast(du, hn::IfThenElse(hn::Lt(r, maxf), r, maxf));
      const auto sign = positive_zero ? hn::IfThenZeroElse(hn::Eq(vb, zero), s) : s;
      hn::StoreU(hn::Mul(hn::BitCast(df, hn::Or(vb, sign)), sc), df, y + i);
    }
    for (; i < len; ++i) y[i] = fast_element_rne(p, scale_down(x[i], inv_s)) * sc_s;
  }
}

template <format::RoundingMode M>
void BlockQuantizeMode(const Fast& p, const float* in, float* out, std::size_t len, std::size_t count,
                       const std::int32_t* exps, std::uint64_t index0) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const std::size_t lanes = hn::Lanes(df);
  const format::detail::Fast e = p.element;
  const auto abs_mask = hn::Set(du, kAbsMask);
  const auto zero = hn::Zero(du);
  const auto maxf = hn::Set(df, p.maxf);
  const bool positive_zero = p.positive_zero != 0;
  for (std::size_t b = 0; b < count; ++b) {
    if (exps[b] == kSkipBlock) continue;
    const float inv_s = std::bit_cast<float>(static_cast<std::uint32_t>(127 - exps[b]) << 23);
    const float sc_s = std::bit_cast<float>(static_cast<std::uint32_t>(exps[b] + 127) << 23);
    const auto inv = hn::Set(df, inv_s);
    const auto sc = hn::Set(df, sc_s);
    const float* x = in + b * len;
    float* y = out + b * len;
    const std::uint64_t first = index0 + b * len;
    std::size_t i = 0;
    for (; i + lanes <= len; i += lanes) {
      const auto yb = ScaleDownBits(df, hn::LoadU(df, x + i), inv);
      const auto s = hn::ShiftRight<31>(yb);
      const auto rnd = M == format::RoundingMode::stochastic
                           ? format::detail::HWY_NAMESPACE::RandomBits(du, e.seed, first + i)
                           : zero;
      auto qe = hn::Zero(di);
      auto tiny = hn::FirstN(di, 0);
      const auto n =
          format::detail::HWY_NAMESPACE::RoundVec<M>(du, e, hn::And(yb, abs_mask), s, rnd, qe, tiny);
      // n·2^qe (exact: n < 2^(m+2), qe >= -90), clamped to max, with the sign.
      const auto v0 = hn::Mul(hn::ConvertTo(df, hn::BitCast(di, n)),
                              hn::BitCast(df, hn::ShiftLeft<23>(hn::Add(qe, hn::Set(di, 127)))));
      const auto vb = hn::BitCast(du, hn::IfThenElse(hn::Lt(v0, maxf), v0, maxf));
      auto sign = hn::ShiftLeft<31>(s);
      if (positive_zero) sign = hn::IfThenZeroElse(hn::Eq(n, zero), sign);
      hn::StoreU(hn::Mul(hn::BitCast(df, hn::Or(vb, sign)), sc), df, y + i);
    }
    for (; i < len; ++i) y[i] = fast_element<M>(p, scale_down(x[i], inv_s), first + i) * sc_s;
  }
}

void BlockQuantize(const Fast& p, format::RoundingMode mode, const float* in, float* out, std::size_t len,
                   std::size_t count, const std::int32_t* exps, std::uint64_t index0) {
  format::detail::dispatch_mode(
      mode, [&]<format::RoundingMode M>() { BlockQuantizeMode<M>(p, in, out, len, count, exps, index0); });
}

}  // namespace HWY_NAMESPACE
}  // namespace lpemu::block::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpemu::block::detail {

HWY_EXPORT(BlockAmax);
HWY_EXPORT(BlockQuantizeRne);
HWY_EXPORT(BlockQuantize);

void simd_block_amax(const float* in, std::size_t len, std::size_t count, std::uint32_t* amax) {
  HWY_DYNAMIC_DISPATCH(BlockAmax)(in, len, count, amax);
}

void simd_block_quantize_rne(const Fast& p, const float* in, float* out, std::size_t len, std::size_t count,
                             const std::int32_t* exps) {
  HWY_DYNAMIC_DISPATCH(BlockQuantizeRne)(p, in, out, len, count, exps);
}

void simd_block_quantize(const Fast& p, format::RoundingMode mode, const float* in, float* out,
                         std::size_t len, std::size_t count, const std::int32_t* exps, std::uint64_t index0) {
  HWY_DYNAMIC_DISPATCH(BlockQuantize)(p, mode, in, out, len, count, exps, index0);
}

}  // namespace lpemu::block::detail
#endif
