// Block quantisation. Two paths give identical bits:
//  * generic: per block, the scale from the rule, then each element y = x / S in double (exact for
//    power-of-two S), rounded by the element format's scalar codec with saturation, times S;
//  * fast (quantize only): power-of-two scales 2^s with s in [-126, 126] and element formats that
//    fit float32 with a smallest step ≥ 2^-90: y = x·2^-s in float (exact except below 2^-126,
//    where the step is so coarse that only y's sign and non-zeroness matter, which are kept),
//    rounded on its bits by the element format's fast kernel (format::detail::fast_round, with a
//    saturating value step here; nearest_even adds and subtracts 2^(qe+23) instead), times 2^s.
//    Blocks it cannot take go generic.
#include "lpemu/block/quantize.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "format/codec_detail.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::block {

using format::RoundingMode;
using format::detail::dispatch_mode;

BlockLayout make_layout(const BlockFormat& fmt, std::span<const std::size_t> shape) {
  if (shape.empty()) throw ShapeError("block quantize: the tensor shape is empty (rank 0)");
  BlockLayout L;
  L.shape.assign(shape.begin(), shape.end());
  const std::size_t rank = shape.size();
  auto prod = [&](std::size_t lo, std::size_t hi) {
    std::size_t p = 1;
    for (std::size_t i = lo; i < hi; ++i) p *= shape[i];
    return p;
  };
  switch (fmt.granularity) {
    case Granularity::block: {
      const long r = static_cast<long>(rank);
      const long ax = fmt.axis < 0 ? fmt.axis + r : fmt.axis;
      if (ax < 0 || ax >= r) {
        throw ShapeError("block format '" + fmt.name + "': axis " + std::to_string(fmt.axis) +
                         " is out of range for a tensor of rank " + std::to_string(rank));
      }
      const auto k = static_cast<std::size_t>(ax);
      L.outer = prod(0, k);
      L.rows = shape[k];
      L.cols = prod(k + 1, rank);
      L.block_rows = static_cast<std::size_t>(fmt.block_size);
      L.block_cols = 1;
      break;
    }
    case Granularity::tile:
      L.outer = rank > 2 ? prod(0, rank - 2) : 1;
      L.rows = rank >= 2 ? shape[rank - 2] : 1;
      L.cols = shape[rank - 1];
      L.block_rows = static_cast<std::size_t>(fmt.tile_rows);
      L.block_cols = static_cast<std::size_t>(fmt.tile_cols);
      break;
    case Granularity::per_tensor:
      L.outer = 1;
      L.rows = 1;
      L.cols = prod(0, rank);
      L.block_rows = 1;
      L.block_cols = std::max<std::size_t>(L.cols, 1);
      break;
    case Granularity::per_row:
      L.outer = 1;
      L.rows = prod(0, rank - 1);
      L.cols = shape[rank - 1];
      L.block_rows = 1;
      L.block_cols = std::max<std::size_t>(L.cols, 1);
      break;
    case Granularity::per_column:
      L.outer = 1;
      L.rows = prod(0, rank - 1);
      L.cols = shape[rank - 1];
      L.block_rows = std::max<std::size_t>(L.rows, 1);
      L.block_cols = 1;
      break;
  }
  return L;
}

namespace {

constexpr std::uint32_t kAbsMask = 0x7fffffffU;
constexpr std::uint32_t kInfBits = 0x7f800000U;

std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }

// double → float32 rounded to nearest even, with overflow to ±Inf defined (a plain cast of a
// value beyond FLT_MAX is undefined behaviour). 0x1.ffffffp127 is the midpoint between FLT_MAX
// and 2^128; it rounds to 2^128 (even), i.e. Inf.
[[gnu::always_inline]] inline float narrow(double v) {
  const double av = std::fabs(v);
  const double in_range = av > 0x1.fffffep127 ? 0.0 : v;
  const float f = static_cast<float>(in_range);
  const float big =
      av >= 0x1.ffffffp127 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::max();
  return av > 0x1.fffffep127 ? std::copysign(big, static_cast<float>(std::copysign(1.0, v))) : f;
}

// Per-call constants.
struct Ctx {
  const BlockFormat& f;
  BlockLayout L;
  format::ConvertOptions eopts;  // element options, saturating
  format::ConvertOptions sopts;  // scale options (amax_over_max)
  double max_elem = 0;           // element max finite
  int emax = 0;                  // exponent of the largest power of two ≤ max_elem
  int prec = 0;                  // significant bits of the element at its top binade
  int s_lo = 0, s_hi = 0;        // power-of-two range of the scale format
  double g = 1.0;                // tensor scale (1 when none)
  int max_ilogb = 0;             // ilogb(max_elem)
  std::uint32_t max_mant = 0;    // float32 mantissa field of max_elem (fast ceil rule)
  std::uint32_t even_half = 0;   // half an element ulp in float32 mantissa units (fast even rule)

  explicit Ctx(const BlockFormat& fmt, std::span<const std::size_t> shape)
      : f(fmt), L(make_layout(fmt, shape)) {
    fmt.validate();
    eopts = fmt.element_options;
    eopts.overflow = format::Overflow::saturate;
    eopts.index_offset = 0;
    eopts.flush_subnormal_inputs = false;
    eopts.flush_subnormal_outputs = false;
    sopts.rounding = fmt.scale_rounding;
    sopts.overflow = format::Overflow::saturate;
    max_elem = fmt.element.max_finite;
    emax = fmt.element_emax();
    prec = fmt.element.kind == format::Kind::floating ? fmt.element.mantissa_bits + 1
                                                      : emax - std::ilogb(fmt.element.min_normal) + 1;
    max_ilogb = std::ilogb(max_elem);
    max_mant = std::bit_cast<std::uint32_t>(static_cast<float>(max_elem)) & 0x7fffffU;
    even_half = prec >= 1 && prec <= 23 ? 1U << (23 - prec) : 0U;
    s_lo = fmt.scale_is_pow2 ? std::numeric_limits<int>::min() / 4 : fmt.scale_min_exponent();
    s_hi = fmt.scale_is_pow2 ? std::numeric_limits<int>::max() / 4 : fmt.scale_max_exponent();
  }

  // The input as the block rule sees it (subnormal_inputs = flush: float32 subnormals are ±0).
  float load(float x) const {
    if (f.subnormal_inputs == SubnormalInputs::flush && (bits_of(x) & kAbsMask) < 0x00800000U) {
      return std::copysign(0.0F, x);
    }
    return x;
  }
};

// The scale chosen for one block.
struct Scale {
  enum Kind : std::uint8_t { normal, nan, zero } kind = normal;
  std::uint32_t code = 0;
  double value = 1;  // effective scale S (tensor scale included)
  bool pow2 = false;
  int exponent = 0;  // S = 2^exponent when pow2
};

std::uint32_t nan_scale_code(const BlockFormat& f) {
  return f.scale_is_pow2 ? kPow2NanCode : static_cast<std::uint32_t>(f.scale.nan_code());
}

Scale nan_scale(const Ctx& c) {
  Scale s;
  s.kind = Scale::nan;
  s.code = nan_scale_code(c.f);
  s.value = std::numeric_limits<double>::quiet_NaN();
  return s;
}

// 2^e as a scale (e already inside the scale format's range).
Scale pow2_scale(const Ctx& c, int e) {
  Scale s;
  s.pow2 = true;
  s.exponent = e;
  s.value = std::ldexp(1.0, e);
  s.code = c.f.scale_is_pow2 ? static_cast<std::uint32_t>(e)
                             : static_cast<std::uint32_t>(format::encode(c.f.scale, s.value));
  return s;
}

// The scale of a scale-format code (times the tensor scale).
Scale code_scale(const Ctx& c, std::uint32_t code) {
  Scale s;
  s.code = code;
  const double v = format::decode(c.f.scale, code);
  s.value = v * c.g;
  if (v == 0.0) s.kind = Scale::zero;  // NOLINT(clang-diagnostic-float-equal)
  int e = 0;
  const double fr = std::frexp(v, &e);
  s.pow2 = c.g == 1.0 && fr == 0.5;
  s.exponent = e - 1;
  return s;
}

// Power-of-two exponent of the rule (ocp / ceil / even) for amax > 0, before range clamping.
int pow2_exponent(const Ctx& c, double amax) {
  switch (c.f.rule) {
    case ScaleRule::ceil: {
      // Smallest s with amax <= max_elem·2^s: s0 = ilogb(amax) − ilogb(max) or s0 + 1.
      const int s0 = std::ilogb(amax) - std::ilogb(c.max_elem);
      return amax <= std::ldexp(c.max_elem, s0) ? s0 : s0 + 1;
    }
    case ScaleRule::even: {
      // amax rounded to the element's precision (ties away), then the OCP rule. Exact in double.
      const int e = std::ilogb(amax);
      const double q = std::ldexp(1.0, e - c.prec + 1);
      const double r = std::floor(amax / q + 0.5) * q;
      return std::ilogb(r) - c.emax;
    }
    default:
      // OCP MX v1.0, shared-scale computation: shared_exp = floor(log2(amax)) − emax_elem, with
      // floor(log2(amax)) read from the binary exponent (std::ilogb), never from a float log2.
      return std::ilogb(amax) - c.emax;
  }
}

// The scale of a power-of-two rule; nullopt means "scale overflow → NaN block".
std::optional<Scale> pow2_rule_scale(const Ctx& c, double amax) {
  if (amax == 0.0) return pow2_scale(c, c.f.scale_is_pow2 ? 0 : c.s_lo);  // NOLINT
  int e = pow2_exponent(c, amax);
  // Scale underflow: clamp to the smallest scale; elements then underflow through rounding.
  if (e < c.s_lo) e = c.s_lo;
  if (e > c.s_hi) {
    if (c.f.scale_overflow == ScaleOverflow::nan) return std::nullopt;
    e = c.s_hi;
  }
  return pow2_scale(c, e);
}

// amax / (max_elem · g) rounded to the scale format; nullopt means NaN block (scale overflow).
std::optional<Scale> amax_over_max_scale(const Ctx& c, double amax) {
  const double v = amax / (c.max_elem * c.g);
  if (amax == 0.0) {  // NOLINT
    // Zero block: the zero scale where the format has one, else its smallest value.
    const double z = c.f.scale.has_zero ? 0.0 : c.f.scale.min_subnormal;
    return code_scale(c, static_cast<std::uint32_t>(format::encode(c.f.scale, z)));
  }
  format::ConvertOptions native = c.sopts;
  native.overflow = format::Overflow::native;
  const double vn = format::quantize(c.f.scale, v, native);
  if (!std::isfinite(vn) && c.f.scale_overflow == ScaleOverflow::nan) return std::nullopt;
  return code_scale(c, static_cast<std::uint32_t>(format::encode(c.f.scale, v, c.sopts)));
}

// ---- generic element path ------------------------------------------------------------------

struct ElemOut {
  float value;
  std::uint32_t code;
};

ElemOut generic_element(const Ctx& c, const Scale& s, float xin, std::uint64_t index, bool want_code) {
  const float x = c.load(xin);
  const format::Format& e = c.f.element;
  if (s.kind == Scale::nan) return {std::numeric_limits<float>::quiet_NaN(), 0};
  double y = 0;
  if (s.kind == Scale::zero) {
    y = std::isnan(x) ? static_cast<double>(x) : std::copysign(0.0, static_cast<double>(x));
  } else {
    y = static_cast<double>(x) / s.value;
  }
  if (c.f.signed_zero == SignedZero::positive && y == 0.0) y = 0.0;  // NOLINT
  double q = format::quantize(e, y, c.eopts, index);
  // Element formats without −0 (integers, fnuz) give +0.
  if ((c.f.signed_zero == SignedZero::positive || !e.has_negative_zero()) && q == 0.0) q = 0.0;  // NOLINT
  std::uint32_t code = 0;
  if (want_code) code = static_cast<std::uint32_t>(format::encode(e, q, format::ConvertOptions{}));
  const double scaled = s.kind == Scale::zero ? q * 0.0 : q * s.value;
  return {narrow(scaled), code};
}

// Calls f(start, length) for each contiguous run of elements of block (a, bi, bj).
template <class F>
void for_segments(const BlockLayout& L, std::size_t a, std::size_t bi, std::size_t bj, F&& f) {
  const std::size_t r0 = bi * L.block_rows, r1 = std::min(L.rows, r0 + L.block_rows);
  const std::size_t c0 = bj * L.block_cols, c1 = std::min(L.cols, c0 + L.block_cols);
  if (c0 == 0 && c1 == L.cols) {
    f((a * L.rows + r0) * L.cols, (r1 - r0) * L.cols);
    return;
  }
  for (std::size_t r = r0; r < r1; ++r) f((a * L.rows + r) * L.cols + c0, c1 - c0);
}

struct BlockStats {
  double amax = 0;
  bool nonfinite = false;
};

BlockStats block_stats(const Ctx& c, const float* in, std::size_t a, std::size_t bi, std::size_t bj) {
  BlockStats st;
  float amax = 0;
  for_segments(c.L, a, bi, bj, [&](std::size_t lo, std::size_t n) {
    for (std::size_t i = lo; i < lo + n; ++i) {
      const float x = c.load(in[i]);
      if (!std::isfinite(x)) {
        st.nonfinite = true;
        continue;
      }
      amax = std::max(amax, std::fabs(x));
    }
  });
  st.amax = amax;
  if (c.f.subnormal_inputs == SubnormalInputs::flush_block && amax < std::numeric_limits<float>::min()) {
    st.amax = 0;
  }
  return st;
}

// Sum of squared errors of the block under scale s (search rule).
double block_sse(const Ctx& c, const Scale& s, const float* in, std::size_t a, std::size_t bi,
                 std::size_t bj) {
  double sse = 0;
  for_segments(c.L, a, bi, bj, [&](std::size_t lo, std::size_t n) {
    for (std::size_t i = lo; i < lo + n; ++i) {
      const float x = c.load(in[i]);
      if (!std::isfinite(x)) continue;
      const double d =
          static_cast<double>(x) - static_cast<double>(generic_element(c, s, in[i], i, false).value);
      sse += d * d;
    }
  });
  return sse;
}

// The scale of block (a, bi, bj) under the format's rule.
Scale choose_scale(const Ctx& c, const float* in, std::size_t a, std::size_t bi, std::size_t bj,
                   const BlockStats& st) {
  if (st.nonfinite && c.f.nonfinite == NonFinite::nan_block) return nan_scale(c);
  const bool flushed = c.f.subnormal_inputs == SubnormalInputs::flush_block && st.amax == 0.0;  // NOLINT
  std::optional<Scale> s;
  // search starts from the OCP scale when every scale is a power of two ("pow2", or an
  // exponent-only format such as E8M0 without a tensor scale), else from amax_over_max.
  const bool pow2_valued =
      c.f.scale_is_pow2 || (c.f.scale.mantissa_bits == 0 && c.f.tensor_scale == TensorScale::none);
  if (c.f.rule == ScaleRule::amax_over_max || (c.f.rule == ScaleRule::search && !pow2_valued)) {
    s = amax_over_max_scale(c, st.amax);
  } else {
    s = pow2_rule_scale(c, st.amax);
  }
  if (!s) return nan_scale(c);
  if (c.f.rule == ScaleRule::search && st.amax > 0.0) {
    // Candidates: the base, then base−1, base+1, ... (codes, or exponents for "pow2"); the first
    // with the least squared error wins.
    Scale best = *s;
    double best_sse = block_sse(c, best, in, a, bi, bj);
    for (int k = 1; k <= c.f.search_radius; ++k) {
      for (int sign : {-1, 1}) {
        Scale cand;
        if (c.f.scale_is_pow2 || s->pow2) {
          if (!s->pow2) continue;
          const long e = static_cast<long>(s->exponent) + sign * k;
          if (e < c.s_lo || e > c.s_hi) continue;
          cand = pow2_scale(c, static_cast<int>(e));
        } else {
          const long code = static_cast<long>(s->code) + sign * k;
          const auto mc = static_cast<long>(c.f.scale.max_code);
          if (code < 1 || code > mc) continue;
          cand = code_scale(c, static_cast<std::uint32_t>(code));
          if (cand.kind != Scale::normal) continue;
        }
        const double sse = block_sse(c, cand, in, a, bi, bj);
        if (sse < best_sse) {
          best_sse = sse;
          best = cand;
        }
      }
    }
    s = best;
  }
  if (flushed) s->kind = Scale::zero;
  return *s;
}

// Generic processing of one block: scale code, and values and/or codes.
void generic_block(const Ctx& c, const float* in, float* out, std::uint32_t* codes, std::uint32_t* scale_code,
                   std::size_t a, std::size_t bi, std::size_t bj) {
  const BlockStats st = block_stats(c, in, a, bi, bj);
  const Scale s = choose_scale(c, in, a, bi, bj, st);
  if (scale_code != nullptr) *scale_code = s.code;
  for_segments(c.L, a, bi, bj, [&](std::size_t lo, std::size_t n) {
    for (std::size_t i = lo; i < lo + n; ++i) {
      const ElemOut r = generic_element(c, s, in[i], i, codes != nullptr);
      if (out != nullptr) out[i] = r.value;
      if (codes != nullptr) codes[i] = r.code;
    }
  });
}

// ---- fast path -------------------------------------------------------------------------------

// Per-call constants of the fast path.
struct Fast {
  format::detail::Fast element;  // the element format's fast-kernel constants (floating elements)
  std::int32_t is_int, int_qe;   // integer elements: fixed quantum 2^int_qe (nearest_even only)
  std::uint32_t positive_zero;   // zero results are +0
  float maxf;                    // results saturate to ±maxf
};

bool fast_eligible(const Ctx& c) {
  const BlockFormat& f = c.f;
  const format::Format& e = f.element;
  const bool float_ok = format::detail::fast_eligible(e) && e.emin - e.mantissa_bits >= -90 && e.emax <= 100;
  // Symmetric signed integers (MXINT8) with round-to-nearest-even: a fixed quantum, ±max clamp.
  const bool int_ok = e.kind == format::Kind::integer && e.is_signed && e.lowest == -e.max_finite &&
                      e.bits <= 24 && e.fraction_bits <= 90 && c.prec <= 23 &&
                      f.element_options.rounding == RoundingMode::nearest_even;
  return (float_ok || int_ok) && f.tensor_scale == TensorScale::none &&
         (f.rule == ScaleRule::ocp || f.rule == ScaleRule::ceil || f.rule == ScaleRule::even) &&
         f.subnormal_inputs == SubnormalInputs::keep;
}

Fast make_fast(const Ctx& c) {
  Fast p{};
  p.is_int = c.f.element.kind == format::Kind::integer ? 1 : 0;
  // eopts saturates and flushes nothing, as the generic path's element step. Integer elements
  // (nearest_even only) round at the fixed quantum instead.
  if (p.is_int == 0) p.element = format::detail::make_fast(c.f.element, c.eopts, 0);
  p.int_qe = -c.f.element.fraction_bits;
  p.positive_zero = (c.f.signed_zero == SignedZero::positive || !c.f.element.has_negative_zero()) ? 1U : 0U;
  p.maxf = static_cast<float>(c.max_elem);
  return p;
}

// Rounds the scaled input y (finite) to the element grid with saturation: the element format's
// rounding step (the same definition as the element codec's), then n·2^qe clamped to ±max.
template <RoundingMode M>
[[gnu::always_inline]] inline float fast_element(const Fast& p, float y, std::uint64_t index) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(y);
  const std::uint32_t s = u >> 31;
  const format::detail::FastRounded r = format::detail::fast_round<M>(p.element, u & kAbsMask, s, index);
  const float v0 =
      static_cast<float>(r.n) * std::bit_cast<float>(static_cast<std::uint32_t>(r.qe + 127) << 23);
  const float v = v0 < p.maxf ? v0 : p.maxf;
  const std::uint32_t sign = (s << 31) & ~format::detail::mask((p.positive_zero != 0) & (r.n == 0));
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) | sign);
}

// nearest_even without variable shifts (vectorises on any x86-64): adding C = 2^(qe+23) rounds |y|
// to a multiple of 2^qe in float32's own round-to-nearest-even, and subtracting C is exact. Same
// result as fast_element<nearest_even>; the property tests compare both with the generic path.
[[gnu::always_inline]] inline float fast_element_rne(const Fast& p, float y) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(y);
  const std::uint32_t s = u & 0x80000000U;
  const std::uint32_t a = u & kAbsMask;
  const std::int32_t ex = static_cast<std::int32_t>(a >> 23) - 127;
  const format::detail::Fast& e = p.element;
  const std::int32_t qf = ex < e.emin ? (e.subnormals != 0 ? e.emin - e.m : e.emin) : ex - e.m;
  const std::int32_t qe = p.is_int != 0 ? p.int_qe : qf;
  const float c = std::bit_cast<float>(static_cast<std::uint32_t>(qe + 150) << 23);
  const float r = (std::bit_cast<float>(a) + c) - c;
  const float v = r < p.maxf ? r : p.maxf;
  const std::uint32_t vb = std::bit_cast<std::uint32_t>(v);
  const std::uint32_t sign = (p.positive_zero != 0 && vb == 0) ? 0U : s;
  return std::bit_cast<float>(vb | sign);
}

// x·2^-s with the sign and non-zeroness of the exact product kept when it underflows to zero.
[[gnu::always_inline]] inline float scale_down(float x, float inv) {
  const float y = x * inv;
  const std::uint32_t yb = std::bit_cast<std::uint32_t>(y);
  const std::uint32_t xb = std::bit_cast<std::uint32_t>(x);
  const bool lost = (yb & kAbsMask) == 0 && (xb & kAbsMask) != 0;
  return lost ? std::bit_cast<float>((xb & 0x80000000U) | 1U) : y;
}

std::optional<int> fast_exponent(const Ctx& c, std::uint32_t ab);

#if defined(__clang__) ||    \
    !(defined(__x86_64__) || \
      defined(               \
          __i386__))  // non-x86, or clang 14 cannot multiversion templates (fuzz preset): one generic build
#define LPEMU_CLONES
#else
#define LPEMU_CLONES __attribute__((target_clones("avx2", "default")))
#endif

template <RoundingMode M>
LPEMU_CLONES void fast_segment(const Fast& p, const float* in, float* out, std::size_t n, std::uint64_t i0,
                               float inv, float scale) {
  const Fast lp = p;  // local: stores to out cannot alias it
  if constexpr (M == RoundingMode::nearest_even) {
    for (std::size_t i = 0; i < n; ++i) out[i] = fast_element_rne(lp, scale_down(in[i], inv)) * scale;
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] = fast_element<M>(lp, scale_down(in[i], inv), i0 + i) * scale;
  }
}

template <RoundingMode M>
LPEMU_CLONES void fast_row(const Fast& p, const float* in, float* out, std::size_t n, std::uint64_t i0,
                           const float* inv, const float* scale) {
  const Fast lp = p;
  if constexpr (M == RoundingMode::nearest_even) {
    for (std::size_t i = 0; i < n; ++i) out[i] = fast_element_rne(lp, scale_down(in[i], inv[i])) * scale[i];
  } else {
    for (std::size_t i = 0; i < n; ++i)
      out[i] = fast_element<M>(lp, scale_down(in[i], inv[i]), i0 + i) * scale[i];
  }
}

LPEMU_CLONES std::uint32_t amax_bits(const float* in, std::size_t n) {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t b = std::bit_cast<std::uint32_t>(in[i]) & kAbsMask;
    m = b > m ? b : m;
  }
  return m;
}

LPEMU_CLONES void amax_bits_row(const float* in, std::uint32_t* m, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t b = std::bit_cast<std::uint32_t>(in[i]) & kAbsMask;
    m[i] = b > m[i] ? b : m[i];
  }
}

// Whole-row blocks (block_cols == cols): block k covers one contiguous run. Blocks k0..k1.
template <RoundingMode M>
void fast_contiguous(const Ctx& c, const Fast& p, const float* in, float* out, std::size_t k0,
                     std::size_t k1) {
  const BlockLayout& L = c.L;
  const std::size_t gr = L.grid_rows();
  const Fast lp = p;  // a local copy: stores to out cannot alias it, so the loop vectorises
  for (std::size_t k = k0; k < k1; ++k) {
    const std::size_t a = k / gr, bi = k % gr;
    const std::size_t lo = (a * L.rows + bi * L.block_rows) * L.cols;
    const std::size_t hi = (a * L.rows + std::min(L.rows, bi * L.block_rows + L.block_rows)) * L.cols;
    std::uint32_t ab = 0;
    for (std::size_t i = lo; i < hi; ++i) {
      const std::uint32_t b = std::bit_cast<std::uint32_t>(in[i]) & kAbsMask;
      ab = b > ab ? b : ab;
    }
    const auto e = fast_exponent(c, ab);
    if (!e) {
      generic_block(c, in, out, nullptr, nullptr, a, bi, 0);
      continue;
    }
    const float inv = std::bit_cast<float>(static_cast<std::uint32_t>(127 - *e) << 23);
    const float sc = std::bit_cast<float>(static_cast<std::uint32_t>(*e + 127) << 23);
    const std::size_t n = hi - lo;
    const float* src = in + lo;
    float* dst = out + lo;
    fast_segment<M>(lp, src, dst, n, lo, inv, sc);
  }
}

// Non-power-of-two scales (NVFP4, FP32 scales) under nearest_even: y = x / S in double (the
// generic path's quotient), rounded by adding and subtracting 2^(qe+52), clamped, times S.
struct FastD {
  std::int64_t m, emin, is_int, int_qe;
  std::uint64_t subnormals, positive_zero;
  double maxd;
};

LPEMU_CLONES void fast_scaled_segment(const FastD& p, const float* in, float* out, std::size_t n,
                                      double scale) {
  const FastD lp = p;
  for (std::size_t i = 0; i < n; ++i) {
    const double y = static_cast<double>(in[i]) / scale;
    const std::uint64_t u = std::bit_cast<std::uint64_t>(y);
    const std::uint64_t sg = u & 0x8000000000000000ULL;
    const std::uint64_t a = u & 0x7fffffffffffffffULL;
    const std::int64_t ex = static_cast<std::int64_t>(a >> 52) - 1023;
    const std::int64_t qf = ex < lp.emin ? (lp.subnormals != 0 ? lp.emin - lp.m : lp.emin) : ex - lp.m;
    const std::int64_t qe = lp.is_int != 0 ? lp.int_qe : qf;
    const double c = std::bit_cast<double>(static_cast<std::uint64_t>(qe + 1075) << 52);
    const double r = (std::bit_cast<double>(a) + c) - c;
    const double v = r < lp.maxd ? r : lp.maxd;
    const std::uint64_t vb = std::bit_cast<std::uint64_t>(v);
    const std::uint64_t sign = (lp.positive_zero != 0 && vb == 0) ? 0ULL : sg;
    out[i] = narrow(std::bit_cast<double>(vb | sign) * scale);
  }
}

#undef LPEMU_CLONES

// The fast-path exponent for a block with amax bits `ab` (the rules of pow2_exponent read from the
// float32 fields), or nullopt if the block goes generic (non-finite, scale overflow, or 2^s not a
// normal float).
std::optional<int> fast_exponent(const Ctx& c, std::uint32_t ab) {
  if (ab >= kInfBits) return std::nullopt;
  const auto fe = static_cast<int>(ab >> 23);
  int e = 0;
  if (fe == 0) {  // zero or subnormal amax: rare, take the general rule
    const auto s = pow2_rule_scale(c, static_cast<double>(std::bit_cast<float>(ab)));
    if (!s) return std::nullopt;
    e = s->exponent;
  } else {
    const std::uint32_t mant = ab & 0x7fffffU;
    const int E = fe - 127;  // floor(log2(amax)) from the exponent field
    switch (c.f.rule) {
      case ScaleRule::ceil: e = E - c.max_ilogb + (mant > c.max_mant ? 1 : 0); break;
      case ScaleRule::even: e = E + ((mant + c.even_half) >= 0x800000U ? 1 : 0) - c.emax; break;
      default: e = E - c.emax; break;
    }
    if (e < c.s_lo) e = c.s_lo;
    if (e > c.s_hi) {
      if (c.f.scale_overflow == ScaleOverflow::nan) return std::nullopt;
      e = c.s_hi;
    }
  }
  if (e < -126 || e > 126) return std::nullopt;  // 2^e and 2^-e both normal floats
  return e;
}

float pow2f(int e) { return std::bit_cast<float>(static_cast<std::uint32_t>(e + 127) << 23); }

template <RoundingMode M>
void fast_block_row(const Ctx& c, const Fast& p, const float* in, float* out, std::size_t a, std::size_t bi,
                    std::vector<std::uint32_t>& amax, std::vector<float>& inv, std::vector<float>& scl,
                    std::vector<float>& tmp) {
  const BlockLayout& L = c.L;
  const std::size_t r0 = bi * L.block_rows, r1 = std::min(L.rows, r0 + L.block_rows);
  if (L.block_cols == 1 && L.cols > 1) {
    // Blocks run across rows: one scale per column, rows processed as contiguous vectors.
    amax.assign(L.cols, 0);
    for (std::size_t r = r0; r < r1; ++r) amax_bits_row(in + (a * L.rows + r) * L.cols, amax.data(), L.cols);
    inv.resize(L.cols);
    scl.resize(L.cols);
    std::vector<std::size_t> slow;
    for (std::size_t col = 0; col < L.cols; ++col) {
      const auto e = fast_exponent(c, amax[col]);
      if (!e) {
        slow.push_back(col);
        inv[col] = 1;
        scl[col] = 1;
        continue;
      }
      inv[col] = pow2f(-*e);
      scl[col] = pow2f(*e);
    }
    // Slow columns first into a buffer (in and out may alias), then the fast pass, then patch.
    tmp.assign(slow.size() * (r1 - r0), 0.0F);
    for (std::size_t k = 0; k < slow.size(); ++k) {
      const BlockStats st = block_stats(c, in, a, bi, slow[k]);
      const Scale s = choose_scale(c, in, a, bi, slow[k], st);
      for (std::size_t r = r0; r < r1; ++r) {
        const std::size_t i = (a * L.rows + r) * L.cols + slow[k];
        tmp[k * (r1 - r0) + (r - r0)] = generic_element(c, s, in[i], i, false).value;
      }
    }
    for (std::size_t r = r0; r < r1; ++r) {
      const std::size_t base = (a * L.rows + r) * L.cols;
      fast_row<M>(p, in + base, out + base, L.cols, base, inv.data(), scl.data());
    }
    for (std::size_t k = 0; k < slow.size(); ++k) {
      for (std::size_t r = r0; r < r1; ++r)
        out[(a * L.rows + r) * L.cols + slow[k]] = tmp[k * (r1 - r0) + (r - r0)];
    }
    return;
  }
  for (std::size_t bj = 0; bj < L.grid_cols(); ++bj) {
    std::uint32_t ab = 0;
    for_segments(L, a, bi, bj,
                 [&](std::size_t lo, std::size_t n) { ab = std::max(ab, amax_bits(in + lo, n)); });
    const auto e = fast_exponent(c, ab);
    if (!e) {
      generic_block(c, in, out, nullptr, nullptr, a, bi, bj);
      continue;
    }
    const float iv = pow2f(-*e), sc = pow2f(*e);
    for_segments(L, a, bi, bj, [&](std::size_t lo, std::size_t n) {
      fast_segment<M>(p, in + lo, out + lo, n, lo, iv, sc);
    });
  }
}

// Runs body(a, bi) over every block row in parallel (blocks are independent: any split gives
// the same bits).
template <class F>
void for_block_rows(const BlockLayout& L, F&& body) {
  const std::size_t n = L.outer * L.grid_rows();
  const std::size_t per_row = std::max<std::size_t>(1, L.block_rows * L.cols);
  const std::size_t grain = std::max<std::size_t>(1, (std::size_t{1} << 15) / per_row);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, grain),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t k = r.begin(); k != r.end(); ++k)
                        body(k / L.grid_rows(), k % L.grid_rows());
                    });
}

void check_sizes(const BlockLayout& L, std::size_t in, std::size_t out, const char* what) {
  if (in != L.element_count() || out != L.element_count()) {
    throw ShapeError(std::string(what) + ": the shape holds " + std::to_string(L.element_count()) +
                     " elements but the input has " + std::to_string(in) + " and the output " +
                     std::to_string(out));
  }
}

// NVFP4-style tensor scale: fp32(amax_tensor / (max_elem · max_scale)); 1 when that is not a
// positive finite float (all-zero or non-finite tensors).
void set_tensor_scale(Ctx& c, std::span<const float> in) {
  if (c.f.tensor_scale == TensorScale::none) return;
  float amax = 0;
  for (float v : in) {
    const float x = c.load(v);
    if (std::isfinite(x)) amax = std::max(amax, std::fabs(x));
  }
  const float g = narrow(static_cast<double>(amax) / (c.max_elem * c.f.scale.max_finite));
  c.g = (std::isfinite(g) && g > 0.0F) ? static_cast<double>(g) : 1.0;
}

bool fast_scaled_eligible(const Ctx& c) {
  const BlockFormat& f = c.f;
  const format::Format& e = f.element;
  const bool float_ok =
      e.kind == format::Kind::floating && e.has_zero && e.mantissa_bits <= 22 && format::fits_in_float(e);
  const bool int_ok =
      e.kind == format::Kind::integer && e.is_signed && e.lowest == -e.max_finite && e.bits <= 24;
  return (float_ok || int_ok) && !f.scale_is_pow2 && f.rule == ScaleRule::amax_over_max &&
         f.element_options.rounding == RoundingMode::nearest_even &&
         f.subnormal_inputs == SubnormalInputs::keep;
}

FastD make_fast_d(const Ctx& c) {
  const format::Format& e = c.f.element;
  FastD p{};
  p.m = e.mantissa_bits;
  p.emin = e.emin;
  p.is_int = e.kind == format::Kind::integer ? 1 : 0;
  p.int_qe = -e.fraction_bits;
  p.subnormals = e.subnormals ? 1U : 0U;
  p.positive_zero = (c.f.signed_zero == SignedZero::positive || !e.has_negative_zero()) ? 1U : 0U;
  p.maxd = e.max_finite;
  return p;
}

// One block on the non-power-of-two fast path; blocks with non-finite inputs or a NaN/zero scale
// go generic.
void fast_scaled_block(const Ctx& c, const FastD& p, const float* in, float* out, std::size_t a,
                       std::size_t bi, std::size_t bj) {
  std::uint32_t ab = 0;
  for_segments(c.L, a, bi, bj,
               [&](std::size_t lo, std::size_t n) { ab = std::max(ab, amax_bits(in + lo, n)); });
  if (ab >= kInfBits) {
    generic_block(c, in, out, nullptr, nullptr, a, bi, bj);
    return;
  }
  BlockStats st;
  st.amax = static_cast<double>(std::bit_cast<float>(ab));
  const Scale s = choose_scale(c, in, a, bi, bj, st);
  if (s.kind != Scale::normal) {
    generic_block(c, in, out, nullptr, nullptr, a, bi, bj);
    return;
  }
  for_segments(c.L, a, bi, bj,
               [&](std::size_t lo, std::size_t n) { fast_scaled_segment(p, in + lo, out + lo, n, s.value); });
}

void quantize_impl(const BlockFormat& fmt, std::span<const float> in, std::span<float> out,
                   std::span<const std::size_t> shape, bool allow_fast) {
  Ctx c(fmt, shape);
  check_sizes(c.L, in.size(), out.size(), "block quantize");
  if (in.empty()) return;
  set_tensor_scale(c, in);
  if (allow_fast && fast_eligible(c)) {
    const Fast p = make_fast(c);
    if (c.L.block_cols == c.L.cols) {
      const std::size_t n = c.L.outer * c.L.grid_rows();
      const std::size_t grain = std::max<std::size_t>(
          1, (std::size_t{1} << 15) / std::max<std::size_t>(1, c.L.block_rows * c.L.cols));
      dispatch_mode(c.eopts.rounding, [&]<RoundingMode M>() {
        tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, grain),
                          [&](const tbb::blocked_range<std::size_t>& r) {
                            fast_contiguous<M>(c, p, in.data(), out.data(), r.begin(), r.end());
                          });
      });
      return;
    }
    dispatch_mode(c.eopts.rounding, [&]<RoundingMode M>() {
      for_block_rows(c.L, [&](std::size_t a, std::size_t bi) {
        thread_local std::vector<std::uint32_t> amax;
        thread_local std::vector<float> inv, scl, tmp;
        fast_block_row<M>(c, p, in.data(), out.data(), a, bi, amax, inv, scl, tmp);
      });
    });
    return;
  }
  if (allow_fast && fast_scaled_eligible(c)) {
    const FastD p = make_fast_d(c);
    for_block_rows(c.L, [&](std::size_t a, std::size_t bi) {
      for (std::size_t bj = 0; bj < c.L.grid_cols(); ++bj)
        fast_scaled_block(c, p, in.data(), out.data(), a, bi, bj);
    });
    return;
  }
  for_block_rows(c.L, [&](std::size_t a, std::size_t bi) {
    for (std::size_t bj = 0; bj < c.L.grid_cols(); ++bj)
      generic_block(c, in.data(), out.data(), nullptr, nullptr, a, bi, bj);
  });
}

}  // namespace

void quantize(const BlockFormat& fmt, std::span<const float> in, std::span<float> out,
              std::span<const std::size_t> shape) {
  quantize_impl(fmt, in, out, shape, true);
}

void detail::quantize_generic(const BlockFormat& fmt, std::span<const float> in, std::span<float> out,
                              std::span<const std::size_t> shape) {
  quantize_impl(fmt, in, out, shape, false);
}

BlockTensor encode(const BlockFormat& fmt, std::span<const float> in, std::span<const std::size_t> shape) {
  Ctx c(fmt, shape);
  check_sizes(c.L, in.size(), in.size(), "block encode");
  if (fmt.element.bits > 32) {
    throw ShapeError("block encode: element format '" + fmt.element.name + "' has " +
                     std::to_string(fmt.element.bits) + "-bit codes; at most 32 are supported");
  }
  set_tensor_scale(c, in);
  BlockTensor t;
  t.format_name = fmt.name;
  t.layout = c.L;
  t.codes.assign(in.size(), 0);
  t.scales.assign(c.L.block_count(), 0);
  t.tensor_scale = static_cast<float>(c.g);
  if (in.empty()) return t;
  for_block_rows(c.L, [&](std::size_t a, std::size_t bi) {
    for (std::size_t bj = 0; bj < c.L.grid_cols(); ++bj) {
      const std::size_t b = (a * c.L.grid_rows() + bi) * c.L.grid_cols() + bj;
      generic_block(c, in.data(), nullptr, t.codes.data(), &t.scales[b], a, bi, bj);
    }
  });
  return t;
}

double scale_value(const BlockFormat& fmt, std::uint32_t code) {
  if (fmt.scale_is_pow2) {
    if (code == kPow2NanCode) return std::numeric_limits<double>::quiet_NaN();
    return std::ldexp(1.0, static_cast<std::int32_t>(code));
  }
  return format::decode(fmt.scale, code);
}

void decode(const BlockFormat& fmt, const BlockTensor& t, std::span<float> out) {
  const BlockLayout& L = t.layout;
  if (out.size() != L.element_count() || t.codes.size() != L.element_count() ||
      t.scales.size() != L.block_count()) {
    throw ShapeError("block decode: the block tensor has " + std::to_string(t.codes.size()) + " codes and " +
                     std::to_string(t.scales.size()) + " scales for a layout of " +
                     std::to_string(L.element_count()) + " elements in " + std::to_string(L.block_count()) +
                     " blocks; the output has " + std::to_string(out.size()));
  }
  const double g = static_cast<double>(t.tensor_scale);
  for_block_rows(L, [&](std::size_t a, std::size_t bi) {
    for (std::size_t bj = 0; bj < L.grid_cols(); ++bj) {
      const std::size_t b = (a * L.grid_rows() + bi) * L.grid_cols() + bj;
      const double sv = scale_value(fmt, t.scales[b]);
      const double s = sv * g;
      const bool zero = sv == 0.0;  // NOLINT
      for_segments(L, a, bi, bj, [&](std::size_t lo, std::size_t n) {
        for (std::size_t i = lo; i < lo + n; ++i) {
          const double q = format::decode(fmt.element, t.codes[i]);
          out[i] = std::isnan(s) ? std::numeric_limits<float>::quiet_NaN() : narrow(zero ? q * 0.0 : q * s);
        }
      });
    }
  });
}

}  // namespace lpemu::block
