// Fast GEMM kernels. Same algorithm as the block engine (tensor-cores.md §1), specialised for
// exact products of narrow inputs, truncating alignment with c fused, sequential chaining,
// deterministic rounding; and for `exact` alignment over all of K (ideal). Operands are
// re-packed once per matrix into signed significands and exponents; block sums are int64.
#include "datapath/fast.hpp"

#include <algorithm>
#include <bit>
#include <climits>
#include <vector>

#include <tbb/blocked_range2d.h>
#include <tbb/parallel_for.h>

namespace lpemu::datapath::detail {
namespace {

constexpr int kZeroExp = -(1 << 20);
constexpr int kLift = 30;  // products < 2^22 lifted by 2^30 stay below 2^52

struct Packed {
  std::vector<std::int32_t> m;  // signed significand (0 for zero)
  std::vector<std::int32_t> e;  // alignment exponent (kZeroExp for zero)
  std::vector<std::int32_t> l;  // lsb exponent
  std::vector<char> special;    // per row: holds NaN or Inf
};

Packed pack(std::span<const Operand> x, std::size_t rows, std::size_t k) {
  Packed p;
  p.m.resize(rows * k);
  p.e.resize(rows * k);
  p.l.resize(rows * k);
  p.special.assign(rows, 0);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t i = 0; i < k; ++i) {
      const Operand& o = x[r * k + i];
      const std::size_t j = r * k + i;
      if (o.kind == Kind::finite) {
        p.m[j] = o.neg ? -static_cast<std::int32_t>(o.mag) : static_cast<std::int32_t>(o.mag);
        p.e[j] = o.e;
        p.l[j] = o.lsb;
      } else {
        p.m[j] = 0;
        p.e[j] = kZeroExp;
        p.l[j] = 0;
        if (o.kind != Kind::zero) p.special[r] = 1;
      }
    }
  }
  return p;
}

// Decodes an IEEE-style accumulator code from its fields (tensor-cores.md §1.3 exponent clamp).
[[gnu::always_inline]] inline Operand decode_acc(const format::Format& f, std::uint64_t code, int clamp) {
  Operand o;
  const int mb = f.mantissa_bits;
  const std::uint64_t emask = (std::uint64_t{1} << f.exponent_bits) - 1;
  const std::uint64_t field = (code >> mb) & emask;
  const std::uint64_t mant = code & ((std::uint64_t{1} << mb) - 1);
  o.neg = (code & f.sign_bit()) != 0;
  if (field == emask) {
    o.kind = mant == 0 ? Kind::inf : Kind::nan;
    return o;
  }
  if (field == 0) {
    if (mant == 0) return o;  // zero
    o.kind = Kind::finite;
    o.mag = mant;
    o.lsb = f.emin - mb;
    o.e = std::max(o.lsb + static_cast<int>(std::bit_width(mant)) - 1, clamp);
    return o;
  }
  o.kind = Kind::finite;
  o.mag = mant | (std::uint64_t{1} << mb);
  o.lsb = static_cast<int>(field) - f.bias - mb;
  o.e = std::max(static_cast<int>(field) - f.bias, clamp);
  return o;
}

// Rounds ±|s|·2^q into an IEEE-style accumulator with RZ or RNE at p fraction bits
// (tensor-cores.md §1.7), or returns false to defer to the general engine.
[[gnu::always_inline]] inline bool finish_fast(const Datapath& dp, std::int64_t s, int q, std::uint64_t& out) {
  const format::Format& f = dp.accumulator;
  const format::RoundingMode mode = dp.accumulator_rounding.mode;
  if (s == 0 || dp.flush_subnormal_outputs ||
      (mode != format::RoundingMode::toward_zero && mode != format::RoundingMode::nearest_even)) {
    return false;
  }
  const bool neg = s < 0;
  const std::uint64_t mag = neg ? static_cast<std::uint64_t>(-s) : static_cast<std::uint64_t>(s);
  const int p = dp.accumulator_fraction_bits;
  const int e = q + static_cast<int>(std::bit_width(mag)) - 1;
  int qo = std::max(e, f.emin) - p;
  const int sh = qo - q;
  std::uint64_t r = 0;
  if (sh <= 0) {
    r = mag << (-sh);
  } else if (sh >= 64) {
    return false;
  } else {
    r = mag >> sh;
    if (mode == format::RoundingMode::nearest_even) {
      const std::uint64_t rem = mag & ((std::uint64_t{1} << sh) - 1);
      const std::uint64_t half = std::uint64_t{1} << (sh - 1);
      if (rem > half || (rem == half && (r & 1) != 0)) ++r;
    }
  }
  if (r >> (p + 1) != 0) {
    r >>= 1;
    ++qo;
  }
  if (r == 0) return false;
  const std::uint64_t hidden = std::uint64_t{1} << p;
  const int shift = f.mantissa_bits - p;
  const std::uint64_t sign = neg ? f.sign_bit() : 0;
  if (r < hidden) {
    if (!f.subnormals) return false;
    out = sign | (r << shift);
    return true;
  }
  const int ev = qo + p;
  if (ev > f.emax) return false;
  out = sign | (static_cast<std::uint64_t>(ev + f.bias) << f.mantissa_bits) | ((r - hidden) << shift);
  return true;
}

struct TruncParams {
  const Datapath* dp;
  std::size_t block;
  int F;
  int floor;
  int base_shift;
  int base_shift32;
  int lift32;
  bool use32;
};

// One output element of a truncating BFMA datapath (tensor-cores.md §1, steps 1–8), all inlined
// so each clone vectorises its inner loops. Returns false where the general engine must decide
// (special values, an all-zero block with zero c, or a rounding finish_fast defers).
__attribute__((target_clones("avx2", "default"))) bool element_trunc(
    const TruncParams& P, const std::int32_t* am, const std::int32_t* ae, const std::int32_t* bm,
    const std::int32_t* be, std::size_t k, std::uint64_t c, std::uint64_t& out) {
  const Datapath& dp = *P.dp;
  std::uint64_t acc = c;
  for (std::size_t s0 = 0; s0 < k || s0 == 0; s0 += P.block) {
    const std::size_t s1 = std::min(k, s0 + P.block);
    // §1.4: E = max(e_i, e_c, E_floor); zero operands carry a hugely negative exponent.
    int e_max = P.floor;
    for (std::size_t p = s0; p < s1; ++p) e_max = std::max(e_max, ae[p] + be[p]);
    const Operand co = decode_acc(dp.accumulator, acc, dp.addend_emin);
    if (co.kind == Kind::nan || co.kind == Kind::inf) return false;
    if (co.kind == Kind::finite) e_max = std::max(e_max, co.e);
    const int q = e_max - P.F;
    // §1.5: each product truncated toward zero at 2^q (a lift, then one clamped right shift);
    // §1.6: exact integer sum.
    std::int64_t sum = 0;
    bool any = false;
    if (P.use32) {
      std::int32_t s32 = 0;
      std::int32_t nz = 0;
      const std::int32_t shift0 = e_max + P.base_shift32;
      for (std::size_t p = s0; p < s1; ++p) {
        const std::int32_t prod = am[p] * bm[p];
        const std::int32_t sgn = prod >> 31;
        const std::int32_t mag = (prod ^ sgn) - sgn;
        const std::int32_t sh = std::min(shift0 - (ae[p] + be[p]), 31);
        const std::int32_t t = (mag << P.lift32) >> sh;
        s32 += (t ^ sgn) - sgn;
        nz |= prod;
      }
      sum = s32;
      any = nz != 0;
    } else {
      std::int64_t nz = 0;
      const std::int64_t shift0 = e_max + P.base_shift;
      for (std::size_t p = s0; p < s1; ++p) {
        const std::int64_t prod = static_cast<std::int64_t>(am[p]) * bm[p];
        const std::int64_t sgn = prod >> 63;
        const std::int64_t mag = (prod ^ sgn) - sgn;
        const std::int64_t sh = std::min<std::int64_t>(shift0 - (ae[p] + be[p]), 63);
        const std::int64_t t = (mag << kLift) >> sh;
        sum += (t ^ sgn) - sgn;
        nz |= prod;
      }
      any = nz != 0;
    }
    if (co.kind == Kind::finite) {
      const int sh = q - co.lsb;
      const auto mag = static_cast<std::int64_t>(co.mag);
      const std::int64_t t = sh <= 0 ? (mag << -sh) : (sh >= 63 ? 0 : mag >> sh);
      sum += co.neg ? -t : t;
    } else if (!any) {
      return false;  // the sign of an all-zero block depends on the zeros' signs
    }
    if (sum == 0) {
      acc = 0;  // exact cancellation or everything truncated away: +0, as the block engine
    } else if (!finish_fast(dp, sum, q, acc)) {
      return false;
    }
    if (s1 >= k) break;
  }
  out = acc;
  return true;
}

bool narrow(const format::Format& f) { return f.kind == format::Kind::floating && f.mantissa_bits <= 10; }

}  // namespace

bool fast_gemm_applicable(const Datapath& dp, bool no_scales) {
  if (!no_scales || dp.scale_application != ScaleApplication::none || dp.product_format || dp.promote_every > 0 ||
      dp.order != Order::sequential || dp.addend != Addend::fused || dp.flush_subnormal_inputs ||
      dp.accumulator_rounding.mode == format::RoundingMode::stochastic ||
      dp.accumulator.kind != format::Kind::floating || dp.accumulator.specials != format::Specials::ieee || !narrow(dp.a) || !narrow(dp.b)) {
    return false;
  }
  if (dp.alignment == Alignment::truncate) {
    // Left shifts of products are at most F − m_a − m_b, which kLift must cover.
    return !dp.sticky && dp.fused_terms >= 1 && dp.fused_terms <= 64 && dp.fraction_bits <= 36 &&
           dp.fraction_bits - dp.a.mantissa_bits - dp.b.mantissa_bits <= kLift;
  }
  if (dp.alignment == Alignment::exact) {
    // int64 fixed point at the smallest product lsb: products span at most this many bits.
    const int span = (dp.a.emax - dp.a.emin + dp.a.mantissa_bits + 1) + (dp.b.emax - dp.b.emin + dp.b.mantissa_bits + 1) + 2;
    return dp.fused_terms == 0 && span <= 40;
  }
  return false;
}

void fast_gemm(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k, std::span<const Operand> a,
               std::span<const Operand> b, std::span<const std::uint64_t> c, std::span<std::uint64_t> d) {
  const Packed pa = pack(a, m, k);
  const Packed pb = pack(b, n, k);
  const bool exact = dp.alignment == Alignment::exact;
  const int lmin = (dp.a.emin - dp.a.mantissa_bits) + (dp.b.emin - dp.b.mantissa_bits);
  const std::size_t bs = exact ? std::max<std::size_t>(k, 1) : static_cast<std::size_t>(dp.fused_terms);
  const int F = dp.fraction_bits;
  const int floor = dp.exponent_floor ? *dp.exponent_floor : INT_MIN / 2;
  const int mbsum = dp.a.mantissa_bits + dp.b.mantissa_bits;
  // int32 kernel: products have at most mbsum + 2 bits; lift them to 30 bits; the largest left
  // shift F − mbsum must fit in the lift, and 64 terms of < 2^(F+2) must fit in int32.
  const int lift32 = 30 - (mbsum + 2);
  const bool use32 = dp.alignment == Alignment::truncate && F - mbsum <= lift32 && F + 2 + 7 <= 31 &&
                     dp.fused_terms <= 64;
  const int base_shift32 = mbsum - F + lift32;
  const TruncParams tp{&dp, bs, F, floor, mbsum - F + kLift, base_shift32, lift32, use32};
  tbb::parallel_for(tbb::blocked_range2d<std::size_t>(0, m, 16, 0, n, 16), [&](const auto& r) {
    std::vector<std::uint64_t> row_codes;
    for (std::size_t i = r.rows().begin(); i != r.rows().end(); ++i) {
      const std::int32_t* am = pa.m.data() + i * k;
      const std::int32_t* ae = pa.e.data() + i * k;
      const std::int32_t* al = pa.l.data() + i * k;
      for (std::size_t j = r.cols().begin(); j != r.cols().end(); ++j) {
        const std::uint64_t cc = c.empty() ? 0 : c[i * n + j];
        if (pa.special[i] != 0 || pb.special[j] != 0) {
          d[i * n + j] = dot_decoded(dp, a.subspan(i * k, k), b.subspan(j * k, k), cc, {}, {}, i * n + j);
          continue;
        }
        const std::int32_t* bm = pb.m.data() + j * k;
        const std::int32_t* be = pb.e.data() + j * k;
        const std::int32_t* bl = pb.l.data() + j * k;
        if (exact) {
          // ideal: Σ exactly at the smallest possible product lsb, then one rounding with c.
          std::int64_t s = 0;
          bool all_zero_neg = true;
          for (std::size_t p = 0; p < k; ++p) {
            const std::int64_t prod = static_cast<std::int64_t>(am[p]) * bm[p];
            s += prod * (std::int64_t{1} << (al[p] + bl[p] - lmin));
            if (prod != 0) all_zero_neg = false;
            else all_zero_neg = all_zero_neg && (a[i * k + p].neg != b[j * k + p].neg);
          }
          d[i * n + j] = finish_block(dp, s, lmin, all_zero_neg, cc, true);
          continue;
        }
        std::uint64_t out = 0;
        if (element_trunc(tp, am, ae, bm, be, k, cc, out)) {
          d[i * n + j] = out;
        } else {
          d[i * n + j] = dot_decoded(dp, a.subspan(i * k, k), b.subspan(j * k, k), cc, {}, {}, i * n + j);
        }
      }
    }
  });
}

}  // namespace lpemu::datapath::detail
