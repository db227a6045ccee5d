// The vector row kernel of the fast datapath GEMM in Google Highway: R rows of A × one 16-column
// panel of B under a truncating BFMA datapath (docs/tensor-core-model.md), lanes = columns, so every max
// and sum is vertical and rows share B's loads. The same results as element_trunc (fast.cpp),
// with each block's largest exponent sum found in 8-bit lanes, four products per column at once,
// and its products formed, truncated and summed in float where that is exact
// (rows_trunc_applies, below). Between blocks the accumulator is kept as the float it equals; the
// common case of each block's rounding (a normal, finite result) is done on the float's bits, other
// lanes take round_state. Compiled once per SIMD target and chosen at run time; tests run it
// under every target the machine supports.
#include <algorithm>
#include <bit>
#include <cstring>

// Before Highway's first header: arrays of vectors need sized targets only.
#include "common/hwy_sized_targets.hpp"  // IWYU pragma: keep

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "datapath/fast_rows.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

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

// Step 4 (docs/tensor-core-model.md): the largest exponent sum e_a + e_b over the products of a block (quads
// t0..t1 of the 8-bit layout) per lane group g = r·NV + c; 2·kZeroExp where every product has a zero operand.
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

// ±mag·2^lsb as a float, where it is one (through double: both steps exact).
HWY_INLINE float FloatOf(bool neg, std::uint64_t mag, int lsb) {
  const double v =
      static_cast<double>(mag) * std::bit_cast<double>(static_cast<std::uint64_t>(lsb + 1023) << 52);
  return static_cast<float>(neg ? -v : v);
}

// A float's magnitude as sig·2^lsb (sig = 0 for zero).
HWY_INLINE std::uint64_t SigOf(float v, int& lsb) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
  const std::uint32_t field = (bits >> 23) & 0xFF;
  const std::uint32_t mant = bits & 0x7FFFFF;
  lsb = field == 0 ? -149 : static_cast<int>(field) - 150;
  return field == 0 ? mant : mant | 0x800000;
}

// The decoded state of an accumulator value v kept at p fraction bits (a value of f: exact).
HWY_INLINE AccState StateOf(const format::Format& f, int p, float v) {
  int lsb = 0;
  const std::uint64_t sig = SigOf(v, lsb);
  if (sig == 0) return {};
  const int q = std::max(lsb + static_cast<int>(std::bit_width(sig)) - 1, f.emin) - p;
  return {q >= lsb ? sig >> (q - lsb) : sig << (lsb - q), q, v < 0.0f};
}

// round_state for one lane the vector path cannot take: the block's sum s_p (exact, an integer
// in float) plus the accumulator c truncated at 2^qb, rounded; false where the general engine
// decides.
HWY_INLINE bool RoundLane(const Datapath& dp, int pbits, bool rne, float s_p, float c, int qb, float& value,
                          int& ec) {
  auto s = static_cast<std::int64_t>(s_p);
  int lsb = 0;
  const auto mag = static_cast<std::int64_t>(SigOf(c, lsb));
  if (mag != 0) {
    const int sh = qb - lsb;  // |c| < 2^(qb + F + 1): left shifts stay below 2^48
    const std::int64_t aligned = sh <= 0 ? mag << -sh : (sh >= 63 ? 0 : mag >> sh);
    s += c < 0.0f ? -aligned : aligned;
  }
  AccState st;
  if (!round_state(dp.accumulator, pbits, rne, s, qb, st)) return false;
  value = FloatOf(st.neg, st.r, st.q);
  ec = std::max(st.q + static_cast<int>(std::bit_width(st.r)) - 1, dp.addend_emin);
  return true;
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
  // The accumulator between blocks: its value cv as a float (exact), its step-3 exponent
  // e_c = max(floor(log2|c|), addend_emin) (kept, not recomputed), and bad = −1 where the general
  // engine decides.
  VF cv[G];
  V ec[G], bad[G];
  for (std::size_t r = 0; r < R; ++r) {
    HWY_ALIGN float v0[kPanel];
    HWY_ALIGN std::int32_t e0[kPanel], b0[kPanel];
    for (std::size_t l = 0; l < kPanel; ++l) {
      const Operand c0 = decode_acc(f, A.c[r][l], dp.addend_emin);
      v0[l] = c0.kind == Kind::finite ? FloatOf(c0.neg, c0.mag, c0.lsb) : 0.0f;
      e0[l] = c0.kind == Kind::finite ? c0.e : 0;
      b0[l] = c0.kind == Kind::nan || c0.kind == Kind::inf ? -1 : 0;
    }
    for (std::size_t c = 0; c < NV; ++c) {
      cv[r * NV + c] = hn::Load(df, v0 + c * N);
      ec[r * NV + c] = hn::Load(d, e0 + c * N);
      bad[r * NV + c] = hn::Load(d, b0 + c * N);
    }
  }
  const V zero = hn::Zero(d);
  const VF zerof = hn::Zero(df);
  const V floor = hn::Set(d, P.floor);
  const V addend_emin = hn::Set(d, dp.addend_emin);
  const V emin = hn::Set(d, f.emin);
  const V F = hn::Set(d, P.F);
  const V scale_lo = hn::Set(d, -126);
  const V scale_hi = hn::Set(d, 126);
  const V float_bias = hn::Set(d, 127);
  const V exp_field = hn::Set(d, 255);
  const V all_zero_below = hn::Set(d, kAllZeroBelow);
  const V e_common = hn::Set(d, P.emax_common);
  // Rounding a float to p fraction bits on its bits: drop the low 23 − p bits (RZ), after adding
  // half an ulp less one plus the kept lsb (RNE; a carry moves into the exponent as it should).
  const int drop = 23 - pbits;
  const V keep = hn::Set(d, static_cast<std::int32_t>(~((std::uint32_t{1} << drop) - 1)));
  const V half_less_one = hn::Set(d, drop == 0 ? 0 : (std::int32_t{1} << (drop - 1)) - 1);
  const V one = hn::Set(d, 1);
  for (std::size_t s0 = 0; s0 < k || s0 == 0; s0 += P.block) {
    const std::size_t s1 = std::min(k, s0 + P.block);
    // Step 4 (docs/tensor-core-model.md): E = max(e_i, e_c, E_floor); zero operands carry a hugely negative
    // exponent.
    V raw[G];
    const std::size_t t0 = s0 / P.block * (P.block8 / kExpGroup);
    BlockExpMax<R>(A, t0, t0 + (s1 - s0 + kExpGroup - 1) / kExpGroup, raw);
    V qb[G], qc[G];
    VF scale[G], sumf[G];
    hn::Mask<D> c_zero[G];  // the accumulator entering the block is zero
    for (std::size_t g = 0; g < G; ++g) {
      c_zero[g] = hn::RebindMask(d, hn::Eq(cv[g], zerof));
      const V emax = hn::Max(hn::Max(raw[g], floor), hn::IfThenElse(c_zero[g], floor, ec[g]));
      // The sign of an all-zero block depends on the zeros' signs: the general engine decides.
      bad[g] = hn::Or(bad[g], hn::VecFromMask(d, hn::And(c_zero[g], hn::Lt(raw[g], all_zero_below))));
      // 2^-q as float bits; q beyond ±126 only where every product of the block is zero or
      // truncates to zero (rows_trunc_applies), so clamping it changes none of them; lanes with a
      // nonzero c and a clamped q take RoundLane.
      qb[g] = hn::Sub(emax, F);
      qc[g] = hn::Min(hn::Max(qb[g], scale_lo), scale_hi);
      scale[g] = hn::BitCast(df, hn::ShiftLeft<23>(hn::Sub(float_bias, qc[g])));
      sumf[g] = hn::Zero(df);
    }
    // Step 5 (docs/tensor-core-model.md): each product truncated toward zero at 2^q; step 6: exact sum. In
    // float, exactly: a·b is exact (its significand and exponent fit float's), scaling it by 2^-q is exact
    // down to float's normal range (below it the value is < 1 and truncates to 0 either way), Trunc rounds
    // toward zero, and every partial sum is an integer below 2^24 (rows_trunc_applies).
    for (std::size_t p = s0; p < s1; ++p) {
      for (std::size_t c = 0; c < NV; ++c) {
        const VF bv = hn::LoadU(df, A.bvk + p * kPanel + c * N);
        for (std::size_t r = 0; r < R; ++r) {
          const std::size_t g = r * NV + c;
          sumf[g] = hn::Add(sumf[g], hn::Trunc(hn::Mul(hn::Mul(hn::Set(df, A.av[r][p]), bv), scale[g])));
        }
      }
    }
    VF nv[G];
    V nec[G], rare[G];
    V any_rare = zero;
    for (std::size_t g = 0; g < G; ++g) {
      // c aligned at 2^q and truncated toward zero, plus the products: an integer below 2^24.
      const VF s = hn::Add(sumf[g], hn::Trunc(hn::Mul(cv[g], scale[g])));
      // s·2^q, exact where q was not clamped (a finite float; Inf only past the format's range).
      V vb = hn::BitCast(d, hn::Mul(s, hn::BitCast(df, hn::ShiftLeft<23>(hn::Add(qc[g], float_bias)))));
      if (rne && drop > 0)
        vb = hn::Add(vb, hn::Add(half_less_one, hn::And(hn::ShiftRightSame(vb, drop), one)));
      vb = hn::And(vb, keep);
      // round_state's common case: a normal, finite result (RZ or RNE to p fraction bits). A value
      // below 2^emin that RNE carried to 2^emin is 2^emin at the format's coarser quantum too.
      const V e = hn::Sub(hn::And(hn::ShiftRight<23>(vb), exp_field), float_bias);
      const auto exact = hn::Eq(qb[g], qc[g]);
      const auto common = hn::And(exact, hn::And(hn::Not(hn::Lt(e, emin)), hn::Not(hn::Gt(e, e_common))));
      const auto is_zero = hn::And(hn::RebindMask(d, hn::Eq(s, zerof)), hn::Or(exact, c_zero[g]));
      nv[g] = hn::IfThenElseZero(hn::RebindMask(df, common), hn::BitCast(df, vb));
      nec[g] = hn::Max(e, addend_emin);  // floor(log2|value|) of a normal result
      rare[g] = hn::VecFromMask(d, hn::Not(hn::Or(hn::Or(common, is_zero), hn::Ne(bad[g], zero))));
      any_rare = hn::Or(any_rare, rare[g]);
    }
    if (HWY_UNLIKELY(!hn::AllTrue(d, hn::Eq(any_rare, zero)))) {
      for (std::size_t g = 0; g < G; ++g) {
        HWY_ALIGN float a_s[N], a_c[N], a_v[N];  // the products' sum, c, the new value
        HWY_ALIGN std::int32_t a_qb[N], a_ec[N], a_bad[N], a_rare[N];
        hn::Store(sumf[g], df, a_s);
        hn::Store(cv[g], df, a_c);
        hn::Store(nv[g], df, a_v);
        hn::Store(qb[g], d, a_qb);
        hn::Store(nec[g], d, a_ec);
        hn::Store(bad[g], d, a_bad);
        hn::Store(rare[g], d, a_rare);
        for (std::size_t l = 0; l < N; ++l) {
          if (a_rare[l] == 0) continue;
          if (!RoundLane(dp, pbits, rne, a_s[l], a_c[l], a_qb[l], a_v[l], a_ec[l])) {
            a_bad[l] = -1;
            a_v[l] = 0.0f;
          }
        }
        nv[g] = hn::Load(df, a_v);
        nec[g] = hn::Load(d, a_ec);
        bad[g] = hn::Load(d, a_bad);
      }
    }
    for (std::size_t g = 0; g < G; ++g) {
      // Lanes already handed to the general engine keep a zero state.
      cv[g] = hn::IfThenZeroElse(hn::RebindMask(df, hn::Ne(bad[g], zero)), nv[g]);
      ec[g] = nec[g];  // read only where cv != 0
    }
    if (s1 >= k) break;
  }
  for (std::size_t g = 0; g < G; ++g) {
    HWY_ALIGN float a_v[N];
    HWY_ALIGN std::int32_t a_bad[N];
    hn::Store(cv[g], df, a_v);
    hn::Store(bad[g], d, a_bad);
    const std::size_t r = g / NV;
    for (std::size_t l = 0; l < N; ++l) {
      const std::size_t col = (g % NV) * N + l;
      A.ok[r][col] = a_bad[l] == 0;
      A.out[r][col] = A.ok[r][col] ? encode_state(f, pbits, StateOf(f, pbits, a_v[l])) : 0;
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
// scale is never clamped. Each truncated product is below 2^(F+2) and c aligned below 2^(F+1), so
// a block's sum stays an exact float integer (below 2^24) when (2·block + 1)·2^(F+1) <= 2^24. Every
// accumulator value is a float (at most 23 fraction bits, exponents within float's, normal from
// float's normal range on), so the kernel keeps it as one and rounds it on the float's bits.
bool rows_trunc_applies(const Datapath& dp, int F, std::size_t block) {
  const format::Format& a = dp.a;
  const format::Format& b = dp.b;
  const format::Format& acc = dp.accumulator;
  const auto fits8 = [](const format::Format& f) { return f.emin >= -kExp8Max && f.emax <= kExp8Max; };
  if (!fits8(a) || !fits8(b) || F < 0 || F > 22) return false;
  const int lsb = (a.emin - a.mantissa_bits) + (b.emin - b.mantissa_bits);
  const int top = (a.emax + 1) + (b.emax + 1);
  const bool acc_is_float = acc.mantissa_bits <= 23 && dp.accumulator_fraction_bits <= acc.mantissa_bits &&
                            acc.emax <= 127 && acc.emin >= -126 && acc.emin - acc.mantissa_bits >= -149;
  return a.mantissa_bits + b.mantissa_bits + 2 <= 24 && lsb >= -149 && top <= 126 &&
         a.emin + b.emin - F >= -126 && (2 * block + 1) << (F + 1) <= (std::size_t{1} << 24) && acc_is_float;
}

HWY_EXPORT(RowsTruncTile);
HWY_EXPORT(RowsTruncOne);

void rows_trunc(RowsArgs<kRowTile>& args) { HWY_DYNAMIC_DISPATCH(RowsTruncTile)(args); }

void rows_trunc(RowsArgs<1>& args) { HWY_DYNAMIC_DISPATCH(RowsTruncOne)(args); }

}  // namespace lpemu::datapath::detail
#endif  // HWY_ONCE
