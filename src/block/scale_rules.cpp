// The scale rules (ocp, ceil, even, amax_over_max, search): one scale per block from its amax.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "block/quantize_detail.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::block::detail {

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace lpemu::block::detail
