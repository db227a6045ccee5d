// The vector row kernel of the fast datapath GEMM in Google Highway: R rows of A × one 16-column
// panel of B under a truncating BFMA datapath (tensor-cores.md §1), lanes = columns, so every max
// and sum is vertical and rows share B's loads. The same results as element_trunc (fast.cpp),
// with each block's largest exponent sum found in 8-bit lanes, four products per column at once,
// and its products formed, truncated and summed in float where that is exact
// (rows_trunc_applies, below). Between blocks the accumulator stays decoded per lane as a signed
// significand sr and its lsb exponent q (sr = 0: zero); the common case of each block's rounding
// (a normal result, no overflow) is vectorised, other lanes take round_state. Compiled once per
// SIMD target and chosen at run time; tests run it under every target the machine supports.
#include <algorithm>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "datapath/fast_rows.cpp"
#include <hwy/foreach_target.h>          // IWYU pragma: keep
#include "common/hwy_sized_targets.hpp"  // arrays of vectors: sized targets only

#include <hwy/highway.h>

#include "datapath/fast_rows.hpp"

HWY_BEFORE_NAMESPACE();
namespace lpemu::datapath::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::CappedTag<std::int32_t, kPanel>;
using DF = hn::RebindToFloat<D>;
using V = hn::Vec<D>;
using VF = hn::Vec<DF>;

// x >> s (logical) per lane, 0 for counts s outside 0..31 (negative ones included).
HWY_INLINE V ShrZ(V x, V s) {
  const D d;
  const hn::RebindToUnsigned<D> du;
  const auto us = hn::BitCast(du, s);
  const auto r = hn::BitCast(du, x) >> hn::And(us, hn::Set(du, 31U));
  return hn::BitCast(d, hn::IfThenElseZero(hn::Lt(us, hn::Set(du, 32U)), r));
}

// x << s per lane, 0 for counts s outside 0..31 (negative ones included).
HWY_INLINE V ShlZ(V x, V s) {
  const D d;
  const hn::RebindToUnsigned<D> du;
  const auto us = hn::BitCast(du, s);
  const auto r = hn::BitCast(du, x) << hn::And(us, hn::Set(du, 31U));
  return hn::BitCast(d, hn::IfThenElseZero(hn::Lt(us, hn::Set(du, 32U)), r));
}

// −t where x < 0, t elsewhere: (t ^ s) − s with s = x's sign broadcast. Not IfNegativeThenElse:
// Highway 1.0.3 implements it for 32-bit lanes by a float IfThenElse that its SSSE3 target
// evaluates on every mask bit, not the sign bit only (caught by the every-target test).
HWY_INLINE V SignOf(V t, V x) {
  const V s = hn::BroadcastSignBit(x);
  return hn::Sub(hn::Xor(t, s), s);
}

// bit_width of lanes in 0..2^31 − 1 (garbage for 0): the float exponent, less one where the
// conversion rounded up to the next power of two.
HWY_INLINE V BitWidth(V x) {
  const D d;
  const hn::RebindToFloat<D> df;
  V k = hn::Sub(hn::ShiftRight<23>(hn::BitCast(d, hn::ConvertTo(df, x))), hn::Set(d, 127));
  k = hn::Add(k, hn::VecFromMask(d, hn::Eq(ShrZ(x, k), hn::Zero(d))));  // −1 where it rounded up
  return hn::Add(k, hn::Set(d, 1));
}

// §1.4: the largest exponent sum e_a + e_b over the products of a block (quads t0..t1 of the 8-bit
// layout) per lane group g = r·NV + c; 2·kZeroExp where every product has a zero operand.
template <std::size_t R, std::size_t G>
HWY_INLINE void BlockExpMax(const RowsArgs<R>& A, std::size_t t0, std::size_t t1, V (&raw)[G]) {
  const D d;
  constexpr std::size_t N = hn::MaxLanes(D());
  constexpr std::size_t NV = kPanel / N;
  constexpr std::size_t Q = kPanel * kExpGroup;  // bytes per quad of the B panel
#if HWY_TARGET == HWY_SCALAR
  // One lane per vector: the same saturating 8-bit sums, a byte at a time.
  for (std::size_t r = 0; r < R; ++r) {
    for (std::size_t c = 0; c < NV; ++c) {
      int best = kZeroExp8;
      for (std::size_t t = t0; t < t1; ++t) {
        for (std::size_t j = 0; j < kExpGroup; ++j) {
          const int sum = A.ae[r][t * kExpGroup + j] + A.bek[t * Q + c * kExpGroup + j];
          best = std::max(best, std::clamp(sum, -128, 127));
        }
      }
      raw[r * NV + c] = hn::Set(d, best < kAllZeroBelow8 ? 2 * kZeroExp : best);
    }
  }
#else
  const hn::Repartition<std::int8_t, D> d8;
  hn::Vec<decltype(d8)> m8[G];
  for (std::size_t g = 0; g < G; ++g) m8[g] = hn::Set(d8, kZeroExp8);
  for (std::size_t t = t0; t < t1; ++t) {
    for (std::size_t c = 0; c < NV; ++c) {
      const auto be = hn::LoadU(d8, A.bek + t * Q + c * N * kExpGroup);
      for (std::size_t r = 0; r < R; ++r) {
        std::int32_t a4;  // four exponents of row r, one per product of the quad
        std::memcpy(&a4, A.ae[r] + t * kExpGroup, sizeof a4);
        m8[r * NV + c] = hn::Max(m8[r * NV + c], hn::SaturatedAdd(hn::BitCast(d8, hn::Set(d, a4)), be));
      }
    }
  }
  for (std::size_t g = 0; g < G; ++g) {
    // The largest of each 32-bit lane's four bytes, sign-extended.
    auto x = hn::Max(m8[g], hn::BitCast(d8, hn::ShiftRight<16>(hn::BitCast(d, m8[g]))));
    x = hn::Max(x, hn::BitCast(d8, hn::ShiftRight<8>(hn::BitCast(d, x))));
    const V e = hn::ShiftRight<24>(hn::ShiftLeft<24>(hn::BitCast(d, x)));
    raw[g] = hn::IfThenElse(hn::Lt(e, hn::Set(d, kAllZeroBelow8)), hn::Set(d, 2 * kZeroExp), e);
  }
#endif
}

template <std::size_t R>
HWY_INLINE void RowsTrunc(RowsArgs<R>& A) {
  const D d;
  const DF df;
  constexpr std::size_t N = hn::MaxLanes(D());
  constexpr std::size_t NV = kPanel / N;  // vectors per panel row
  constexpr std::size_t G = R * NV;       // lane groups: g = r·NV + c holds row r, columns c·N..
  const TruncParams& P = *A.P;
  const Datapath& dp = *P.dp;
  const format::Format& f = dp.accumulator;
  const int pbits = dp.accumulator_fraction_bits;
  const bool rne = dp.accumulator_rounding.mode == format::RoundingMode::nearest_even;
  const std::size_t k = A.k;
  // The accumulator between blocks: sr·2^q, its §1.3 exponent e_c = max(floor(log2|c|),
  // addend_emin) (kept, not recomputed), and bad = −1 where the general engine decides.
  V sr[G], q[G], ec[G], bad[G];
  for (std::size_t r = 0; r < R; ++r) {
    HWY_ALIGN std::int32_t s0[kPanel], q0[kPanel], e0[kPanel], b0[kPanel];
    for (std::size_t l = 0; l < kPanel; ++l) {
      const Operand c0 = decode_acc(f, A.c[r][l], dp.addend_emin);
      const auto mag = static_cast<std::int32_t>(c0.mag);
      const bool finite = c0.kind == Kind::finite;
      s0[l] = finite ? (c0.neg ? -mag : mag) : 0;
      q0[l] = finite ? c0.lsb : 0;
      e0[l] = finite ? c0.e : 0;
      b0[l] = c0.kind == Kind::nan || c0.kind == Kind::inf ? -1 : 0;
    }
    for (std::size_t c = 0; c < NV; ++c) {
      sr[r * NV + c] = hn::Load(d, s0 + c * N);
      q[r * NV + c] = hn::Load(d, q0 + c * N);
      ec[r * NV + c] = hn::Load(d, e0 + c * N);
      bad[r * NV + c] = hn::Load(d, b0 + c * N);
    }
  }
  const V zero = hn::Zero(d);
  const V one = hn::Set(d, 1);
  const V floor = hn::Set(d, P.floor);
  const V addend_emin = hn::Set(d, dp.addend_emin);
  const V emin = hn::Set(d, f.emin);
  const V hidden = hn::Set(d, 1 << pbits);
  const V pb = hn::Set(d, pbits);
  const V F = hn::Set(d, P.F);
  const V scale_lo = hn::Set(d, -126);
  const V scale_hi = hn::Set(d, 126);
  const V float_bias = hn::Set(d, 127);
  const V all_zero_below = hn::Set(d, kAllZeroBelow);
  const V q_common = hn::Set(d, P.emax_common - pbits);
  const V thirty_two = hn::Set(d, 32);
  for (std::size_t s0 = 0; s0 < k || s0 == 0; s0 += P.block) {
    const std::size_t s1 = std::min(k, s0 + P.block);
    // §1.4: E = max(e_i, e_c, E_floor); zero operands carry a hugely negative exponent.
    V raw[G];
    const std::size_t t0 = s0 / P.block * (P.block8 / kExpGroup);
    BlockExpMax<R>(A, t0, t0 + (s1 - s0 + kExpGroup - 1) / kExpGroup, raw);
    V emax[G], absr[G];
    for (std::size_t g = 0; g < G; ++g) {
      absr[g] = hn::Abs(sr[g]);
      const auto c_zero = hn::Eq(sr[g], zero);
      emax[g] = hn::Max(hn::Max(raw[g], floor), hn::IfThenElse(c_zero, floor, ec[g]));
      // The sign of an all-zero block depends on the zeros' signs: the general engine decides.
      bad[g] = hn::Or(bad[g], hn::VecFromMask(d, hn::And(c_zero, hn::Lt(raw[g], all_zero_below))));
    }
    // §1.5: each product truncated toward zero at 2^q; §1.6: exact sum. In float, exactly: a·b
    // is exact (its significand and exponent fit float's), scaling it by 2^-q is exact down to
    // float's normal range (below it the value is < 1 and truncates to 0 either way), Trunc
    // rounds toward zero, and every partial sum is an integer below 2^24 (rows_trunc_applies).
    VF scale[G], sumf[G];
    for (std::size_t g = 0; g < G; ++g) {
      // 2^-q as float bits; q beyond ±126 only where every product of the block is zero or
      // truncates to zero (rows_trunc_applies), so clamping it changes nothing.
      const V qc = hn::Min(hn::Max(hn::Sub(emax[g], F), scale_lo), scale_hi);
      scale[g] = hn::BitCast(df, hn::ShiftLeft<23>(hn::Sub(float_bias, qc)));
      sumf[g] = hn::Zero(df);
    }
    for (std::size_t p = s0; p < s1; ++p) {
      for (std::size_t c = 0; c < NV; ++c) {
        const VF bv = hn::LoadU(df, A.bvk + p * kPanel + c * N);
        for (std::size_t r = 0; r < R; ++r) {
          const std::size_t g = r * NV + c;
          sumf[g] = hn::Add(sumf[g], hn::Trunc(hn::Mul(hn::Mul(hn::Set(df, A.av[r][p]), bv), scale[g])));
        }
      }
    }
    for (std::size_t g = 0; g < G; ++g) {
      const V qb = hn::Sub(emax[g], F);
      // c aligned at 2^qb, truncated toward zero (< 2^(F+1), so the sum stays in int32).
      const V shc = hn::Sub(qb, q[g]);
      const V s = hn::Add(hn::ConvertTo(d, sumf[g]),
                          SignOf(hn::Or(ShlZ(absr[g], hn::Neg(shc)), ShrZ(absr[g], shc)), sr[g]));
      // round_state's common case: RZ or RNE to p fraction bits of a normal result.
      const V mag = hn::Abs(s);
      V qo = hn::Sub(hn::Max(hn::Sub(hn::Add(qb, BitWidth(mag)), one), emin), pb);
      const V sh = hn::Sub(qo, qb);
      const V rz = hn::Or(ShlZ(mag, hn::Neg(sh)), ShrZ(mag, sh));
      V rv = rz;
      if (rne) {
        const V half = ShlZ(one, hn::Sub(sh, one));
        const V rem = hn::And(mag, ShrZ(hn::Set(d, -1), hn::Sub(thirty_two, sh)));  // the sh bits shifted out
        const auto up =
            hn::And(hn::Gt(sh, zero),
                    hn::Or(hn::Gt(rem, half), hn::And(hn::Eq(rem, half), hn::Eq(hn::And(rz, one), one))));
        rv = hn::Sub(rz, hn::VecFromMask(d, up));  // −1 where the rounding goes up
      }
      const V carry = hn::ShiftRightSame(rv, pbits + 1);
      rv = rv >> carry;
      qo = hn::Add(qo, carry);
      const auto common = hn::And(hn::And(hn::Not(hn::Lt(rv, hidden)), hn::Not(hn::Gt(qo, q_common))),
                                  hn::Lt(sh, thirty_two));
      const auto is_zero = hn::Eq(s, zero);
      V nsr = hn::IfThenZeroElse(is_zero, SignOf(rv, s));
      V nq = hn::IfThenZeroElse(is_zero, qo);
      V nec = hn::Max(hn::Add(qo, pb), addend_emin);  // a normal result: floor(log2) = qo + p
      const auto rare = hn::Not(hn::Or(hn::Or(common, is_zero), hn::Ne(bad[g], zero)));
      if (HWY_UNLIKELY(!hn::AllFalse(d, rare))) {
        HWY_ALIGN std::int32_t a_s[N], a_qb[N], a_sr[N], a_q[N], a_ec[N], a_bad[N], a_rare[N];
        hn::Store(s, d, a_s);
        hn::Store(qb, d, a_qb);
        hn::Store(nsr, d, a_sr);
        hn::Store(nq, d, a_q);
        hn::Store(nec, d, a_ec);
        hn::Store(bad[g], d, a_bad);
        hn::Store(hn::VecFromMask(d, rare), d, a_rare);
        for (std::size_t l = 0; l < N; ++l) {
          if (a_rare[l] == 0) continue;
          AccState st;
          if (round_state(f, pbits, rne, a_s[l], a_qb[l], st)) {
            const auto rr = static_cast<std::int32_t>(st.r);
            a_sr[l] = st.neg ? -rr : rr;
            a_q[l] = st.q;
            a_ec[l] = std::max(st.q + static_cast<int>(std::bit_width(st.r)) - 1, dp.addend_emin);
          } else {
            a_bad[l] = -1;
            a_sr[l] = 0;
            a_q[l] = 0;
          }
        }
        nsr = hn::Load(d, a_sr);
        nq = hn::Load(d, a_q);
        nec = hn::Load(d, a_ec);
        bad[g] = hn::Load(d, a_bad);
      }
      // Lanes already handed to the general engine keep a zero state, so every lane stays in range.
      const auto is_bad = hn::Ne(bad[g], zero);
      sr[g] = hn::IfThenZeroElse(is_bad, nsr);
      q[g] = hn::IfThenZeroElse(is_bad, nq);
      ec[g] = nec;  // read only where sr != 0
    }
    if (s1 >= k) break;
  }
  for (std::size_t g = 0; g < G; ++g) {
    HWY_ALIGN std::int32_t a_sr[N], a_q[N], a_bad[N];
    hn::Store(sr[g], d, a_sr);
    hn::Store(q[g], d, a_q);
    hn::Store(bad[g], d, a_bad);
    const std::size_t r = g / NV;
    for (std::size_t l = 0; l < N; ++l) {
      const std::size_t col = (g % NV) * N + l;
      const std::int32_t v = a_sr[l];
      A.ok[r][col] = a_bad[l] == 0;
      const AccState st{static_cast<std::uint64_t>(v < 0 ? -static_cast<std::int64_t>(v) : v), a_q[l], v < 0};
      A.out[r][col] = A.ok[r][col] ? encode_state(f, pbits, st) : 0;
    }
  }
}

void RowsTruncTile(RowsArgs<kRowTile>& args) { RowsTrunc<kRowTile>(args); }
void RowsTruncOne(RowsArgs<1>& args) { RowsTrunc<1>(args); }

}  // namespace HWY_NAMESPACE
}  // namespace lpemu::datapath::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpemu::datapath::detail {

// Exponents fit the 8-bit lanes: finite alignment exponents lie in [emin, emax] within ±kExp8Max.
// Products of a and b are exact in float: significands of at most 24 bits, lsb at least 2^-149,
// below 2^126 (so the smallest scale, 2^-126, truncates every one to zero, as any larger q
// does). A block holding a nonzero product has q = E − F >= a.emin + b.emin − F >= −126, so its
// scale is never clamped. Each truncated product is below 2^(F+2), so `block` of them sum to
// below 2^24 when block <= 2^(22−F): every partial sum is an exact float.
bool rows_trunc_applies(const format::Format& a, const format::Format& b, int F, std::size_t block) {
  const auto fits8 = [](const format::Format& f) { return f.emin >= -kExp8Max && f.emax <= kExp8Max; };
  if (!fits8(a) || !fits8(b)) return false;
  const int lsb = (a.emin - a.mantissa_bits) + (b.emin - b.mantissa_bits);
  const int top = (a.emax + 1) + (b.emax + 1);
  return a.mantissa_bits + b.mantissa_bits + 2 <= 24 && lsb >= -149 && top <= 126 &&
         a.emin + b.emin - F >= -126 && F <= 22 && block <= (std::size_t{1} << (22 - F));
}

HWY_EXPORT(RowsTruncTile);
HWY_EXPORT(RowsTruncOne);

void rows_trunc(RowsArgs<kRowTile>& args) { HWY_DYNAMIC_DISPATCH(RowsTruncTile)(args); }

void rows_trunc(RowsArgs<1>& args) { HWY_DYNAMIC_DISPATCH(RowsTruncOne)(args); }

}  // namespace lpemu::datapath::detail
#endif  // HWY_ONCE
