// What the fast GEMM (fast.cpp) shares with its vector row kernel (fast_rows.cpp): the
// accumulator's decoded state and its rounding between blocks, the kernel parameters and the
// R-row × 16-column tile the vector kernel computes.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "datapath/engine.hpp"

namespace lpemu::datapath::detail {

/// Alignment exponent of a zero operand: far below any finite one.
constexpr int kZeroExp = -(1 << 20);
/// Below this, a block's largest exponent sum comes from products with a zero operand only.
constexpr std::int32_t kAllZeroBelow = kZeroExp / 2;
/// The vector kernel keeps alignment exponents in 8-bit lanes, kExpGroup consecutive products of a
/// block per 32-bit lane, added with saturation: finite exponents lie in ±kExp8Max, so finite sums
/// are >= -80 and sums with a zero operand (kZeroExp8) saturate to <= -88.
constexpr int kExp8Max = 40;
/// Alignment exponent of a zero operand (and the padding) in 8-bit lanes.
constexpr std::int8_t kZeroExp8 = -128;
/// Below this, an 8-bit lane's largest exponent sum comes from products with a zero operand only.
constexpr int kAllZeroBelow8 = -84;
/// Products per 32-bit lane of 8-bit exponents; each block is padded to a multiple of it.
constexpr std::size_t kExpGroup = 4;
/// Columns of B per vector-kernel panel (one AVX-512 vector of int32, two AVX2, four SSE4/NEON).
constexpr std::size_t kPanel = 16;
/// Rows of A per tile of the vector kernel.
constexpr std::size_t kRowTile = 4;

/// Decodes an IEEE-style accumulator code from its fields (docs/tensor-core-model.md, step 3 exponent clamp).
inline Operand decode_acc(const format::Format& f, std::uint64_t code, int clamp) {
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

/// The running accumulator between blocks, kept decoded: ±r·2^q (zero when r == 0).
struct AccState {
  std::uint64_t r = 0;
  int q = 0;
  bool neg = false;
};

/// Rounds ±|s|·2^q (RZ or RNE at p fraction bits, subnormal quantum
/// 2^(emin − p)), leaving the result decoded; false where the general engine must decide.
inline bool round_state(const format::Format& f, int p, bool rne, std::int64_t s, int q, AccState& st) {
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

/// The accumulator code of a decoded state `st` kept at p fraction bits.
inline std::uint64_t encode_state(const format::Format& f, int p, const AccState& st) {
  if (st.r == 0) return 0;
  const std::uint64_t sign = st.neg ? f.sign_bit() : 0;
  const std::uint64_t hidden = std::uint64_t{1} << p;
  const int shift = f.mantissa_bits - p;
  if (st.r < hidden) return sign | (st.r << shift);
  return sign | (static_cast<std::uint64_t>(st.q + p + f.bias) << f.mantissa_bits) |
         ((st.r - hidden) << shift);
}

/// Parameters of the truncating kernels, set once per GEMM.
struct TruncParams {
  const Datapath* dp;
  std::size_t block;   // products per block
  int F;               // alignment fraction bits
  int floor;           // E_floor (INT_MIN / 2 when the datapath has none)
  int emax_common;     // largest exponent whose every normal significand is finite
  std::size_t block8;  // the vector kernel: `block` rounded up to a multiple of kExpGroup
};

/// Products below 2^22 lifted by 2^kLift stay below 2^52 (the per-element kernel's int64 sums).
constexpr int kLift = 30;

/// TruncParams and the per-element kernels' integer shifts.
struct ElementParams : TruncParams {
  int base_shift;    // int64 kernel: products lifted by 2^kLift
  int base_shift32;  // int32 kernel: products lifted by 2^lift32
  int lift32;
  bool use32;  // the int32 kernel is exact
};

/// One output element of a truncating datapath (docs/tensor-core-model.md, steps 1–8) from packed
/// significands and exponents; false where the general engine must decide (special values, an
/// all-zero block with zero c, or a rounding round_state defers). Best SIMD target of this machine
/// (fast_element.cpp).
bool element_trunc(const ElementParams& P, const std::int32_t* am, const std::int32_t* ae,
                   const std::int32_t* bm, const std::int32_t* be, std::size_t k, std::uint64_t c,
                   std::uint64_t& out);

/// ideal: Σ of exact products at the smallest possible product lsb (int64); `nz` = 0 when every
/// product is zero. Best SIMD target of this machine (fast_element.cpp).
std::int64_t element_exact(const std::int32_t* am, const std::int32_t* al, const std::int32_t* bm,
                           const std::int32_t* bl, std::size_t k, int lmin, std::int64_t& nz);

/// Position of product p in the vector kernel's 8-bit exponent layout (blocks padded to block8).
inline std::size_t exp8_index(const TruncParams& P, std::size_t p) {
  return p / P.block * P.block8 + p % P.block;
}

/// Arguments of the R-row kernel: rows av[r] (values as floats, [k]) and ae[r] (8-bit alignment
/// exponents at exp8_index) of A; one panel of B: values as floats, [k][16], and 8-bit exponents,
/// [k8 / kExpGroup][16][kExpGroup]; c, out and ok are [R][16]; ok is false where the general
/// engine must decide.
template <std::size_t R>
struct RowsArgs {
  const TruncParams* P;
  const float* av[R];
  const std::int8_t* ae[R];
  const float* bvk;
  const std::int8_t* bek;
  std::size_t k;
  std::uint64_t c[R][kPanel];
  std::uint64_t out[R][kPanel];
  bool ok[R][kPanel];
};

/// True if rows_trunc applies to datapath dp with F fraction bits and `block` products per block:
/// its float arithmetic is exact, the accumulator's values are floats and the exponents fit its
/// 8-bit lanes (see fast_rows.cpp).
bool rows_trunc_applies(const Datapath& dp, int F, std::size_t block);

/// R rows × 16 output columns of a truncating datapath (docs/tensor-core-model.md) on the best SIMD
/// target of this machine (Google Highway run-time dispatch; fast_rows.cpp); only where
/// rows_trunc_applies.
void rows_trunc(RowsArgs<kRowTile>& args);
/// One row × 16 output columns, as rows_trunc on a tile.
void rows_trunc(RowsArgs<1>& args);

}  // namespace lpemu::datapath::detail
