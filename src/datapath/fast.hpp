// Fast GEMM kernels for common datapath shapes; each must give the same bits as dot_decoded
// (checked by tests/property/datapath: fast path vs block engine).
#pragma once

#include <cstdint>
#include <span>

#include "datapath/engine.hpp"

namespace lpemu::datapath::detail {

/// True if fast_gemm handles this datapath (no scales, simple structure, small input formats).
bool fast_gemm_applicable(const Datapath& dp, bool no_scales);
/// D = C + A·B on decoded operands: a is [m×k] by rows, b is [n×k] (B transposed); c may be empty.
void fast_gemm(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k, std::span<const Operand> a,
               std::span<const Operand> b, std::span<const std::uint64_t> c, std::span<std::uint64_t> d);

}  // namespace lpemu::datapath::detail
