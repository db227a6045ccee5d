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

// Whole-row blocks (block_cols == cols), blocks k0..k1, each a contiguous run: calls
// run(k, lo, len, n) for runs of n ≤ kRun equal-length blocks starting at block k and element lo.
// Full blocks run on into the next outer index when no partial block lies between.
constexpr std::size_t kRun = 256;
constexpr std::size_t kSplit = std::size_t{1} << 16;  // elements per task within one block

template <class F>
void for_block_runs(const BlockLayout& L, std::size_t k0, std::size_t k1, F&& run) {
  const std::size_t gr = L.grid_rows();
  const std::size_t full_len = L.block_rows * L.cols;
  const std::size_t full_per_outer = L.rows / L.block_rows;  // full blocks per outer index
  for (std::size_t k = k0; k < k1;) {
    const std::size_t a = k / gr, bi = k % gr;
    const std::size_t lo = (a * L.rows + bi * L.block_rows) * L.cols;
    const std::size_t len = (std::min(L.rows, bi * L.block_rows + L.block_rows) - bi * L.block_rows) * L.cols;
    std::size_t end = k + 1;
    if (len == full_len) end = L.rows % L.block_rows == 0 ? k1 : a * gr + full_per_outer;
    const std::size_t n = std::min({end, k1, k + kRun}) - k;
    run(k, lo, len, n);
    k += n;
  }
}

// Whole-row blocks k0..k1 on the Highway kernels: each run's amax, then a parameter per block
// from param(amax bits) (kSkip: the block goes generic), then kernel(lo, len, n, params) on the
// run; skipped blocks go generic afterwards (they were not written, so `in` is intact even when it
// aliases `out`).
template <class P, class Param, class Kernel>
void contiguous_runs(const Ctx& c, const float* in, float* out, std::size_t k0, std::size_t k1, P kSkip,
                     Param&& param, Kernel&& kernel) {
  const std::size_t gr = c.L.grid_rows();
  std::uint32_t amax[kRun];
  P ps[kRun];
  for_block_runs(c.L, k0, k1, [&](std::size_t k, std::size_t lo, std::size_t len, std::size_t n) {
    simd_block_amax(in + lo, len, n, amax);
    bool any_skipped = false;
    for (std::size_t j = 0; j < n; ++j) {
      ps[j] = param(amax[j]);
      any_skipped = any_skipped || ps[j] == kSkip;  // NOLINT(clang-diagnostic-float-equal)
    }
    if (n == 1 && len > kSplit) {  // one large block (per-tensor scales): its elements in parallel
      tbb::parallel_for(
          tbb::blocked_range<std::size_t>(0, len, kSplit),
          [&](const tbb::blocked_range<std::size_t>& r) { kernel(lo + r.begin(), r.size(), 1, ps); });
    } else {
      kernel(lo, len, n, ps);
    }
    if (any_skipped) {
      for (std::size_t j = 0; j < n; ++j) {
        if (ps[j] == kSkip) generic_block(c, in, out, nullptr, nullptr, (k + j) / gr, (k + j) % gr, 0);
      }
    }
  });
}

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

// Blocks across rows (block_cols == 1) of block row (a, bi): one scale per column from the
// columns' amax. set(col, amax bits) prepares column col's scale, false where the column goes
// generic; row(base) quantises the row of L.cols elements at `base`. Generic columns are computed
// into a buffer first (in and out may alias), then the rows, then the patch.
template <class Set, class Row>
void across_rows(const Ctx& c, const float* in, float* out, std::size_t a, std::size_t bi, Set&& set,
                 Row&& row) {
  const BlockLayout& L = c.L;
  const std::size_t r0 = bi * L.block_rows, r1 = std::min(L.rows, r0 + L.block_rows);
  thread_local std::vector<std::uint32_t> amax;
  thread_local std::vector<std::size_t> slow;
  thread_local std::vector<float> tmp;
  amax.assign(L.cols, 0);
  for (std::size_t r = r0; r < r1; ++r) simd_row_amax(in + (a * L.rows + r) * L.cols, amax.data(), L.cols);
  slow.clear();
  for (std::size_t col = 0; col < L.cols; ++col) {
    if (!set(col, amax[col])) slow.push_back(col);
  }
  tmp.assign(slow.size() * (r1 - r0), 0.0F);
  for (std::size_t k = 0; k < slow.size(); ++k) {
    const BlockStats st = block_stats(c, in, a, bi, slow[k]);
    const Scale s = choose_scale(c, in, a, bi, slow[k], st);
    for (std::size_t r = r0; r < r1; ++r) {
      const std::size_t i = (a * L.rows + r) * L.cols + slow[k];
      tmp[k * (r1 - r0) + (r - r0)] = generic_element(c, s, in[i], i, false).value;
    }
  }
  for (std::size_t r = r0; r < r1; ++r) row((a * L.rows + r) * L.cols);
  for (std::size_t k = 0; k < slow.size(); ++k) {
    for (std::size_t r = r0; r < r1; ++r)
      out[(a * L.rows + r) * L.cols + slow[k]] = tmp[k * (r1 - r0) + (r - r0)];
  }
}

// Blocks of any other shape in block row (a, bi), one at a time: param(amax bits) gives the block's
// parameter (kSkip: generic), segment(lo, n, param) quantises each contiguous run of the block.
template <class P, class Param, class Segment>
void each_block(const Ctx& c, const float* in, float* out, std::size_t a, std::size_t bi, P kSkip,
                Param&& param, Segment&& segment) {
  for (std::size_t bj = 0; bj < c.L.grid_cols(); ++bj) {
    const P q = param(block_amax_bits(c.L, in, a, bi, bj));
    if (q == kSkip) {
      generic_block(c, in, out, nullptr, nullptr, a, bi, bj);
      continue;
    }
    for_segments(c.L, a, bi, bj, [&](std::size_t lo, std::size_t n) { segment(lo, n, q); });
  }
}

// Runs the three layouts: whole-row blocks (contiguous runs, in parallel over blocks), blocks
// across rows, and other blocks (in parallel over block rows).
template <class P, class Param, class Kernel, class Set, class Row>
void run_layouts(const Ctx& c, const float* in, float* out, P kSkip, Param&& param, Kernel&& kernel,
                 Set&& set, Row&& row) {
  const BlockLayout& L = c.L;
  if (L.block_cols == L.cols) {
    const std::size_t n = L.outer * L.grid_rows();
    const std::size_t grain =
        std::max<std::size_t>(1, (std::size_t{1} << 15) / std::max<std::size_t>(1, L.block_rows * L.cols));
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, grain),
                      [&](const tbb::blocked_range<std::size_t>& r) {
                        contiguous_runs(c, in, out, r.begin(), r.end(), kSkip, param, kernel);
                      });
    return;
  }
  for_block_rows(L, [&](std::size_t a, std::size_t bi) {
    if (L.block_cols == 1 && L.cols > 1) {
      across_rows(c, in, out, a, bi, set, row);
    } else {
      each_block(c, in, out, a, bi, kSkip, param,
                 [&](std::size_t lo, std::size_t n, P q) { kernel(lo, n, 1, &q); });
    }
  });
}

// ---- non-power-of-two scales -----------------------------------------------------------------

bool fast_scaled_eligible(const Ctx& c) {
  const BlockFormat& f = c.f;
  const format::Format& e = f.element;
  const bool float_ok = e.kind == format::Kind::floating && e.is_signed && e.has_zero &&
                        e.mantissa_bits <= 22 && format::fits_in_float(e);
  const bool int_ok =
      e.kind == format::Kind::integer && e.bits <= 24 && e.fraction_bits <= 90 && e.fraction_bits >= -90;
  return (float_ok || int_ok) && !f.scale_is_pow2 && f.rule == ScaleRule::amax_over_max &&
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
  p.maxneg = e.kind == format::Kind::integer ? -e.lowest : e.max_finite;  // unsigned integers: 0
  p.mode = c.eopts.rounding;
  p.seed = c.eopts.seed;
  p.sr_bits = c.eopts.sr_bits;
  return p;
}

// Whether amax_over_max's scale can be rounded here: a floating scale format with a zero that fits
// float32, rounded to nearest even (the generic rule goes through the scalar codec).
bool fast_scale_eligible(const Ctx& c) {
  const format::Format& s = c.f.scale;
  return s.kind == format::Kind::floating && s.has_zero && format::fits_in_float(s) &&
         c.sopts.rounding == RoundingMode::nearest_even;
}

// The block scale S of amax_over_max for amax bits `ab`, or 0 where the block goes generic
// (non-finite amax, a NaN or zero scale, or results that could pass FLT_MAX). An all-zero block
// gets S = 1: its results are its zeros under the +0 rule whatever the scale, as on the generic
// path (a zero scale there). With
// `rne_scale` the scale is amax / (max_elem · g) rounded by rne_on_grid<double> on the scale
// format's grid: what the codec gives under nearest_even (IEEE 754-2019 §4.3), with overflow
// (a rounded value beyond max_finite) as in choose_scale: a NaN block under scale_overflow = nan
// where the scale format has NaN, else max_finite. Without it, choose_scale's own rule.
double fast_scale(const Ctx& c, bool rne_scale, std::uint32_t ab) {
  if (ab >= kInfBits) return 0.0;
  if (ab == 0) return 1.0;
  const double amax = static_cast<double>(std::bit_cast<float>(ab));
  double S = 0.0;
  if (rne_scale) {
    const format::Format& sf = c.f.scale;
    const double v = amax / (c.max_elem * c.g);
    double r = rne_on_grid<double>(v, sf.emin, sf.mantissa_bits, sf.subnormals, false, 0, false,
                                   std::numeric_limits<double>::infinity());
    if (r > sf.max_finite) {
      if (c.f.scale_overflow == ScaleOverflow::nan && sf.has_nan()) return 0.0;
      r = sf.max_finite;
    }
    S = r * c.g;
  } else {
    BlockStats st;
    st.amax = amax;
    const Scale s = choose_scale(c, nullptr, 0, 0, 0, st);  // amax_over_max reads only st.amax
    if (s.kind != Scale::normal) return 0.0;
    S = s.value;
  }
  return S > 0.0 && c.max_elem * S <= static_cast<double>(std::numeric_limits<float>::max()) ? S : 0.0;
}

}  // namespace

bool quantize_fast(const Ctx& c, std::span<const float> in, std::span<float> out) {
  const std::size_t cols = c.L.cols;
  if (fast_eligible(c)) {
    const Fast p = make_fast(c);
    const RoundingMode mode = c.eopts.rounding;
    thread_local std::vector<float> inv, scl;
    run_layouts(
        c, in.data(), out.data(), kSkipBlock,
        [&](std::uint32_t ab) {
          const auto e = fast_exponent(c, ab);
          return e ? *e : kSkipBlock;
        },
        [&](std::size_t lo, std::size_t len, std::size_t n, const std::int32_t* exps) {
          simd_block_quantize(p, mode, in.data() + lo, out.data() + lo, len, n, exps, lo);
        },
        [&](std::size_t col, std::uint32_t ab) {
          const auto e = fast_exponent(c, ab);
          inv.resize(cols);
          scl.resize(cols);
          inv[col] = e ? pow2f(-*e) : 1.0F;
          scl[col] = e ? pow2f(*e) : 1.0F;
          return e.has_value();
        },
        [&](std::size_t base) {
          simd_row_quantize(p, mode, in.data() + base, out.data() + base, cols, base, inv.data(), scl.data());
        });
    return true;
  }
  if (fast_scaled_eligible(c)) {
    const FastD p = make_fast_d(c);
    const bool rne_scale = fast_scale_eligible(c);
    thread_local std::vector<double> sc;
    run_layouts(
        c, in.data(), out.data(), 0.0, [&](std::uint32_t ab) { return fast_scale(c, rne_scale, ab); },
        [&](std::size_t lo, std::size_t len, std::size_t n, const double* scales) {
          simd_scaled_quantize(p, in.data() + lo, out.data() + lo, len, n, scales, lo);
        },
        [&](std::size_t col, std::uint32_t ab) {
          const double s = fast_scale(c, rne_scale, ab);
          sc.resize(cols);
          sc[col] = s > 0.0 ? s : 1.0;
          return s > 0.0;
        },
        [&](std::size_t base) {
          simd_scaled_row_quantize(p, in.data() + base, out.data() + base, cols, sc.data(), base);
        });
    return true;
  }
  return false;
}

}  // namespace lpemu::block::detail
