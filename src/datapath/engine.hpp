// Private pieces of the datapath engine shared by dot.cpp, gemm.cpp and exact.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lpemu/datapath/datapath.hpp"
#include "lpemu/datapath/dot.hpp"
#include "lpemu/format/format.hpp"

namespace lpemu::datapath::detail {

__extension__ typedef unsigned __int128 u128;
__extension__ typedef __int128 i128;

/// What kind of value a decoded operand is.
enum class Kind : std::uint8_t { finite, zero, nan, inf };

/// An operand as integers: value = ±mag·2^lsb; `e` is the exponent used for alignment
/// (the BFMA model: e(x) = max(floor(log2|x|), emin_in), not renormalised).
struct Operand {
  std::uint64_t mag = 0;
  std::int32_t lsb = 0;
  std::int32_t e = 0;
  Kind kind = Kind::zero;
  bool neg = false;
};

/// Decodes one code of `f`. Subnormals flush to ±0 when `flush`; `e` is clamped below at
/// max(f.emin, e_min_clamp) for floats (c uses the datapath's addend_emin instead of f.emin).
Operand decode_operand(const format::Format& f, std::uint64_t code, bool flush, int e_clamp);
/// decode_operand with the format's own emin as clamp.
Operand decode_operand(const format::Format& f, std::uint64_t code, bool flush);

/// format::require_code_fits for operand `what`[index], thrown as ShapeError (a bad operand tensor).
void require_operand_fits(const format::Format& f, std::uint64_t code, const char* what, std::size_t index);

/// d = c + Σ a[i]·b[i] on decoded operands (a and b of equal length). `c_code` is a code of
/// dp.output(). Scales (exponents and integer significands per scale block) may be empty.
std::uint64_t dot_decoded(const Datapath& dp, std::span<const Operand> a, std::span<const Operand> b,
                          std::uint64_t c_code, const BlockScales& scales, std::uint64_t index);

/// Ends one block: rounds ±|s|·2^qexp (plus c when `c_code` is finite and `add_c`, exactly) into
/// the accumulator as dp's block rounding does; `zero_neg` is the sign of an all-zero sum.
std::uint64_t finish_block(const Datapath& dp, i128 s, int qexp, bool zero_neg, std::uint64_t c_code,
                           bool add_c);

}  // namespace lpemu::datapath::detail
