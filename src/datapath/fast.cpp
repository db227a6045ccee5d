// Fast GEMM kernels. Same algorithm as the block engine (tensor-cores.md §1), specialised for
// exact products of narrow inputs, truncating alignment with c fused, sequential chaining,
// deterministic rounding; and for `exact` alignment over all of K (ideal). Operands are
// re-packed once per matrix into signed significands and exponents; block sums are int64.
#include "datapath/fast.hpp"

// The vector helpers below are internal and always inlined; no function with a vector in its
// signature leaves this file, so GCC's -Wpsabi note about the AVX calling convention does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>
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

// The running accumulator between blocks, kept decoded: ±r·2^q (zero when r == 0).
struct AccState {
  std::uint64_t r = 0;
  int q = 0;
  bool neg = false;
};

// Rounds ±|s|·2^q (RZ or RNE at p fraction bits, subnormal quantum
// 2^(emin − p)), leaving the result decoded; false where the general engine must decide.
[[gnu::always_inline]] inline bool round_state(const format::Format& f, int p, bool rne, std::int64_t s, int q,
                                               AccState& st) {
  const bool neg = s < 0;
  const std::uint64_t mag = neg ? static_cast<std::uint64_t>(-s) : static_cast<std::uint64_t>(s);
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
    if (rne) {
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
  if (r < (std::uint64_t{1} << p) && !f.subnormals) return false;
  if (r >= (std::uint64_t{1} << p)) {
    // Overflow: the largest finite has exponent emax and the format's top mantissa pattern.
    const int ev = qo + p;
    if (ev > f.emax) return false;
    const std::uint64_t code = (static_cast<std::uint64_t>(ev + f.bias) << f.mantissa_bits) |
                               ((r - (std::uint64_t{1} << p)) << (f.mantissa_bits - p));
    if (code > f.max_code) return false;
  }
  st.r = r;
  st.q = qo;
  st.neg = neg;
  return true;
}

std::uint64_t encode_state(const format::Format& f, int p, const AccState& st) {
  if (st.r == 0) return 0;
  const std::uint64_t sign = st.neg ? f.sign_bit() : 0;
  const std::uint64_t hidden = std::uint64_t{1} << p;
  const int shift = f.mantissa_bits - p;
  if (st.r < hidden) return sign | (st.r << shift);
  return sign | (static_cast<std::uint64_t>(st.q + p + f.bias) << f.mantissa_bits) | ((st.r - hidden) << shift);
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
// (special values, an all-zero block with zero c, or a rounding round_state defers).
__attribute__((target_clones("avx2", "default"))) bool element_trunc(
    const TruncParams& P, const std::int32_t* am, const std::int32_t* ae, const std::int32_t* bm,
    const std::int32_t* be, std::size_t k, std::uint64_t c, std::uint64_t& out) {
  const Datapath& dp = *P.dp;
  const format::Format& f = dp.accumulator;
  const int pbits = dp.accumulator_fraction_bits;
  const bool rne = dp.accumulator_rounding.mode == format::RoundingMode::nearest_even;
  const Operand c0 = decode_acc(f, c, dp.addend_emin);
  if (c0.kind == Kind::nan || c0.kind == Kind::inf) return false;
  AccState st;
  bool c_zero = c0.kind == Kind::zero;
  if (!c_zero) {
    st.r = c0.mag;
    st.q = c0.lsb;
    st.neg = c0.neg;
  }
  for (std::size_t s0 = 0; s0 < k || s0 == 0; s0 += P.block) {
    const std::size_t s1 = std::min(k, s0 + P.block);
    // §1.4: E = max(e_i, e_c, E_floor); zero operands carry a hugely negative exponent.
    int e_max = P.floor;
    for (std::size_t p = s0; p < s1; ++p) e_max = std::max(e_max, ae[p] + be[p]);
    int e_c = 0;
    if (!c_zero) {
      // §1.3: e_c = max(floor(log2|c|), addend_emin).
      e_c = std::max(st.q + static_cast<int>(std::bit_width(st.r)) - 1, dp.addend_emin);
      e_max = std::max(e_max, e_c);
    }
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
    if (!c_zero) {
      const int sh = q - st.q;
      const auto mag = static_cast<std::int64_t>(st.r);
      const std::int64_t t = sh <= 0 ? (mag << -sh) : (sh >= 63 ? 0 : mag >> sh);
      sum += st.neg ? -t : t;
    } else if (!any) {
      return false;  // the sign of an all-zero block depends on the zeros' signs
    }
    if (sum == 0) {
      st = AccState{};  // exact cancellation or everything truncated away: +0, as the block engine
      c_zero = true;
    } else if (!round_state(f, pbits, rne, sum, q, st)) {
      return false;
    } else {
      c_zero = false;
    }
    if (s1 >= k) break;
  }
  out = encode_state(f, pbits, st);
  return true;
}

constexpr std::size_t kLanes = 8;
typedef std::int32_t V8 __attribute__((vector_size(32)));

[[gnu::always_inline]] inline V8 splat(std::int32_t x) { return V8{} + x; }

[[gnu::always_inline]] inline V8 load8(const std::int32_t* p) {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Eight output columns j0..j0+7 of row i at once (lanes = columns, so every max and sum is
// vertical: no horizontal reductions). B is packed [k][n]. Same arithmetic as element_trunc's
// int32 path; a lane that needs the general engine gets ok[l] = false.
__attribute__((target_clones("avx2", "default"))) void row_trunc8(
    const TruncParams& P, const std::int32_t* am, const std::int32_t* ae, const std::int32_t* bmk,
    const std::int32_t* bek, std::size_t n, std::size_t k, const std::uint64_t* c, std::uint64_t* out, bool* ok) {
  const Datapath& dp = *P.dp;
  const format::Format& f = dp.accumulator;
  const int pbits = dp.accumulator_fraction_bits;
  const bool rne = dp.accumulator_rounding.mode == format::RoundingMode::nearest_even;
  AccState st[kLanes];
  bool c_zero[kLanes];
  for (std::size_t l = 0; l < kLanes; ++l) {
    ok[l] = true;
    const Operand c0 = decode_acc(f, c[l], dp.addend_emin);
    c_zero[l] = c0.kind != Kind::finite;
    if (c0.kind == Kind::nan || c0.kind == Kind::inf) ok[l] = false;
    if (c0.kind == Kind::finite) st[l] = AccState{c0.mag, c0.lsb, c0.neg};
  }
  for (std::size_t s0 = 0; s0 < k || s0 == 0; s0 += P.block) {
    const std::size_t s1 = std::min(k, s0 + P.block);
    // GCC vector extension: one 8 × int32 value per lane set (AVX2 ymm, or two SSE registers).
    V8 vmax = splat(P.floor);
    for (std::size_t p = s0; p < s1; ++p) {
      const V8 e = splat(ae[p]) + load8(bek + p * n);
      vmax = vmax > e ? vmax : e;
    }
    std::int32_t emax[kLanes];
    for (std::size_t l = 0; l < kLanes; ++l) {
      emax[l] = vmax[l];
      if (!c_zero[l]) {
        // §1.3: e_c = max(floor(log2|c|), addend_emin).
        const int e_c = std::max(st[l].q + static_cast<int>(std::bit_width(st[l].r)) - 1, dp.addend_emin);
        emax[l] = std::max(emax[l], e_c);
      }
    }
    const V8 shift0 = load8(emax) + P.base_shift32;
    V8 vsum = splat(0);
    V8 vnz = splat(0);
    const V8 lift = splat(P.lift32);
    const V8 cap = splat(31);
    for (std::size_t p = s0; p < s1; ++p) {
      const V8 be = load8(bek + p * n);
      const V8 prod = splat(am[p]) * load8(bmk + p * n);
      const V8 sgn = prod >> 31;
      const V8 mag = (prod ^ sgn) - sgn;
      V8 sh = shift0 - (splat(ae[p]) + be);
      sh = sh < cap ? sh : cap;
      const V8 t = (mag << lift) >> sh;
      vsum += (t ^ sgn) - sgn;
      vnz |= prod;
    }
    std::int32_t s32[kLanes];
    std::int32_t nz[kLanes];
    for (std::size_t l = 0; l < kLanes; ++l) s32[l] = vsum[l], nz[l] = vnz[l];
    for (std::size_t l = 0; l < kLanes; ++l) {
      if (!ok[l]) continue;
      const int q = emax[l] - P.F;
      std::int64_t sum = s32[l];
      if (!c_zero[l]) {
        const int sh = q - st[l].q;
        const auto mag = static_cast<std::int64_t>(st[l].r);
        const std::int64_t t = sh <= 0 ? (mag << -sh) : (sh >= 63 ? 0 : mag >> sh);
        sum += st[l].neg ? -t : t;
      } else if (nz[l] == 0) {
        ok[l] = false;  // the sign of an all-zero block depends on the zeros' signs
        continue;
      }
      if (sum == 0) {
        st[l] = AccState{};
        c_zero[l] = true;
      } else if (!round_state(f, pbits, rne, sum, q, st[l])) {
        ok[l] = false;
      } else {
        c_zero[l] = false;
      }
    }
    if (s1 >= k) break;
  }
  for (std::size_t l = 0; l < kLanes; ++l) out[l] = ok[l] ? encode_state(f, pbits, st[l]) : 0;
}

// ideal: Σ of exact products at the smallest possible product lsb (int64); `nz` = 0 when every
// product is zero (the caller then lets the general engine pick the sign of zero).
__attribute__((target_clones("avx2", "default"))) std::int64_t element_exact(
    const std::int32_t* am, const std::int32_t* al, const std::int32_t* bm, const std::int32_t* bl, std::size_t k,
    int lmin, std::int64_t& nz) {
  std::int64_t s = 0;
  std::int64_t any = 0;
  for (std::size_t p = 0; p < k; ++p) {
    const std::int64_t prod = static_cast<std::int64_t>(am[p]) * bm[p];
    s += prod << (al[p] + bl[p] - lmin);
    any |= prod;
  }
  nz = any;
  return s;
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
  // ideal in int64: products span at most `span` bits above lmin, K of them need bit_width(K) more.
  const int span = (dp.a.emax - dp.a.emin + dp.a.mantissa_bits + 1) + (dp.b.emax - dp.b.emin + dp.b.mantissa_bits + 1) + 2;
  if (exact && span + static_cast<int>(std::bit_width(k)) > 62) {
    tbb::parallel_for(std::size_t{0}, m * n, [&](std::size_t e) {
      const std::size_t i = e / n, j = e % n;
      d[e] = dot_decoded(dp, a.subspan(i * k, k), b.subspan(j * k, k), c.empty() ? 0 : c[e], {}, {}, e);
    });
    return;
  }
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
  // B also packed in panels of eight columns, [n/8][k][8], for the eight-column kernel.
  std::vector<std::int32_t> bmk, bek;
  const std::size_t panels = n / kLanes;
  if (use32 && !exact) {
    bmk.resize(panels * k * kLanes);
    bek.resize(panels * k * kLanes);
    for (std::size_t j = 0; j < panels * kLanes; ++j) {
      for (std::size_t p = 0; p < k; ++p) {
        const std::size_t at = ((j / kLanes) * k + p) * kLanes + j % kLanes;
        bmk[at] = pb.m[j * k + p];
        bek[at] = pb.e[j * k + p];
      }
    }
  }
  auto general = [&](std::size_t i, std::size_t j) {
    const std::uint64_t cc = c.empty() ? 0 : c[i * n + j];
    return dot_decoded(dp, a.subspan(i * k, k), b.subspan(j * k, k), cc, {}, {}, i * n + j);
  };
  tbb::parallel_for(tbb::blocked_range2d<std::size_t>(0, m, 16, 0, n, 64), [&](const auto& r) {
    for (std::size_t i = r.rows().begin(); i != r.rows().end(); ++i) {
      const std::int32_t* am = pa.m.data() + i * k;
      const std::int32_t* ae = pa.e.data() + i * k;
      const std::int32_t* al = pa.l.data() + i * k;
      std::size_t j = r.cols().begin();
      if (use32 && !exact && pa.special[i] == 0 && j % kLanes == 0) {
        for (; j + kLanes <= r.cols().end(); j += kLanes) {
          std::uint64_t cc[kLanes] = {};
          std::uint64_t out[kLanes];
          bool ok[kLanes];
          if (!c.empty()) std::copy(c.begin() + static_cast<long>(i * n + j), c.begin() + static_cast<long>(i * n + j + kLanes), cc);
          row_trunc8(tp, am, ae, bmk.data() + j * k, bek.data() + j * k, kLanes, k, cc, out, ok);
          for (std::size_t l = 0; l < kLanes; ++l) {
            d[i * n + j + l] = (ok[l] && pb.special[j + l] == 0) ? out[l] : general(i, j + l);
          }
        }
      }
      for (; j != r.cols().end(); ++j) {
        const std::uint64_t cc = c.empty() ? 0 : c[i * n + j];
        if (pa.special[i] != 0 || pb.special[j] != 0) {
          d[i * n + j] = general(i, j);
          continue;
        }
        const std::int32_t* bm = pb.m.data() + j * k;
        const std::int32_t* be = pb.e.data() + j * k;
        const std::int32_t* bl = pb.l.data() + j * k;
        if (exact) {
          std::int64_t nz = 0;
          const std::int64_t s = element_exact(am, al, bm, bl, k, lmin, nz);
          const Kind ck = decode_acc(dp.accumulator, cc, dp.addend_emin).kind;
          const bool plain = nz != 0 && ck != Kind::nan && ck != Kind::inf;
          d[i * n + j] = plain ? finish_block(dp, s, lmin, false, cc, true) : general(i, j);
          continue;
        }
        std::uint64_t out = 0;
        d[i * n + j] = element_trunc(tp, am, ae, bm, be, k, cc, out) ? out : general(i, j);
      }
    }
  });
}

}  // namespace lpemu::datapath::detail
