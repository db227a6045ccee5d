// D = C + A·B under a Datapath, tiled over output blocks in parallel with oneTBB. Every output
// element is one dot() (same bits), so the result does not depend on the thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "lpemu/datapath/datapath.hpp"
#include "lpemu/datapath/dot.hpp"

namespace lpemu::datapath {

/// Per-block scales of a GEMM: A's scales are [M × ceil(K/scale_block)] row-major, B's are
/// [ceil(K/scale_block) × N] row-major; the optional significands (as in BlockScales) have the same
/// layouts. Empty spans mean no scaling.
struct GemmScales {
  std::span<const std::int32_t> a;
  std::span<const std::int32_t> b;
  std::span<const std::uint32_t> a_significand = {};
  std::span<const std::uint32_t> b_significand = {};
};

/// D[M×N] = C + A[M×K]·B[K×N] (row-major codes); C may be empty (all +0). Output element (i, j)
/// uses stochastic stream index i·N + j. Throws ShapeError on size mismatches.
void gemm(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k, std::span<const std::uint64_t> a,
          std::span<const std::uint64_t> b, std::span<const std::uint64_t> c, std::span<std::uint64_t> d,
          const GemmScales& scales = {});

/// As gemm(), for codes of at most 8 bits (inputs) and at most 32 bits (C and D).
void gemm(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k, std::span<const std::uint8_t> a,
          std::span<const std::uint8_t> b, std::span<const std::uint32_t> c, std::span<std::uint32_t> d,
          const GemmScales& scales = {});

}  // namespace lpemu::datapath
