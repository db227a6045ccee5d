// The fast GEMM's per-element kernels (fast.cpp's element(i, j)): plain loops that the compiler
// vectorises, compiled once per SIMD target by Google Highway and chosen at run time, as the
// vector row kernel (fast_rows.cpp) is. Without a vector target the exact-alignment GEMM runs
// 2.7x slower (gemm_datapath_1thread/ideal/256 in bench/datapath_bench.cpp).
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "datapath/fast_element.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "datapath/fast_rows.hpp"

HWY_BEFORE_NAMESPACE();
namespace lpemu::datapath::detail {
namespace HWY_NAMESPACE {

// element_trunc (fast_rows.hpp), its loops vectorised by the compiler for this target.
bool ElementTrunc(const ElementParams& P, const std::int32_t* am, const std::int32_t* ae,
                  const std::int32_t* bm, const std::int32_t* be, std::size_t k, std::uint64_t c,
                  std::uint64_t& out) {
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
    // Step 4 (docs/tensor-core-model.md): E = max(e_i, e_c, E_floor); zero operands carry a hugely negative
    // exponent.
    int e_max = P.floor;
    for (std::size_t p = s0; p < s1; ++p) e_max = std::max(e_max, ae[p] + be[p]);
    int e_c = 0;
    if (!c_zero) {
      // Step 3 (docs/tensor-core-model.md): e_c = max(floor(log2|c|), addend_emin).
      e_c = std::max(st.q + static_cast<int>(std::bit_width(st.r)) - 1, dp.addend_emin);
      e_max = std::max(e_max, e_c);
    }
    const int q = e_max - P.F;
    // Step 5 (docs/tensor-core-model.md): each product truncated toward zero at 2^q (a lift, then one clamped
    // right shift); Step 6 (docs/tensor-core-model.md): exact integer sum.
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

// element_exact (fast_rows.hpp), its loop vectorised by the compiler for this target.
std::int64_t ElementExact(const std::int32_t* am, const std::int32_t* al, const std::int32_t* bm,
                          const std::int32_t* bl, std::size_t k, int lmin, std::int64_t& nz) {
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

}  // namespace HWY_NAMESPACE
}  // namespace lpemu::datapath::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpemu::datapath::detail {

HWY_EXPORT(ElementTrunc);
HWY_EXPORT(ElementExact);

bool element_trunc(const ElementParams& P, const std::int32_t* am, const std::int32_t* ae,
                   const std::int32_t* bm, const std::int32_t* be, std::size_t k, std::uint64_t c,
                   std::uint64_t& out) {
  return HWY_DYNAMIC_DISPATCH(ElementTrunc)(P, am, ae, bm, be, k, c, out);
}

std::int64_t element_exact(const std::int32_t* am, const std::int32_t* al, const std::int32_t* bm,
                           const std::int32_t* bl, std::size_t k, int lmin, std::int64_t& nz) {
  return HWY_DYNAMIC_DISPATCH(ElementExact)(am, al, bm, bl, k, lmin, nz);
}

}  // namespace lpemu::datapath::detail
#endif  // HWY_ONCE
