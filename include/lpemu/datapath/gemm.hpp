// D = C + A·B under a Datapath, tiled over output blocks in parallel with oneTBB. Every output
// element is one dot() (same bits), so the result does not depend on the thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

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

namespace detail {
struct FastB;
}  // namespace detail

/// B's codes of at most 8 bits, [K×N] row-major, prepared once for many GEMMs under one datapath
/// (a weight matrix): checked and kept, and packed as the fast kernels read them, so each gemm()
/// on it skips packing B. Results are the bits gemm() gives on the codes.
class PreparedB {
 public:
  /// Writes the codes of B's columns j0..j0+count-1 to `out` as [count×K] row-major (B transposed,
  /// as a weight [N×K] is stored). Called from several threads at once, on disjoint columns.
  using Columns = std::function<void(std::size_t j0, std::size_t count, std::uint8_t* out)>;

  /// Checks and keeps `b` (ShapeError as gemm's); packs it when `pack` and a fast kernel applies.
  PreparedB(const Datapath& dp, std::size_t n, std::size_t k, std::vector<std::uint8_t> b, bool pack = true);
  /// As above, B's codes taken from `columns` in one pass: each block of 64 columns is written
  /// into a tile that stays in cache, then stored transposed into B's rows and packed from the tile.
  PreparedB(const Datapath& dp, std::size_t n, std::size_t k, const Columns& columns, bool pack = true);
  PreparedB(const PreparedB&) = delete;
  PreparedB& operator=(const PreparedB&) = delete;
  /// The datapath it was prepared for (a copy).
  const Datapath& datapath() const { return dp_; }
  /// Columns N.
  std::size_t n() const { return n_; }
  /// Rows K.
  std::size_t k() const { return k_; }
  /// True if B is held packed for the fast kernels.
  bool packed() const { return fast_ != nullptr; }
  /// Memory held, in bytes: the codes and, when packed, the packed operand.
  std::size_t bytes() const;
  /// Bytes packing B for `dp` would add to the codes (0 where no fast kernel applies).
  static std::size_t packed_bytes(const Datapath& dp, std::size_t n, std::size_t k);

 private:
  friend void gemm(std::size_t, std::span<const std::uint8_t>, const PreparedB&,
                   std::span<const std::uint32_t>, std::span<std::uint32_t>, const GemmScales&);
  Datapath dp_;
  std::size_t n_, k_;
  std::vector<std::uint8_t> kept_;           // the codes handed over, or
  std::unique_ptr<std::uint8_t[]> written_;  // the codes written from Columns
  std::span<const std::uint8_t> codes_;      // [K×N], in kept_ or written_
  std::shared_ptr<const detail::FastB> fast_;
};

/// D[M×N] = C + A[M×K]·B under b's datapath: the bits of gemm() on b's codes.
void gemm(std::size_t m, std::span<const std::uint8_t> a, const PreparedB& b,
          std::span<const std::uint32_t> c, std::span<std::uint32_t> d, const GemmScales& scales = {});

}  // namespace lpemu::datapath
