// Private to src/block: what the block layout, the scale rules and the quantize kernels share.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "lpemu/block/quantize.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::block::detail {

inline constexpr std::uint32_t kAbsMask = 0x7fffffffU;
inline constexpr std::uint32_t kInfBits = 0x7f800000U;

/// The bits of x.
inline std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }

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

/// One element's result: its value and (when asked for) its code.
struct ElemOut {
  float value;
  std::uint32_t code;
};

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

/// A block's amax (0 when flushed) and whether it holds a non-finite input.
struct BlockStats {
  double amax = 0;
  bool nonfinite = false;
};

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

/// The scale of a power-of-two rule; nullopt means "scale overflow → NaN block".
std::optional<Scale> pow2_rule_scale(const Ctx& c, double amax);
/// The amax of block (a, bi, bj) and whether it holds a non-finite input.
BlockStats block_stats(const Ctx& c, const float* in, std::size_t a, std::size_t bi, std::size_t bj);
/// The scale of block (a, bi, bj) under the format's rule.
Scale choose_scale(const Ctx& c, const float* in, std::size_t a, std::size_t bi, std::size_t bj,
                   const BlockStats& st);
/// One element through the generic path under scale s.
ElemOut generic_element(const Ctx& c, const Scale& s, float xin, std::uint64_t index, bool want_code);
/// Generic processing of one block: scale code, and values and/or codes.
void generic_block(const Ctx& c, const float* in, float* out, std::uint32_t* codes, std::uint32_t* scale_code,
                   std::size_t a, std::size_t bi, std::size_t bj);
/// Quantizes the whole tensor on a fast path if the format has one; false (nothing written) if not.
bool quantize_fast(const Ctx& c, std::span<const float> in, std::span<float> out);

}  // namespace lpemu::block::detail
