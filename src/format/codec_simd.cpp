// The bulk codec kernels in Google Highway: codes of the fast-kernel formats to float32 (the same
// steps as fast_decode_one, format/codec_detail.hpp, on whole vectors) and float32 to codes under
// the deterministic rounding modes (as fast_encode_one). Compiled once per
// SIMD target (SSE4, AVX2, AVX-512, NEON, SVE, ...) and chosen at run time; the last partial
// vector takes the scalar fast_decode_one, so both must give the same bits (tests compare them on
// every code under every target this machine runs). Stochastic rounding draws each lane's random
// bits from rounding.hpp's counter-based hash on 64-bit lanes.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "format/codec_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <bit>
#include <type_traits>

#include "format/codec_detail.hpp"
#include "format/codec_simd-inl.h"
#include "format/codec_simd.hpp"

HWY_BEFORE_NAMESPACE();
namespace lpemu::format::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The float32 bits of the codes `code` (bits above the format's width already cleared), as
// fast_decode_one. Inlined into loops, whose invariant constants the compiler hoists.
template <class DU>
HWY_INLINE hn::Vec<DU> DecodeVec(DU du, const Fast& p, hn::Vec<DU> code) {
  const hn::Rebind<float, DU> df;
  const hn::Rebind<std::int32_t, DU> di;
  using VU = hn::Vec<DU>;
  const VU sign_bit = hn::Set(du, p.is_signed != 0 ? 1U << p.sign_shift : 0U);
  const VU mag_mask = hn::Set(du, p.is_signed != 0 ? (1U << p.sign_shift) - 1U : ~0U);
  const VU zero = hn::Zero(du);
  const VU one = hn::Set(du, 1U);
  const VU s = hn::ShiftRightSame(hn::And(code, sign_bit), p.sign_shift);
  const VU mag = hn::And(code, mag_mask);
  const VU field = hn::ShiftRightSame(mag, p.m);
  const VU frac = hn::And(mag, hn::Set(du, p.sub_limit - 1U));
  const VU normal_bits =
      hn::Or(hn::ShiftLeft<23>(hn::Add(field, hn::Set(du, static_cast<std::uint32_t>(127 - p.bias)))),
             hn::ShiftLeftSame(frac, 23 - p.m));
  const auto sub = hn::Mul(hn::ConvertTo(df, hn::BitCast(di, frac)), hn::Set(df, p.sub_quantum));
  const VU sub_bits = hn::And(hn::BitCast(du, sub), hn::Set(du, p.subnormals != 0 ? ~0U : 0U));
  const VU sign = hn::ShiftLeft<31>(s);
  VU bits = hn::Or(hn::IfThenElse(hn::Lt(field, hn::Set(du, p.sub_fields)), sub_bits, normal_bits), sign);
  const auto inf_m = hn::Eq(mag, hn::Set(du, p.inf_mag));
  const auto nan_above_max = hn::MaskFromVec(hn::Set(du, p.nan_above_max != 0 ? ~0U : 0U));
  const auto nan_sign_bit = hn::MaskFromVec(hn::Set(du, p.nan_sign_bit != 0 ? ~0U : 0U));
  const auto nan_m = hn::Or(hn::And(nan_above_max, hn::AndNot(inf_m, hn::Gt(mag, hn::Set(du, p.max_code)))),
                            hn::And(nan_sign_bit, hn::And(hn::Eq(mag, zero), hn::Eq(s, one))));
  bits = hn::IfThenElse(inf_m, hn::Or(hn::Set(du, 0x7f800000U), sign), bits);
  bits = hn::IfThenElse(
      nan_m, hn::Or(hn::Set(du, 0x7fc00000U), hn::ShiftLeft<31>(hn::And(s, hn::Set(du, p.nan_keeps_sign)))),
      bits);
  return bits;
}

template <class Code>
void DecodeCodes(const Fast& params, std::uint32_t code_mask, const Code* HWY_RESTRICT in,
                 float* HWY_RESTRICT out, std::size_t n) {
  const Fast p = params;  // a local copy: `out` cannot alias it, so its fields stay in registers
  const hn::ScalableTag<std::uint32_t> du;
  const hn::Rebind<float, decltype(du)> df;
  const hn::Rebind<Code, decltype(du)> dc;
  using VU = hn::Vec<decltype(du)>;
  const std::size_t lanes = hn::Lanes(du);
  const VU width = hn::Set(du, code_mask);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    VU code;
    if constexpr (sizeof(Code) == 4) {  // no widening
      code = hn::And(hn::LoadU(du, in + i), width);
    } else {
      code = hn::And(hn::PromoteTo(du, hn::LoadU(dc, in + i)), width);
    }
    hn::StoreU(hn::BitCast(df, DecodeVec(du, p, code)), df, out + i);
  }
  for (; i < n; ++i) out[i] = fast_decode_one(p, static_cast<std::uint32_t>(in[i]) & code_mask);
}

// The codes of float32 bits `u` under mode M, as fast_encode_one<M> (the same steps, each
// conditional a lane mask); `rnd` holds the lanes' random bits under stochastic rounding.
template <RoundingMode M, class DU>
HWY_INLINE hn::Vec<DU> EncodeVec(DU du, const Fast& p, hn::Vec<DU> u, hn::Vec<DU> rnd) {
  const hn::Rebind<std::int32_t, DU> di;
  using VU = hn::Vec<DU>;
  using VI = hn::Vec<decltype(di)>;
  const VU zero = hn::Zero(du);
  const VU s = hn::ShiftRight<31>(u);
  const auto neg = hn::Ne(s, zero);
  VU a = hn::And(u, hn::Set(du, 0x7fffffffU));
  a = hn::IfThenZeroElse(hn::Lt(a, hn::Set(du, p.daz != 0 ? 0x00800000U : 0U)), a);
  auto tiny = hn::FirstN(di, 0);
  VI qe = hn::Zero(di);
  const VU n = RoundVec<M>(du, p, a, s, rnd, qe, tiny);
  // The code of n·2^qe.
  const VU normal_mag =
      hn::Add(hn::ShiftLeftSame(hn::BitCast(du, hn::Add(qe, hn::Set(di, p.m + p.bias - 1))), p.m), n);
  const VU tiny_mag = hn::ShiftLeftSame(n, p.subnormals != 0 ? 0 : p.m);
  VU mag = hn::IfThenElse(hn::RebindMask(du, tiny), tiny_mag, normal_mag);
  mag = hn::IfThenZeroElse(hn::Lt(mag, hn::Set(du, p.ftz != 0 ? p.sub_limit : 0U)), mag);
  const VU sign_field = hn::ShiftLeftSame(s, p.sign_shift);
  const VU zero_code = hn::And(sign_field, hn::Set(du, p.neg_zero != 0 ? ~0U : 0U));
  VU code = hn::IfThenElse(hn::Eq(mag, zero), zero_code,
                           hn::Or(mag, hn::And(sign_field, hn::Set(du, p.is_signed != 0 ? ~0U : 0U))));
  code = hn::IfThenElse(hn::Gt(mag, hn::Set(du, p.max_code)),
                        hn::IfThenElse(neg, hn::Set(du, p.ovf_code[1]), hn::Set(du, p.ovf_code[0])), code);
  if (p.is_signed == 0) code = hn::IfThenElse(hn::And(neg, hn::Ne(a, zero)), hn::Set(du, p.neg_code), code);
  const VU inf = hn::Set(du, 0x7f800000U);
  code = hn::IfThenElse(hn::Eq(a, inf),
                        hn::IfThenElse(neg, hn::Set(du, p.inf_code[1]), hn::Set(du, p.inf_code[0])), code);
  code = hn::IfThenElse(hn::Gt(a, inf),
                        hn::IfThenElse(neg, hn::Set(du, p.nan_code[1]), hn::Set(du, p.nan_code[0])), code);
  return code;
}

// n float32 values to codes in storage Out (uint8/16/32), or, for Out = float, to the codes'
// values (quantize); the last partial vector takes the scalar kernels.
template <RoundingMode M, class Out>
void EncodeSpan(const Fast& params, const float* HWY_RESTRICT in, Out* HWY_RESTRICT out, std::size_t n,
                std::uint64_t index0) {
  const Fast p = params;
  const hn::ScalableTag<std::uint32_t> du;
  const hn::Rebind<float, decltype(du)> df;
  const std::size_t lanes = hn::Lanes(du);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto rnd = M == RoundingMode::stochastic ? RandomBits(du, p.seed, index0 + i) : hn::Zero(du);
    const auto code = EncodeVec<M>(du, p, hn::BitCast(du, hn::LoadU(df, in + i)), rnd);
    if constexpr (std::is_same_v<Out, float>) {
      hn::StoreU(hn::BitCast(df, DecodeVec(du, p, code)), df, out + i);
    } else if constexpr (sizeof(Out) == 4) {
      hn::StoreU(code, du, out + i);
    } else {
      // Codes fit the storage, so a saturating demotion from int32 narrows them exactly
      // (Highway 1.0.3's TruncateTo to 8 bits gives wrong lanes on AVX3_DL).
      const hn::Rebind<Out, decltype(du)> dout;
      const hn::Rebind<std::int32_t, decltype(du)> di;
      hn::StoreU(hn::DemoteTo(dout, hn::BitCast(di, code)), dout, out + i);
    }
  }
  for (; i < n; ++i) {
    const std::uint32_t code = fast_encode_one<M>(p, std::bit_cast<std::uint32_t>(in[i]), index0 + i);
    if constexpr (std::is_same_v<Out, float>) {
      out[i] = fast_decode_one(p, code);
    } else {
      out[i] = static_cast<Out>(code);
    }
  }
}

template <class Out>
void EncodeAnyMode(const Fast& p, RoundingMode mode, const float* in, Out* out, std::size_t n,
                   std::uint64_t index0) {
  dispatch_mode(mode, [&]<RoundingMode M>() { EncodeSpan<M>(p, in, out, n, index0); });
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
void EncodeU8(const Fast& p, RoundingMode mode, const float* in, std::uint8_t* out, std::size_t n,
              std::uint64_t index0) {
  EncodeAnyMode(p, mode, in, out, n, index0);
}
void EncodeU16(const Fast& p, RoundingMode mode, const float* in, std::uint16_t* out, std::size_t n,
               std::uint64_t index0) {
  EncodeAnyMode(p, mode, in, out, n, index0);
}
void EncodeU32(const Fast& p, RoundingMode mode, const float* in, std::uint32_t* out, std::size_t n,
               std::uint64_t index0) {
  EncodeAnyMode(p, mode, in, out, n, index0);
}
void QuantizeF32(const Fast& p, RoundingMode mode, const float* in, float* out, std::size_t n,
                 std::uint64_t index0) {
  EncodeAnyMode(p, mode, in, out, n, index0);
}

}  // namespace HWY_NAMESPACE
}  // namespace lpemu::format::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpemu::format::detail {

HWY_EXPORT(DecodeU8);
HWY_EXPORT(DecodeU16);
HWY_EXPORT(DecodeU32);
HWY_EXPORT(EncodeU8);
HWY_EXPORT(EncodeU16);
HWY_EXPORT(EncodeU32);
HWY_EXPORT(QuantizeF32);

void simd_decode(const Fast& p, std::uint32_t mask, const std::uint8_t* in, float* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(DecodeU8)(p, mask, in, out, n);
}
void simd_decode(const Fast& p, std::uint32_t mask, const std::uint16_t* in, float* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(DecodeU16)(p, mask, in, out, n);
}
void simd_decode(const Fast& p, std::uint32_t mask, const std::uint32_t* in, float* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(DecodeU32)(p, mask, in, out, n);
}
void simd_encode(const Fast& p, RoundingMode mode, const float* in, std::uint8_t* out, std::size_t n,
                 std::uint64_t index0) {
  HWY_DYNAMIC_DISPATCH(EncodeU8)(p, mode, in, out, n, index0);
}
void simd_encode(const Fast& p, RoundingMode mode, const float* in, std::uint16_t* out, std::size_t n,
                 std::uint64_t index0) {
  HWY_DYNAMIC_DISPATCH(EncodeU16)(p, mode, in, out, n, index0);
}
void simd_encode(const Fast& p, RoundingMode mode, const float* in, std::uint32_t* out, std::size_t n,
                 std::uint64_t index0) {
  HWY_DYNAMIC_DISPATCH(EncodeU32)(p, mode, in, out, n, index0);
}
void simd_quantize(const Fast& p, RoundingMode mode, const float* in, float* out, std::size_t n,
                   std::uint64_t index0) {
  HWY_DYNAMIC_DISPATCH(QuantizeF32)(p, mode, in, out, n, index0);
}

}  // namespace lpemu::format::detail
#endif
