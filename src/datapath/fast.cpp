// Fast GEMM kernels. Same algorithm as the block engine (tensor-cores.md §1), specialised for
// exact products of narrow inputs, truncating alignment with c fused, sequential chaining,
// deterministic rounding; and for `exact` alignment over all of K (ideal). Operands are packed
// straight from the caller's codes into signed significands and exponents (B in panels of eight
// columns for the vector kernel rows_trunc, whose block sums are int32; elsewhere int64).
#include "datapath/fast.hpp"

// The vector helpers below are internal and always inlined; no function with a vector in its
// signature leaves this file, so GCC's -Wpsabi note about the AVX calling convention does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

// The AVX2 kernels exist on x86 only; elsewhere (aarch64) the generic vector code is the kernel.
#if defined(__x86_64__) || defined(__i386__)
#define LPEMU_X86 1
#include <immintrin.h>
#define LPEMU_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LPEMU_X86 0
#define LPEMU_AVX2_CLONES
#endif

#include <tbb/blocked_range2d.h>
#include <tbb/parallel_for.h>

namespace lpemu::datapath::detail {
namespace {

constexpr int kZeroExp = -(1 << 20);
constexpr int kLift = 30;  // products < 2^22 lifted by 2^30 stay below 2^52

// Arrays are left uninitialised (make_unique_for_overwrite): every element is written once.
template <typename T>
using Buffer = std::unique_ptr<T[]>;

struct Packed {
  Buffer<std::int32_t> m;     // signed significand (0 for zero)
  Buffer<std::int32_t> e;     // alignment exponent (kZeroExp for zero)
  Buffer<std::int32_t> l;     // lsb exponent
  std::vector<char> special;  // per row: holds NaN or Inf
};

// One operand reduced to what the kernels read.
struct Lane {
  std::int32_t m = 0;         // signed significand (0 for zero, NaN and Inf)
  std::int32_t e = kZeroExp;  // alignment exponent (kZeroExp for zero, NaN and Inf)
  std::int32_t l = 0;         // lsb exponent
  bool special = false;       // NaN or Inf
};

Lane lane_of(const Operand& o) {
  Lane x;
  if (o.kind == Kind::finite) {
    x.m = o.neg ? -static_cast<std::int32_t>(o.mag) : static_cast<std::int32_t>(o.mag);
    x.e = o.e;
    x.l = o.lsb;
  }
  x.special = o.kind == Kind::nan || o.kind == Kind::inf;
  return x;
}

// Decodes and checks codes of one operand format (tables for codes of up to 8 bits), so the
// fast path packs straight from the caller's codes: no matrix of Operands.
class Decoder {
 public:
  Decoder(const format::Format& f, bool flush, const char* what)
      : f_(f), flush_(flush), what_(what), wide_(~f.code_mask()) {
    if (f.bits <= 8) {
      table_.resize(std::size_t{1} << f.bits);
      lanes_.resize(table_.size());
      for (std::uint64_t code = 0; code < table_.size(); ++code) {
        table_[code] = decode_operand(f, code, flush);
        lanes_[code] = lane_of(table_[code]);
      }
    }
  }

  /// The operand of `code`; throws ShapeError naming `what` and `index` for a code wider than the format.
  Operand operator()(std::uint64_t code, std::size_t index) const {
    check(code, index);
    return table_.empty() ? decode_operand(f_, code, flush_) : table_[code];
  }

  /// lane_of the operand of `code`, checked as operator() does.
  Lane lane(std::uint64_t code, std::size_t index) const {
    check(code, index);
    return lanes_.empty() ? lane_of(decode_operand(f_, code, flush_)) : lanes_[code];
  }

 private:
  void check(std::uint64_t code, std::size_t index) const {
    if ((code & wide_) != 0) require_operand_fits(f_, code, what_, index);
  }

  const format::Format& f_;
  bool flush_;
  const char* what_;
  std::uint64_t wide_;
  std::vector<Operand> table_;
  std::vector<Lane> lanes_;
};

// Stores `x` at `j` of p's arrays; true if it is NaN or Inf.
[[gnu::always_inline]] inline bool put(Packed& p, std::size_t j, const Lane& x) {
  p.m[j] = x.m;
  p.e[j] = x.e;
  p.l[j] = x.l;
  return x.special;
}

Packed make_packed(std::size_t rows, std::size_t k) {
  Packed p;
  p.m = std::make_unique_for_overwrite<std::int32_t[]>(rows * k);
  p.e = std::make_unique_for_overwrite<std::int32_t[]>(rows * k);
  p.l = std::make_unique_for_overwrite<std::int32_t[]>(rows * k);
  p.special.assign(rows, 0);
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
[[gnu::always_inline]] inline bool round_state(const format::Format& f, int p, bool rne, std::int64_t s,
                                               int q, AccState& st) {
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
  return sign | (static_cast<std::uint64_t>(st.q + p + f.bias) << f.mantissa_bits) |
         ((st.r - hidden) << shift);
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
  int emax_common;  // largest exponent whose every normal significand is finite (rows_trunc)
};

// One output element of a truncating BFMA datapath (tensor-cores.md §1, steps 1–8), all inlined
// so each clone vectorises its inner loops. Returns false where the general engine must decide
// (special values, an all-zero block with zero c, or a rounding round_state defers).
LPEMU_AVX2_CLONES bool element_trunc(const TruncParams& P, const std::int32_t* am, const std::int32_t* ae,
                                     const std::int32_t* bm, const std::int32_t* be, std::size_t k,
                                     std::uint64_t c, std::uint64_t& out) {
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
// GCC vector extension: one 8 × int32 value per lane set (AVX2 ymm, or two SSE registers).
typedef std::int32_t V8 __attribute__((vector_size(32)));
typedef std::uint32_t U8 __attribute__((vector_size(32)));
typedef float F8 __attribute__((vector_size(32)));

[[gnu::always_inline]] inline V8 splat(std::int32_t x) { return V8{} + x; }

[[gnu::always_inline]] inline V8 load8(const std::int32_t* p) {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

[[gnu::always_inline]] inline void store8(std::int32_t* p, const V8& v) { std::memcpy(p, &v, sizeof v); }

[[gnu::always_inline]] inline V8 vmax(const V8& a, const V8& b) { return a > b ? a : b; }

// Lane operations the kernel needs beyond plain GCC vector arithmetic. Shifts take per-lane
// counts and give 0 for counts outside 0..31 (negative ones included); sign(t, x) is −t where
// x < 0 and t elsewhere, for t that is 0 wherever x is 0.
struct GenericOps {
  [[gnu::always_inline]] static V8 splat_from(const std::int32_t* p) { return splat(*p); }
  [[gnu::always_inline]] static V8 abs(const V8& x) { return x < 0 ? -x : x; }
  [[gnu::always_inline]] static V8 srl(const V8& x, const V8& s) {
    const U8 us = reinterpret_cast<U8>(s);
    return us < 32u ? reinterpret_cast<V8>(reinterpret_cast<U8>(x) >> (us & 31u)) : V8{};
  }
  [[gnu::always_inline]] static V8 sll(const V8& x, const V8& s) {
    const U8 us = reinterpret_cast<U8>(s);
    return us < 32u ? reinterpret_cast<V8>(reinterpret_cast<U8>(x) << (us & 31u)) : V8{};
  }
  [[gnu::always_inline]] static V8 sign(const V8& t, const V8& x) { return x < 0 ? -t : t; }
  [[gnu::always_inline]] static bool any(const V8& m) {
    std::int32_t a[kLanes];
    store8(a, m);
    std::int32_t x = 0;
    for (const std::int32_t v : a) x |= v;
    return x != 0;
  }
};

#if LPEMU_X86
// The same operations as single AVX2 instructions (vpsrlvd and vpsllvd already give 0 for
// counts of 32 and more). Not always_inline: the wrappers below inline them with `flatten`.
struct Avx2Ops {
  // vpbroadcastd from memory: a load, no shuffle (GCC's SLP pass turns plain splats of four
  // rows into inserts).
  __attribute__((target("avx2"))) static V8 splat_from(const std::int32_t* p) {
    return reinterpret_cast<V8>(_mm256_broadcastd_epi32(_mm_loadu_si32(p)));
  }
  __attribute__((target("avx2"))) static V8 abs(V8 x) {
    return reinterpret_cast<V8>(_mm256_abs_epi32(reinterpret_cast<__m256i>(x)));
  }
  __attribute__((target("avx2"))) static V8 srl(V8 x, V8 s) {
    return reinterpret_cast<V8>(
        _mm256_srlv_epi32(reinterpret_cast<__m256i>(x), reinterpret_cast<__m256i>(s)));
  }
  __attribute__((target("avx2"))) static V8 sll(V8 x, V8 s) {
    return reinterpret_cast<V8>(
        _mm256_sllv_epi32(reinterpret_cast<__m256i>(x), reinterpret_cast<__m256i>(s)));
  }
  __attribute__((target("avx2"))) static V8 sign(V8 t, V8 x) {
    return reinterpret_cast<V8>(
        _mm256_sign_epi32(reinterpret_cast<__m256i>(t), reinterpret_cast<__m256i>(x)));
  }
  __attribute__((target("avx2"))) static bool any(V8 m) {
    const auto v = reinterpret_cast<__m256i>(m);
    return _mm256_testz_si256(v, v) == 0;
  }
};
#endif

// bit_width of lanes in 0..2^31 − 1 (garbage for 0): the float exponent, less one where the
// conversion rounded up to the next power of two.
template <class Ops>
V8 bit_width8(const V8& x) {
  const V8 bits = reinterpret_cast<V8>(__builtin_convertvector(x, F8));
  V8 k = (bits >> 23) - 127;
  k += Ops::srl(x, k) == 0;  // the comparison gives −1 where true
  return k + 1;
}

// Below this, a block's largest exponent sum comes from products with a zero operand only
// (zeros carry kZeroExp; finite exponents are far smaller in magnitude).
constexpr std::int32_t kAllZeroBelow = kZeroExp / 2;

// Arguments of the R-row kernel: rows am[r], ae[r] of A; one panel of B, [k][8], its
// significands lifted by P.lift32; c, out and ok are [R][8]; ok is false where the general
// engine must decide.
template <std::size_t R>
struct RowsArgs {
  const TruncParams* P;
  const std::int32_t* am[R];
  const std::int32_t* ae[R];
  const std::int32_t* bmk;
  const std::int32_t* bek;
  std::size_t k;
  std::uint64_t c[R][kLanes];
  std::uint64_t out[R][kLanes];
  bool ok[R][kLanes];
};

// R rows × 8 output columns of a truncating datapath at once (lanes = columns, so every max and
// sum is vertical: no horizontal reductions; rows share the loads of B). Same arithmetic as
// element_trunc's int32 path. Between blocks the accumulator stays decoded per lane as a signed
// significand sr and its lsb exponent q (sr = 0: zero). The common case of each block's rounding
// (a normal result, no overflow) is vectorised; other lanes take round_state, as element_trunc.
template <class Ops, std::size_t R>
void rows_trunc(RowsArgs<R>& A) {
  const TruncParams& P = *A.P;
  const Datapath& dp = *P.dp;
  const format::Format& f = dp.accumulator;
  const int pbits = dp.accumulator_fraction_bits;
  const bool rne = dp.accumulator_rounding.mode == format::RoundingMode::nearest_even;
  const std::size_t k = A.k;
  V8 sr[R], q[R], bad[R];
  for (std::size_t r = 0; r < R; ++r) {
    std::int32_t s0[kLanes], q0[kLanes], b0[kLanes];
    for (std::size_t l = 0; l < kLanes; ++l) {
      const Operand c0 = decode_acc(f, A.c[r][l], dp.addend_emin);
      const auto mag = static_cast<std::int32_t>(c0.mag);
      s0[l] = c0.kind != Kind::finite ? 0 : (c0.neg ? -mag : mag);
      q0[l] = c0.kind != Kind::finite ? 0 : c0.lsb;
      b0[l] = c0.kind == Kind::nan || c0.kind == Kind::inf ? -1 : 0;
    }
    sr[r] = load8(s0);
    q[r] = load8(q0);
    bad[r] = load8(b0);
  }
  const V8 floor = splat(P.floor);
  const V8 addend_emin = splat(dp.addend_emin);
  const V8 emin = splat(f.emin);
  const V8 one = splat(1);
  const V8 hidden = splat(1 << pbits);
  const V8 rne_mask = splat(rne ? -1 : 0);
  for (std::size_t s0 = 0; s0 < k || s0 == 0; s0 += P.block) {
    const std::size_t s1 = std::min(k, s0 + P.block);
    // §1.4: E = max(e_i, e_c, E_floor); zero operands carry a hugely negative exponent.
    V8 raw[R];
    for (std::size_t r = 0; r < R; ++r) raw[r] = splat(2 * kZeroExp);
    for (std::size_t p = s0; p < s1; ++p) {
      const V8 be = load8(A.bek + p * kLanes);
      for (std::size_t r = 0; r < R; ++r) raw[r] = vmax(raw[r], Ops::splat_from(A.ae[r] + p) + be);
    }
    V8 emax[R], shift0[R], absr[R];
    for (std::size_t r = 0; r < R; ++r) {
      absr[r] = Ops::abs(sr[r]);
      // §1.3: e_c = max(floor(log2|c|), addend_emin).
      const V8 e_c = vmax(q[r] + bit_width8<Ops>(absr[r]) - 1, addend_emin);
      const V8 c_zero = sr[r] == 0;
      emax[r] = vmax(vmax(raw[r], floor), c_zero ? floor : e_c);
      bad[r] |=
          c_zero & (raw[r] < kAllZeroBelow);  // the sign of an all-zero block depends on the zeros' signs
      shift0[r] = emax[r] + P.base_shift32;
    }
    // §1.5: each product truncated toward zero at 2^q (B carries the lift, then one right shift
    // that gives 0 past 31); §1.6: exact integer sum.
    V8 sum[R];
    for (std::size_t r = 0; r < R; ++r) sum[r] = V8{};
    for (std::size_t p = s0; p < s1; ++p) {
      const V8 bm = load8(A.bmk + p * kLanes);
      const V8 be = load8(A.bek + p * kLanes);
      for (std::size_t r = 0; r < R; ++r) {
        const V8 prod = Ops::splat_from(A.am[r] + p) * bm;
        const V8 t = Ops::srl(Ops::abs(prod), shift0[r] - (Ops::splat_from(A.ae[r] + p) + be));
        sum[r] += Ops::sign(t, prod);
      }
    }
    for (std::size_t r = 0; r < R; ++r) {
      const V8 qb = emax[r] - P.F;
      // c aligned at 2^qb, truncated toward zero (< 2^(F+1), so the sum stays in int32).
      const V8 shc = qb - q[r];
      const V8 s = sum[r] + Ops::sign(Ops::sll(absr[r], -shc) | Ops::srl(absr[r], shc), sr[r]);
      // round_state's common case: RZ or RNE to p fraction bits of a normal result.
      const V8 mag = Ops::abs(s);
      V8 qo = vmax(qb + bit_width8<Ops>(mag) - 1, emin) - pbits;
      const V8 sh = qo - qb;
      const V8 rz = Ops::sll(mag, -sh) | Ops::srl(mag, sh);
      const V8 half = Ops::sll(one, sh - 1);
      const V8 rem = mag & Ops::srl(splat(-1), 32 - sh);  // the sh bits shifted out
      const V8 up = rne_mask & (sh > 0) & ((rem > half) | ((rem == half) & ((rz & 1) != 0)));
      V8 rv = rz - up;  // up is −1 where the rounding goes up
      const V8 carry = rv >> (pbits + 1);
      rv >>= carry;
      qo += carry;
      const V8 common = (rv >= hidden) & (qo <= P.emax_common - pbits) & (sh < 32);
      const V8 zero = s == 0;
      V8 nsr = zero ? V8{} : Ops::sign(rv, s);
      V8 nq = zero ? V8{} : qo;
      const V8 rare = ~(common | zero | bad[r]);
      if (__builtin_expect(Ops::any(rare), 0)) {
        std::int32_t a_s[kLanes], a_qb[kLanes], a_sr[kLanes], a_q[kLanes], a_bad[kLanes], a_rare[kLanes];
        store8(a_s, s);
        store8(a_qb, qb);
        store8(a_sr, nsr);
        store8(a_q, nq);
        store8(a_bad, bad[r]);
        store8(a_rare, rare);
        for (std::size_t l = 0; l < kLanes; ++l) {
          if (a_rare[l] == 0) continue;
          AccState st;
          if (round_state(f, pbits, rne, a_s[l], a_qb[l], st)) {
            const auto rr = static_cast<std::int32_t>(st.r);
            a_sr[l] = st.neg ? -rr : rr;
            a_q[l] = st.q;
          } else {
            a_bad[l] = -1;
            a_sr[l] = 0;
            a_q[l] = 0;
          }
        }
        nsr = load8(a_sr);
        nq = load8(a_q);
        bad[r] = load8(a_bad);
      }
      // Lanes already handed to the general engine keep a zero state, so every lane stays in range.
      sr[r] = bad[r] ? V8{} : nsr;
      q[r] = bad[r] ? V8{} : nq;
    }
    if (s1 >= k) break;
  }
  for (std::size_t r = 0; r < R; ++r) {
    for (std::size_t l = 0; l < kLanes; ++l) {
      const std::int32_t v = sr[r][l];
      A.ok[r][l] = bad[r][l] == 0;
      const AccState st{static_cast<std::uint64_t>(v < 0 ? -static_cast<std::int64_t>(v) : v), q[r][l],
                        v < 0};
      A.out[r][l] = A.ok[r][l] ? encode_state(f, pbits, st) : 0;
    }
  }
}

template <std::size_t R>
__attribute__((flatten)) void rows_trunc_generic(RowsArgs<R>& a) {
  rows_trunc<GenericOps, R>(a);
}

#if LPEMU_X86
template <std::size_t R>
__attribute__((target("avx2"), flatten)) void rows_trunc_avx2(RowsArgs<R>& a) {
  rows_trunc<Avx2Ops, R>(a);
}
#endif

constexpr std::size_t kRowTile = 4;
constexpr std::size_t kFusedRows = 16;  // up to this many rows, B's panels are packed where used

// The kernels for this machine, chosen once (dispatch at the edge, as Highway's tables).
struct RowKernels {
  void (*tile)(RowsArgs<kRowTile>&);
  void (*one)(RowsArgs<1>&);
};

const RowKernels& row_kernels() {
#if LPEMU_X86
  static const RowKernels kernels = __builtin_cpu_supports("avx2")
                                        ? RowKernels{&rows_trunc_avx2<kRowTile>, &rows_trunc_avx2<1>}
                                        : RowKernels{&rows_trunc_generic<kRowTile>, &rows_trunc_generic<1>};
#else
  static const RowKernels kernels{&rows_trunc_generic<kRowTile>, &rows_trunc_generic<1>};
#endif
  return kernels;
}

// ideal: Σ of exact products at the smallest possible product lsb (int64); `nz` = 0 when every
// product is zero (the caller then lets the general engine pick the sign of zero).
LPEMU_AVX2_CLONES std::int64_t element_exact(const std::int32_t* am, const std::int32_t* al,
                                             const std::int32_t* bm, const std::int32_t* bl, std::size_t k,
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
  if (!no_scales || dp.scale_application != ScaleApplication::none || dp.product_format ||
      dp.promote_every > 0 || dp.order != Order::sequential || dp.addend != Addend::fused ||
      dp.flush_subnormal_inputs || dp.accumulator_rounding.mode == format::RoundingMode::stochastic ||
      dp.accumulator.kind != format::Kind::floating || dp.accumulator.specials != format::Specials::ieee ||
      !narrow(dp.a) || !narrow(dp.b)) {
    return false;
  }
  if (dp.alignment == Alignment::truncate) {
    // Left shifts of products are at most F − m_a − m_b, which kLift must cover.
    return !dp.sticky && dp.fused_terms >= 1 && dp.fused_terms <= 64 && dp.fraction_bits <= 36 &&
           dp.fraction_bits - dp.a.mantissa_bits - dp.b.mantissa_bits <= kLift;
  }
  if (dp.alignment == Alignment::exact) {
    // int64 fixed point at the smallest product lsb: products span at most this many bits.
    const int span = (dp.a.emax - dp.a.emin + dp.a.mantissa_bits + 1) +
                     (dp.b.emax - dp.b.emin + dp.b.mantissa_bits + 1) + 2;
    return dp.fused_terms == 0 && span <= 40;
  }
  return false;
}

namespace {

// One fast GEMM, D = C + A·B on codes, in named steps: plan (kernel parameters), prepare_a and
// prepare_b (operands packed from the codes), the tile kernel on rows without NaN or Inf
// (run_fused_panels, tile_rows) and per-element accumulation and output for the rest
// (scalar_rows, element); whatever a kernel cannot decide goes to the general engine (general).
template <typename In>
class GemmRun {
 public:
  GemmRun(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k, std::span<const In> a,
          std::span<const In> b, std::span<const std::uint64_t> c, std::span<std::uint64_t> d)
      : dp_(dp),
        m_(m),
        n_(n),
        k_(k),
        a_(a),
        b_(b),
        c_(c),
        d_(d),
        dec_a_(dp.a, dp.flush_subnormal_inputs, "A"),
        dec_b_(dp.b, dp.flush_subnormal_inputs, "B") {}

  /// Computes every element of D.
  void run() {
    if (!plan()) {
      tbb::parallel_for(std::size_t{0}, m_ * n_, [&](std::size_t e) { d_[e] = general(e / n_, e % n_); });
      return;
    }
    prepare_a();
    prepare_b();
    if (fused_) run_fused_panels();
    // Columns in chunks of eight: a whole chunk inside the panels goes to the vector kernel (done
    // above when fused).
    const std::size_t chunks = (n_ + kLanes - 1) / kLanes;
    tbb::parallel_for(tbb::blocked_range2d<std::size_t>(0, m_, 16, 0, chunks, 8), [&](const auto& r) {
      const std::size_t jv0 = r.cols().begin() * kLanes;
      const std::size_t jv1 = vec_ ? std::min(r.cols().end(), panels_) * kLanes : jv0;
      if (jv1 > jv0 && !fused_) tile_rows(r.rows().begin(), r.rows().end(), jv0, jv1);
      scalar_rows(r.rows().begin(), r.rows().end(), jv0, jv1, std::min(r.cols().end() * kLanes, n_));
    });
  }

 private:
  // The general engine's result for element (i, j), its operands decoded again from the codes (rare).
  std::uint64_t general(std::size_t i, std::size_t j) const {
    std::vector<Operand> row(k_), col(k_);
    for (std::size_t p = 0; p < k_; ++p) {
      row[p] = dec_a_(a_[i * k_ + p], i * k_ + p);
      col[p] = dec_b_(b_[p * n_ + j], p * n_ + j);
    }
    return dot_decoded(dp_, row, col, c_.empty() ? 0 : c_[i * n_ + j], {}, i * n_ + j);
  }

  // The kernels' parameters; false when ideal sums may not fit int64 (every element goes general).
  bool plan() {
    exact_ = dp_.alignment == Alignment::exact;
    // ideal in int64: products span at most `span` bits above lmin, K of them need bit_width(K) more.
    const int span = (dp_.a.emax - dp_.a.emin + dp_.a.mantissa_bits + 1) +
                     (dp_.b.emax - dp_.b.emin + dp_.b.mantissa_bits + 1) + 2;
    if (exact_ && span + static_cast<int>(std::bit_width(k_)) > 62) return false;
    lmin_ = (dp_.a.emin - dp_.a.mantissa_bits) + (dp_.b.emin - dp_.b.mantissa_bits);
    const std::size_t bs = exact_ ? std::max<std::size_t>(k_, 1) : static_cast<std::size_t>(dp_.fused_terms);
    const int F = dp_.fraction_bits;
    const int floor = dp_.exponent_floor ? *dp_.exponent_floor : INT_MIN / 2;
    const int mbsum = dp_.a.mantissa_bits + dp_.b.mantissa_bits;
    // int32 kernel: products have at most mbsum + 2 bits; lift them to 30 bits; the largest left
    // shift F − mbsum must fit in the lift, and 64 terms of < 2^(F+2) must fit in int32.
    const int lift32 = 30 - (mbsum + 2);
    const bool use32 = dp_.alignment == Alignment::truncate && F - mbsum <= lift32 && F + 2 + 7 <= 31 &&
                       dp_.fused_terms <= 64;
    const int base_shift32 = mbsum - F + lift32;
    // Normal results up to this exponent are finite (above it round_state checks max_code).
    const format::Format& acc = dp_.accumulator;
    const std::uint64_t top = (static_cast<std::uint64_t>(acc.emax + acc.bias) << acc.mantissa_bits) |
                              ((std::uint64_t{1} << acc.mantissa_bits) - 1);
    const int emax_common = top == acc.max_code ? acc.emax : acc.emax - 1;
    tp_ = TruncParams{&dp_, bs, F, floor, mbsum - F + kLift, base_shift32, lift32, use32, emax_common};
    // The vector kernel keeps accumulator significands in int32 lanes.
    vec_ = use32 && !exact_ && acc.mantissa_bits <= 29 && dp_.accumulator_fraction_bits <= 29;
    panels_ = vec_ ? n_ / kLanes : 0;
    jt_ = panels_ * kLanes;
    lift_ = std::int32_t{1} << std::max(lift32, 0);
    // Few rows (decode: m = 1): each panel is packed where it is used, while it is in cache,
    // instead of all of B up front.
    fused_ = vec_ && m_ <= kFusedRows;
    return true;
  }

  // A by rows.
  void prepare_a() {
    pa_ = make_packed(m_, k_);
    tbb::parallel_for(std::size_t{0}, m_, [&](std::size_t i) {
      for (std::size_t p = 0; p < k_; ++p) {
        if (put(pa_, i * k_ + p, dec_a_.lane(a_[i * k_ + p], i * k_ + p))) pa_.special[i] = 1;
      }
    });
  }

  // B's first n/8·8 columns (vector kernel) in panels of eight, [n/8][k][8], significands lifted
  // by lift32 (packed here unless fused); the other columns (all of them without the vector
  // kernel) by columns, [n − jt][k].
  void prepare_b() {
    bspecial_.assign(n_, 0);
    const std::size_t held = fused_ ? 0 : panels_ * k_ * kLanes;
    bmk_ = std::make_unique_for_overwrite<std::int32_t[]>(held);
    bek_ = std::make_unique_for_overwrite<std::int32_t[]>(held);
    if (!fused_) {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, panels_, 8), [&](const auto& r) {
        for (std::size_t q = r.begin(); q != r.end(); ++q) {
          pack_panel(q, bmk_.get() + q * k_ * kLanes, bek_.get() + q * k_ * kLanes);
        }
      });
    }
    pb_ = make_packed(n_ - jt_, k_);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(jt_, n_, 16), [&](const auto& r) {
      for (std::size_t p = 0; p < k_; ++p) {
        for (std::size_t j = r.begin(); j != r.end(); ++j) {
          if (put(pb_, (j - jt_) * k_ + p, dec_b_.lane(b_[p * n_ + j], p * n_ + j))) bspecial_[j] = 1;
        }
      }
    });
  }

  // Packs panel q (columns 8q..8q+7) into pm, pe ([k][8] each) and marks its NaN/Inf columns.
  void pack_panel(std::size_t q, std::int32_t* pm, std::int32_t* pe) {
    bool special[kLanes] = {};
    for (std::size_t p = 0; p < k_; ++p) {
      const std::size_t at = p * n_ + q * kLanes;
      for (std::size_t l = 0; l < kLanes; ++l) {
        const Lane x = dec_b_.lane(b_[at + l], at + l);
        pm[p * kLanes + l] = x.m * lift_;
        pe[p * kLanes + l] = x.e;
        special[l] |= x.special;
      }
    }
    for (std::size_t l = 0; l < kLanes; ++l) bspecial_[q * kLanes + l] = special[l] ? 1 : 0;
  }

  // Runs the R-row tile kernel on rows `rows` and the panel pm, pe of columns j..j+7, and writes
  // its outputs (the general engine's where the kernel or a NaN/Inf column defers).
  template <std::size_t R>
  void run_tile(const std::size_t* rows, std::size_t j, void (*kernel)(RowsArgs<R>&), const std::int32_t* pm,
                const std::int32_t* pe) {
    RowsArgs<R> args;
    args.P = &tp_;
    args.bmk = pm;
    args.bek = pe;
    args.k = k_;
    for (std::size_t r = 0; r < R; ++r) {
      args.am[r] = pa_.m.get() + rows[r] * k_;
      args.ae[r] = pa_.e.get() + rows[r] * k_;
      for (std::size_t l = 0; l < kLanes; ++l) args.c[r][l] = c_.empty() ? 0 : c_[rows[r] * n_ + j + l];
    }
    kernel(args);
    for (std::size_t r = 0; r < R; ++r) {
      for (std::size_t l = 0; l < kLanes; ++l) {
        const std::size_t at = rows[r] * n_ + j + l;
        d_[at] = (args.ok[r][l] && bspecial_[j + l] == 0) ? args.out[r][l] : general(rows[r], j + l);
      }
    }
  }

  // Few rows: every panel packed where it is used, then all plain rows through the tile kernel.
  void run_fused_panels() {
    std::vector<std::size_t> plain;  // rows without NaN or Inf
    for (std::size_t i = 0; i < m_; ++i) {
      if (pa_.special[i] == 0) plain.push_back(i);
    }
    const RowKernels& kern = row_kernels();
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, panels_, 4), [&](const auto& r) {
      const Buffer<std::int32_t> pm = std::make_unique_for_overwrite<std::int32_t[]>(k_ * kLanes);
      const Buffer<std::int32_t> pe = std::make_unique_for_overwrite<std::int32_t[]>(k_ * kLanes);
      for (std::size_t q = r.begin(); q != r.end(); ++q) {
        pack_panel(q, pm.get(), pe.get());
        std::size_t t = 0;
        for (; t + kRowTile <= plain.size(); t += kRowTile) {
          run_tile<kRowTile>(plain.data() + t, q * kLanes, kern.tile, pm.get(), pe.get());
        }
        for (; t < plain.size(); ++t) run_tile<1>(plain.data() + t, q * kLanes, kern.one, pm.get(), pe.get());
      }
    });
  }

  // Rows i0..i1 without NaN or Inf, columns jv0..jv1 (whole panels), through the tile kernel.
  void tile_rows(std::size_t i0, std::size_t i1, std::size_t jv0, std::size_t jv1) {
    const RowKernels& kern = row_kernels();
    std::size_t plain[16];  // rows without NaN or Inf, in tiles of kRowTile
    std::size_t np = 0;
    auto flush = [&](bool all) {
      std::size_t t = 0;
      for (; t + kRowTile <= np; t += kRowTile) {
        for (std::size_t j = jv0; j < jv1; j += kLanes) {
          run_tile<kRowTile>(plain + t, j, kern.tile, bmk_.get() + j * k_, bek_.get() + j * k_);
        }
      }
      if (all) {
        for (; t < np; ++t) {
          for (std::size_t j = jv0; j < jv1; j += kLanes) {
            run_tile<1>(plain + t, j, kern.one, bmk_.get() + j * k_, bek_.get() + j * k_);
          }
        }
      }
      std::copy(plain + t, plain + np, plain);
      np -= t;
    };
    for (std::size_t i = i0; i != i1; ++i) {
      if (pa_.special[i] != 0) continue;
      plain[np++] = i;
      if (np == 16) flush(false);
    }
    flush(true);
  }

  // Rows i0..i1, columns up to jend the tile kernel did not take (rows it took start at jv1).
  void scalar_rows(std::size_t i0, std::size_t i1, std::size_t jv0, std::size_t jv1, std::size_t jend) {
    for (std::size_t i = i0; i != i1; ++i) {
      for (std::size_t j = pa_.special[i] == 0 ? jv1 : jv0; j != jend; ++j) d_[i * n_ + j] = element(i, j);
    }
  }

  // Element (i, j) accumulated alone: ideal in int64, else element_trunc.
  std::uint64_t element(std::size_t i, std::size_t j) const {
    const std::uint64_t cc = c_.empty() ? 0 : c_[i * n_ + j];
    if (pa_.special[i] != 0 || bspecial_[j] != 0) return general(i, j);
    const std::int32_t* am = pa_.m.get() + i * k_;
    const std::int32_t* ae = pa_.e.get() + i * k_;
    const std::int32_t* al = pa_.l.get() + i * k_;
    const std::int32_t* bm = pb_.m.get() + (j - jt_) * k_;
    const std::int32_t* be = pb_.e.get() + (j - jt_) * k_;
    const std::int32_t* bl = pb_.l.get() + (j - jt_) * k_;
    if (exact_) {
      std::int64_t nz = 0;
      const std::int64_t s = element_exact(am, al, bm, bl, k_, lmin_, nz);
      const Kind ck = decode_acc(dp_.accumulator, cc, dp_.addend_emin).kind;
      const bool plain = nz != 0 && ck != Kind::nan && ck != Kind::inf;
      return plain ? finish_block(dp_, s, lmin_, false, cc, true) : general(i, j);
    }
    std::uint64_t out = 0;
    return element_trunc(tp_, am, ae, bm, be, k_, cc, out) ? out : general(i, j);
  }

  const Datapath& dp_;
  std::size_t m_, n_, k_;
  std::span<const In> a_, b_;
  std::span<const std::uint64_t> c_;
  std::span<std::uint64_t> d_;
  const Decoder dec_a_, dec_b_;
  // Set by plan().
  bool exact_ = false, vec_ = false, fused_ = false;
  int lmin_ = 0;
  TruncParams tp_{};
  std::size_t panels_ = 0, jt_ = 0;  // B's vector panels; jt = their column count
  std::int32_t lift_ = 1;
  // Set by prepare_a() and prepare_b().
  Packed pa_, pb_;
  std::vector<char> bspecial_;  // per column of B: holds NaN or Inf
  Buffer<std::int32_t> bmk_, bek_;
};

}  // namespace

void fast_gemm(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k,
               std::span<const std::uint64_t> a, std::span<const std::uint64_t> b,
               std::span<const std::uint64_t> c, std::span<std::uint64_t> d) {
  GemmRun<std::uint64_t>(dp, m, n, k, a, b, c, d).run();
}

void fast_gemm(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k,
               std::span<const std::uint8_t> a, std::span<const std::uint8_t> b,
               std::span<const std::uint64_t> c, std::span<std::uint64_t> d) {
  GemmRun<std::uint8_t>(dp, m, n, k, a, b, c, d).run();
}

}  // namespace lpemu::datapath::detail
