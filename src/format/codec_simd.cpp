// The bulk decode kernel in Google Highway: codes of the fast-kernel formats to float32, the
// same steps as fast_decode_one (format/codec_detail.hpp) on whole vectors. Compiled once per
// SIMD target (SSE4, AVX2, AVX-512, NEON, SVE, ...) and chosen at run time; the last partial
// vector takes the scalar fast_decode_one, so both must give the same bits (tests compare them on
// every code under every target this machine runs).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "format/codec_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "format/codec_detail.hpp"
#include "format/codec_simd.hpp"

HWY_BEFORE_NAMESPACE();
namespace lpemu::format::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class Code>
void DecodeCodes(const Fast& p, std::uint32_t code_mask, const Code* HWY_RESTRICT in, float* HWY_RESTRICT out,
                 std::size_t n) {
  const hn::ScalableTag<std::uint32_t> du;
  const hn::Rebind<float, decltype(du)> df;
  const hn::Rebind<std::int32_t, decltype(du)> di;
  const hn::Rebind<Code, decltype(du)> dc;
  using VU = hn::Vec<decltype(du)>;
  const std::size_t lanes = hn::Lanes(du);
  // Loop invariants (the scalar kernel's conditionals on p become lane masks or constants).
  const int sign_shift = p.sign_shift;
  const int m = p.m;
  const VU width = hn::Set(du, code_mask);
  const VU sign_bit = hn::Set(du, p.is_signed != 0 ? 1U << p.sign_shift : 0U);
  const VU mag_mask = hn::Set(du, p.is_signed != 0 ? (1U << p.sign_shift) - 1U : ~0U);
  const VU frac_mask = hn::Set(du, p.sub_limit - 1U);
  const VU exp_adjust = hn::Set(du, static_cast<std::uint32_t>(127 - p.bias));
  const VU sub_keep = hn::Set(du, p.subnormals != 0 ? ~0U : 0U);
  const VU sub_fields = hn::Set(du, p.sub_fields);
  const auto quantum = hn::Set(df, p.sub_quantum);
  const VU inf_mag = hn::Set(du, p.inf_mag);
  const VU max_code = hn::Set(du, p.max_code);
  const VU zero = hn::Zero(du);
  const VU one = hn::Set(du, 1U);
  const auto nan_above_max = hn::MaskFromVec(hn::Set(du, p.nan_above_max != 0 ? ~0U : 0U));
  const auto nan_sign_bit = hn::MaskFromVec(hn::Set(du, p.nan_sign_bit != 0 ? ~0U : 0U));
  const VU nan_sign_keep = hn::Set(du, p.nan_keeps_sign);
  const VU inf_bits = hn::Set(du, 0x7f800000U);
  const VU nan_bits = hn::Set(du, 0x7fc00000U);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    VU code;
    if constexpr (sizeof(Code) == 4) {  // no widening
      code = hn::And(hn::LoadU(du, in + i), width);
    } else {
      code = hn::And(hn::PromoteTo(du, hn::LoadU(dc, in + i)), width);
    }
    const VU s = hn::ShiftRightSame(hn::And(code, sign_bit), sign_shift);
    const VU mag = hn::And(code, mag_mask);
    const VU field = hn::ShiftRightSame(mag, m);
    const VU frac = hn::And(mag, frac_mask);
    const VU normal_bits =
        hn::Or(hn::ShiftLeft<23>(hn::Add(field, exp_adjust)), hn::ShiftLeftSame(frac, 23 - m));
    const auto sub = hn::Mul(hn::ConvertTo(df, hn::BitCast(di, frac)), quantum);
    const VU sub_bits = hn::And(hn::BitCast(du, sub), sub_keep);
    const VU sign = hn::ShiftLeft<31>(s);
    VU bits = hn::Or(hn::IfThenElse(hn::Lt(field, sub_fields), sub_bits, normal_bits), sign);
    const auto inf_m = hn::Eq(mag, inf_mag);
    const auto nan_m = hn::Or(hn::And(nan_above_max, hn::AndNot(inf_m, hn::Gt(mag, max_code))),
                              hn::And(nan_sign_bit, hn::And(hn::Eq(mag, zero), hn::Eq(s, one))));
    bits = hn::IfThenElse(inf_m, hn::Or(inf_bits, sign), bits);
    bits = hn::IfThenElse(nan_m, hn::Or(nan_bits, hn::ShiftLeft<31>(hn::And(s, nan_sign_keep))), bits);
    hn::StoreU(hn::BitCast(df, bits), df, out + i);
  }
  for (; i < n; ++i) out[i] = fast_decode_one(p, static_cast<std::uint32_t>(in[i]) & code_mask);
}

void DecodeU8(const Fast& p, std::uint32_t mask, const std::uint8_t* in, float* out, std::size_t n) {
  DecodeCodes(p, mask, in, out, n);
}
void DecodeU16(const Fast& p, std::uint32_t mask, const std::uint16_t* in, float* out, std::size_t n) {
  DecodeCodes(p, mask, in, out, n);
}
void DecodeU32(const Fast& p, std::uint32_t mask, const std::uint32_t* in, float* out, std::size_t n) {
  DecodeCodes(p, mask, in, out, n);
}

}  // namespace HWY_NAMESPACE
}  // namespace lpemu::format::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpemu::format::detail {

HWY_EXPORT(DecodeU8);
HWY_EXPORT(DecodeU16);
HWY_EXPORT(DecodeU32);

void simd_decode(const Fast& p, std::uint32_t mask, const std::uint8_t* in, float* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(DecodeU8)(p, mask, in, out, n);
}
void simd_decode(const Fast& p, std::uint32_t mask, const std::uint16_t* in, float* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(DecodeU16)(p, mask, in, out, n);
}
void simd_decode(const Fast& p, std::uint32_t mask, const std::uint32_t* in, float* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(DecodeU32)(p, mask, in, out, n);
}

}  // namespace lpemu::format::detail
#endif
