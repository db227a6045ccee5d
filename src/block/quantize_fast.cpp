// The fast block kernels (quantize only); blocks they cannot take go to the generic kernel.
//  * power-of-two scales 2^s with s in [-126, 126] and element formats that fit float32 with a
//    smallest step ≥ 2^-90: y = x·2^-s in float (exact except below 2^-126, where the step is so
//    coarse that only y's sign and non-zeroness matter, which are kept), rounded on its bits by the
//    element format's fast kernel (format::detail::fast_round, with a saturating value step here;
//    nearest_even adds and subtracts 2^(qe+23) instead), times 2^s; the Highway kernels in
//    quantize_simd.cpp take these steps on whole vectors, this file chooses the scales;
//  * non-power-of-two scales under nearest_even: y = x / S in double, rounded on its bits, times S.
#include <algorithm>
#include <bit>
#include <cmath>
#include <optional>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "block/quantize_detail.hpp"
#include "block/quantize_fast.hpp"
#include "format/codec_detail.hpp"

namespace lpemu::block::detail {

namespace {

using format::RoundingMode;

// ---- fast path -------------------------------------------------------------------------------

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
  if (p.is_int == 0) p.element = format::detail::make_fast(c.f.element, c.eopts);
  p.int_qe = -c.f.element.fraction_bits;
  p.positive_zero = (c.f.signed_zero == SignedZero::positive || !c.f.element.has_negative_zero()) ? 1U : 0U;
  p.maxf = static_cast<float>(c.max_elem);
  return p;
}

std::optional<int> fast_exponent(const Ctx& c, std::uint32_t ab);

// Whole-row blocks (block_cols == cols), blocks k0..k1, each a contiguous run, on the Highway
// kernels: runs of equal-length blocks (at most kRun at a time) get their amax, then their
// exponents here, then their elements; blocks the fast path cannot take go generic afterwards
// (they were not written, so `in` is intact even when it aliases `out`).
void fast_contiguous(const Ctx& c, const Fast& p, const float* in, float* out, std::size_t k0,
                     std::size_t k1) {
  constexpr std::size_t kRun = 256;
  const BlockLayout& L = c.L;
  const std::size_t gr = L.grid_rows();
  const std::size_t full_len = L.block_rows * L.cols;
  const std::size_t full_per_outer = L.rows / L.block_rows;  // full blocks per outer index
  std::uint32_t amax[kRun];
  std::int32_t exps[kRun];
  for (std::size_t k = k0; k < k1;) {
    const std::size_t a = k / gr, bi = k % gr;
    const std::size_t lo = (a * L.rows + bi * L.block_rows) * L.cols;
    const std::size_t len = (std::min(L.rows, bi * L.block_rows + L.block_rows) - bi * L.block_rows) * L.cols;
    // Full blocks run on into the next outer index when no partial block lies between.
    std::size_t end = k + 1;
    if (len == full_len) end = L.rows % L.block_rows == 0 ? k1 : a * gr + full_per_outer;
    const std::size_t n = std::min({end, k1, k + kRun}) - k;
    simd_block_amax(in + lo, len, n, amax);
    bool any_skipped = false;
    for (std::size_t j = 0; j < n; ++j) {
      const auto e = fast_exponent(c, amax[j]);
      exps[j] = e ? *e : kSkipBlock;
      any_skipped = any_skipped || !e;
    }
    simd_block_quantize(p, c.eopts.rounding, in + lo, out + lo, len, n, exps, lo);
    if (any_skipped) {
      for (std::size_t j = 0; j < n; ++j) {
        if (exps[j] == kSkipBlock) generic_block(c, in, out, nullptr, nullptr, (k + j) / gr, (k + j) % gr, 0);
      }
    }
    k += n;
  }
}

// Non-power-of-two scales (NVFP4, FP32 scales) under nearest_even: y = x / S in double (the
// generic path's quotient), rounded by rne_on_grid<double>, times S.
struct FastD {
  std::int32_t m, emin, int_qe;
  bool is_int, subnormals, positive_zero;
  double maxd;
};

LPEMU_CLONES void fast_scaled_segment(const FastD& p, const float* in, float* out, std::size_t n,
                                      double scale) {
  const FastD lp = p;
  for (std::size_t i = 0; i < n; ++i) {
    const double y = static_cast<double>(in[i]) / scale;
    const double q =
        rne_on_grid<double>(y, lp.emin, lp.m, lp.subnormals, lp.is_int, lp.int_qe, lp.positive_zero, lp.maxd);
    out[i] = narrow(q * scale);
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

// The amax bits (|x| as float32 bits) of block (a, bi, bj).
std::uint32_t block_amax_bits(const BlockLayout& L, const float* in, std::size_t a, std::size_t bi,
                              std::size_t bj) {
  std::uint32_t ab = 0;
  for_segments(L, a, bi, bj, [&](std::size_t lo, std::size_t n) {
    std::uint32_t m = 0;
    simd_block_amax(in + lo, n, 1, &m);
    ab = std::max(ab, m);
  });
  return ab;
}

float pow2f(int e) { return std::bit_cast<float>(static_cast<std::uint32_t>(e + 127) << 23); }

void fast_block_row(const Ctx& c, const Fast& p, const float* in, float* out, std::size_t a, std::size_t bi,
                    std::vector<std::uint32_t>& amax, std::vector<float>& inv, std::vector<float>& scl,
                    std::vector<float>& tmp) {
  const BlockLayout& L = c.L;
  const std::size_t r0 = bi * L.block_rows, r1 = std::min(L.rows, r0 + L.block_rows);
  if (L.block_cols == 1 && L.cols > 1) {
    // Blocks run across rows: one scale per column, rows processed as contiguous vectors.
    amax.assign(L.cols, 0);
    for (std::size_t r = r0; r < r1; ++r) simd_row_amax(in + (a * L.rows + r) * L.cols, amax.data(), L.cols);
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
      simd_row_quantize(p, c.eopts.rounding, in + base, out + base, L.cols, base, inv.data(), scl.data());
    }
    for (std::size_t k = 0; k < slow.size(); ++k) {
      for (std::size_t r = r0; r < r1; ++r)
        out[(a * L.rows + r) * L.cols + slow[k]] = tmp[k * (r1 - r0) + (r - r0)];
    }
    return;
  }
  for (std::size_t bj = 0; bj < L.grid_cols(); ++bj) {
    const auto e = fast_exponent(c, block_amax_bits(L, in, a, bi, bj));
    if (!e) {
      generic_block(c, in, out, nullptr, nullptr, a, bi, bj);
      continue;
    }
    for_segments(L, a, bi, bj, [&](std::size_t lo, std::size_t n) {
      simd_block_quantize(p, c.eopts.rounding, in + lo, out + lo, n, 1, &*e, lo);
    });
  }
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
  p.is_int = e.kind == format::Kind::integer;
  p.int_qe = -e.fraction_bits;
  p.subnormals = e.subnormals;
  p.positive_zero = c.f.signed_zero == SignedZero::positive || !e.has_negative_zero();
  p.maxd = e.max_finite;
  return p;
}

// One block on the non-power-of-two fast path; blocks with non-finite inputs or a NaN/zero scale
// go generic.
void fast_scaled_block(const Ctx& c, const FastD& p, const float* in, float* out, std::size_t a,
                       std::size_t bi, std::size_t bj) {
  const std::uint32_t ab = block_amax_bits(c.L, in, a, bi, bj);
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

}  // namespace

bool quantize_fast(const Ctx& c, std::span<const float> in, std::span<float> out) {
  if (fast_eligible(c)) {
    const Fast p = make_fast(c);
    if (c.L.block_cols == c.L.cols) {
      const std::size_t n = c.L.outer * c.L.grid_rows();
      const std::size_t grain = std::max<std::size_t>(
          1, (std::size_t{1} << 15) / std::max<std::size_t>(1, c.L.block_rows * c.L.cols));
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, grain),
                        [&](const tbb::blocked_range<std::size_t>& r) {
                          fast_contiguous(c, p, in.data(), out.data(), r.begin(), r.end());
                        });
      return true;
    }
    for_block_rows(c.L, [&](std::size_t a, std::size_t bi) {
      thread_local std::vector<std::uint32_t> amax;
      thread_local std::vector<float> inv, scl, tmp;
      fast_block_row(c, p, in.data(), out.data(), a, bi, amax, inv, scl, tmp);
    });
    return true;
  }
  if (fast_scaled_eligible(c)) {
    const FastD p = make_fast_d(c);
    for_block_rows(c.L, [&](std::size_t a, std::size_t bi) {
      for (std::size_t bj = 0; bj < c.L.grid_cols(); ++bj)
        fast_scaled_block(c, p, in.data(), out.data(), a, bi, bj);
    });
    return true;
  }
  return false;
}

}  // namespace lpemu::block::detail
