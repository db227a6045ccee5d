// Fast GEMM kernels for common datapath shapes; each must give the same bits as dot_decoded
// (checked by tests/property/datapath: fast path vs block engine).
#pragma once

#include <cstdint>
#include <span>

#include "datapath/engine.hpp"

namespace lpemu::datapath::detail {

/// True if fast_gemm handles this datapath (no scales, simple structure, small input formats).
bool fast_gemm_applicable(const Datapath& dp, bool no_scales);
/// D = C + A·B on codes as gemm takes them: a is [m×k], b is [k×n], both by rows; c may be empty.
/// Checks every code of A and B (ShapeError as gemm's); C's codes must be checked already.
void fast_gemm(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k,
               std::span<const std::uint64_t> a, std::span<const std::uint64_t> b,
               std::span<const std::uint64_t> c, std::span<std::uint64_t> d);
/// As above for 8-bit input codes and 32-bit accumulator codes (gemm's compact overload).
void fast_gemm(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k,
               std::span<const std::uint8_t> a, std::span<const std::uint8_t> b,
               std::span<const std::uint32_t> c, std::span<std::uint32_t> d);

}  // namespace lpemu::datapath::detail
