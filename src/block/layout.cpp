// The block layout: how a tensor's shape is cut into blocks for each granularity.
#include <algorithm>
#include <string>

#include "lpemu/block/quantize.hpp"
#include "lpemu/error.hpp"

namespace lpemu::block {

BlockLayout make_layout(const BlockFormat& fmt, std::span<const std::size_t> shape) {
  if (shape.empty()) throw ShapeError("block quantize: the tensor shape is empty (rank 0)");
  BlockLayout L;
  L.shape.assign(shape.begin(), shape.end());
  const std::size_t rank = shape.size();
  auto prod = [&](std::size_t lo, std::size_t hi) {
    std::size_t p = 1;
    for (std::size_t i = lo; i < hi; ++i) p *= shape[i];
    return p;
  };
  switch (fmt.granularity) {
    case Granularity::block: {
      const long r = static_cast<long>(rank);
      const long ax = fmt.axis < 0 ? fmt.axis + r : fmt.axis;
      if (ax < 0 || ax >= r) {
        throw ShapeError("block format '" + fmt.name + "': axis " + std::to_string(fmt.axis) +
                         " is out of range for a tensor of rank " + std::to_string(rank));
      }
      const auto k = static_cast<std::size_t>(ax);
      L.outer = prod(0, k);
      L.rows = shape[k];
      L.cols = prod(k + 1, rank);
      L.block_rows = static_cast<std::size_t>(fmt.block_size);
      L.block_cols = 1;
      break;
    }
    case Granularity::tile:
      L.outer = rank > 2 ? prod(0, rank - 2) : 1;
      L.rows = rank >= 2 ? shape[rank - 2] : 1;
      L.cols = shape[rank - 1];
      L.block_rows = static_cast<std::size_t>(fmt.tile_rows);
      L.block_cols = static_cast<std::size_t>(fmt.tile_cols);
      break;
    case Granularity::per_tensor:
      L.outer = 1;
      L.rows = 1;
      L.cols = prod(0, rank);
      L.block_rows = 1;
      L.block_cols = std::max<std::size_t>(L.cols, 1);
      break;
    case Granularity::per_row:
      L.outer = 1;
      L.rows = prod(0, rank - 1);
      L.cols = shape[rank - 1];
      L.block_rows = 1;
      L.block_cols = std::max<std::size_t>(L.cols, 1);
      break;
    case Granularity::per_column:
      L.outer = 1;
      L.rows = prod(0, rank - 1);
      L.cols = shape[rank - 1];
      L.block_rows = std::max<std::size_t>(L.rows, 1);
      L.block_cols = 1;
      break;
  }
  return L;
}

}  // namespace lpemu::block
