// Fast GEMM kernels for common datapath shapes; each must give the same bits as dot_decoded
// (checked by tests/property/datapath: fast path vs block engine).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
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

/// B ([k×n] 8-bit codes) packed as fast_gemm reads it, made once for many GEMMs.
struct FastB;
/// Checks B's codes (ShapeError as gemm's) and packs them; null where fast_gemm would not read a
/// packed B. The datapath must be one fast_gemm_applicable accepts.
std::shared_ptr<const FastB> fast_prepare_b(const Datapath& dp, std::size_t n, std::size_t k,
                                            std::span<const std::uint8_t> b);
/// Writes B's codes ([k×n]) to `codes` from its columns (PreparedB::Columns), block by block in
/// parallel; when `pack`, also checks and packs them as fast_prepare_b does, from the block while it
/// is in cache (the datapath must then be one fast_gemm_applicable accepts). Null unless packed.
std::shared_ptr<const FastB> fast_prepare_b(
    const Datapath& dp, std::size_t n, std::size_t k,
    const std::function<void(std::size_t, std::size_t, std::uint8_t*)>& columns, std::uint8_t* codes,
    bool pack);
/// Bytes a packed B holds.
std::size_t fast_b_bytes(const FastB& b);
/// Bytes fast_prepare_b would allocate for a [k×n] B.
std::size_t fast_b_bytes(const Datapath& dp, std::size_t n, std::size_t k);
/// fast_gemm with B packed by fast_prepare_b from the same codes `b` under the same datapath.
void fast_gemm(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k,
               std::span<const std::uint8_t> a, std::span<const std::uint8_t> b, const FastB& packed,
               std::span<const std::uint32_t> c, std::span<std::uint32_t> d);

}  // namespace lpemu::datapath::detail
