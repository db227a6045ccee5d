// Block quantisation: fake-quantisation (float in, representable float out), encoding to codes +
// scales, and decoding. Blocks are independent and processed in parallel with oneTBB;
// stochastic rounding draws element i's bits from (seed, flat index i), so results are
// bit-identical for every thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lpemu/block/block_format.hpp"

namespace lpemu::block {

/// How a tensor of `shape` is cut into blocks: a view [outer, rows, cols] with blocks of
/// block_rows × block_cols over (rows, cols), ordered row-major over (outer, block row, block col).
struct BlockLayout {
  std::vector<std::size_t> shape;
  std::size_t outer = 1, rows = 1, cols = 1;
  std::size_t block_rows = 1, block_cols = 1;

  /// Number of block rows per outer index.
  std::size_t grid_rows() const { return (rows + block_rows - 1) / block_rows; }
  /// Number of block columns.
  std::size_t grid_cols() const { return (cols + block_cols - 1) / block_cols; }
  /// Total number of blocks (= number of scales).
  std::size_t block_count() const { return outer * grid_rows() * grid_cols(); }
  /// Total number of elements.
  std::size_t element_count() const { return outer * rows * cols; }
};

/// The layout `fmt` gives a tensor of `shape`; throws ShapeError for an empty shape or a bad axis.
BlockLayout make_layout(const BlockFormat& fmt, std::span<const std::size_t> shape);

/// A block-encoded tensor: element codes in row-major tensor order (one per element, no padding),
/// scale codes in block order, and the FP32 tensor scale (1 when the format has none).
/// Scale codes: the scale format's code, or for "pow2" the exponent as a two's-complement int32
/// (kPow2NanCode for a NaN block).
struct BlockTensor {
  std::string format_name;
  BlockLayout layout;
  std::vector<std::uint32_t> codes;
  std::vector<std::uint32_t> scales;
  float tensor_scale = 1.0F;
};

/// Scale code of a NaN block for "pow2" scales.
inline constexpr std::uint32_t kPow2NanCode = 0x80000000U;

/// Fake-quantises `in` (row-major, `shape`) into `out`; `in` and `out` may alias exactly.
void quantize(const BlockFormat& fmt, std::span<const float> in, std::span<float> out,
              std::span<const std::size_t> shape);
/// Encodes `in` (row-major, `shape`) to codes and scales; element formats of at most 32 bits.
BlockTensor encode(const BlockFormat& fmt, std::span<const float> in, std::span<const std::size_t> shape);
/// Decodes a block tensor into `out` (its element count); decode(encode(x)) == quantize(x).
void decode(const BlockFormat& fmt, const BlockTensor& t, std::span<float> out);
/// The value of scale code `code` of fmt (without the tensor scale); NaN for a NaN scale.
double scale_value(const BlockFormat& fmt, std::uint32_t code);

namespace detail {
/// quantize through the scalar generic path only (tests compare it with the fast kernels).
void quantize_generic(const BlockFormat& fmt, std::span<const float> in, std::span<float> out,
                      std::span<const std::size_t> shape);
}  // namespace detail

}  // namespace lpemu::block
