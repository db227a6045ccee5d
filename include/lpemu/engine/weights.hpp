// Weight matrices held in their stored precision: float32 values, or 16-bit bf16 / fp16 codes
// decoded exactly to float32 (the format layer's bulk decode) when a GEMM or a lookup needs them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "lpemu/engine/tensor.hpp"

namespace lpemu::engine {

/// How a weight matrix is held in memory.
enum class WeightStorage { fp32, bf16, fp16 };

/// The format name of a storage: "fp32", "bf16" or "fp16".
std::string_view to_string(WeightStorage s);

/// An immutable row-major weight matrix [rows, cols] in its stored precision; copies share the storage.
class WeightMatrix {
 public:
  /// An empty float32 matrix.
  WeightMatrix() = default;
  /// float32 storage of `m` (implicit: a float matrix is a weight as it is).
  WeightMatrix(RowMatrix m);
  /// float32 storage of the values of an Eigen expression.
  template <class D>
  WeightMatrix(const Eigen::MatrixBase<D>& m) : WeightMatrix(RowMatrix(m)) {}
  /// `values` (row-major [rows, cols]) held in `s`; throws Error if a value is not exactly one of s.
  static WeightMatrix stored_as(WeightStorage s, Eigen::Index rows, Eigen::Index cols,
                                std::span<const float> values);
  /// 16-bit storage `s` (bf16 or fp16) of row-major `codes`; throws ShapeError on a count mismatch.
  static WeightMatrix from_codes(WeightStorage s, Eigen::Index rows, Eigen::Index cols,
                                 std::vector<std::uint16_t> codes);

  /// Number of rows.
  Eigen::Index rows() const { return rows_; }
  /// Number of columns.
  Eigen::Index cols() const { return cols_; }
  /// Number of elements.
  Eigen::Index size() const { return rows_ * cols_; }
  /// The stored precision.
  WeightStorage storage() const { return storage_; }
  /// Bytes the storage holds: 4 per element for float32, 2 for bf16 / fp16.
  std::size_t bytes() const;
  /// True when both hold the same storage, shape and bits.
  bool same_bits(const WeightMatrix& other) const;
  /// True when both are views of one storage (one a copy of the other), so its bytes are held once.
  bool shares_storage(const WeightMatrix& other) const;

  /// The values as float32: the stored matrix itself for float32 storage (no copy), else the
  /// codes decoded into `buffer` (resized), which is returned.
  const RowMatrix& view(RowMatrix& buffer) const;
  /// Rows [row0, row0 + n) as float32 into `out` (n · cols values, row-major).
  void read_rows(Eigen::Index row0, Eigen::Index n, std::span<float> out) const;
  /// A float32 copy of the values.
  RowMatrix to_float() const;
  /// The 16-bit codes, row-major (empty for float32 storage).
  std::span<const std::uint16_t> codes() const;

 private:
  std::shared_ptr<const RowMatrix> f32_;                     ///< float32 storage (null when empty)
  std::shared_ptr<const std::vector<std::uint16_t>> codes_;  ///< 16-bit storage
  WeightStorage storage_ = WeightStorage::fp32;
  Eigen::Index rows_ = 0;
  Eigen::Index cols_ = 0;
};

}  // namespace lpemu::engine
