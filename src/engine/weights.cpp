#include "lpemu/engine/weights.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"

namespace lpemu::engine {
namespace {

// The storage names are the element formats' registry names.
constexpr detail::EnumName<WeightStorage> kWeightStorageNames[] = {
    {"fp32", WeightStorage::fp32}, {"bf16", WeightStorage::bf16}, {"fp16", WeightStorage::fp16}};

const format::Format& format_of(WeightStorage s) { return format::Registry::builtin().get(to_string(s)); }

}  // namespace

std::string_view to_string(WeightStorage s) { return detail::enum_name(kWeightStorageNames, s); }

WeightMatrix::WeightMatrix(RowMatrix m)
    : f32_(std::make_shared<const RowMatrix>(std::move(m))), rows_(f32_->rows()), cols_(f32_->cols()) {}

WeightMatrix WeightMatrix::stored_as(WeightStorage s, Eigen::Index rows, Eigen::Index cols,
                                     std::span<const float> values) {
  const std::size_t n = static_cast<std::size_t>(rows * cols);
  if (rows < 0 || cols < 0 || values.size() != n) {
    throw ShapeError("weight matrix [" + std::to_string(rows) + ", " + std::to_string(cols) +
                     "]: " + std::to_string(values.size()) + " values");
  }
  if (s == WeightStorage::fp32)
    return WeightMatrix(RowMatrix(Eigen::Map<const RowMatrix>(values.data(), rows, cols)));
  const format::Format& f = format_of(s);
  auto codes = std::make_shared<std::vector<std::uint16_t>>(n);
  format::encode(f, values, std::span<std::uint16_t>(*codes));
  // Decode back in chunks: the stored bits must give back every value's bits.
  constexpr std::size_t kChunk = std::size_t{1} << 16;
  std::vector<float> back(std::min(n, kChunk));
  for (std::size_t lo = 0; lo < n; lo += kChunk) {
    const std::size_t len = std::min(kChunk, n - lo);
    format::decode(f, std::span<const std::uint16_t>(codes->data() + lo, len),
                   std::span<float>(back.data(), len));
    if (std::memcmp(back.data(), values.data() + lo, len * sizeof(float)) != 0)
      throw Error("weight matrix: a value is not exactly a " + std::string(to_string(s)) + " value");
  }
  WeightMatrix w;
  w.codes_ = std::move(codes);
  w.storage_ = s;
  w.rows_ = rows;
  w.cols_ = cols;
  return w;
}

WeightMatrix WeightMatrix::from_codes(WeightStorage s, Eigen::Index rows, Eigen::Index cols,
                                      std::vector<std::uint16_t> codes) {
  if (s == WeightStorage::fp32 || rows < 0 || cols < 0 ||
      codes.size() != static_cast<std::size_t>(rows * cols)) {
    throw ShapeError("weight matrix [" + std::to_string(rows) + ", " + std::to_string(cols) +
                     "]: " + std::to_string(codes.size()) + " " + std::string(to_string(s)) + " codes");
  }
  WeightMatrix w;
  w.codes_ = std::make_shared<const std::vector<std::uint16_t>>(std::move(codes));
  w.storage_ = s;
  w.rows_ = rows;
  w.cols_ = cols;
  return w;
}

std::size_t WeightMatrix::bytes() const {
  return static_cast<std::size_t>(size()) *
         (storage_ == WeightStorage::fp32 ? sizeof(float) : sizeof(std::uint16_t));
}

bool WeightMatrix::same_bits(const WeightMatrix& other) const {
  if (storage_ != other.storage_ || rows_ != other.rows_ || cols_ != other.cols_) return false;
  if (storage_ != WeightStorage::fp32) return *codes_ == *other.codes_;
  if (size() == 0) return true;
  return std::memcmp(f32_->data(), other.f32_->data(), bytes()) == 0;
}

bool WeightMatrix::shares_storage(const WeightMatrix& other) const {
  return size() != 0 && (storage_ == WeightStorage::fp32 ? f32_ == other.f32_ : codes_ == other.codes_);
}

const RowMatrix& WeightMatrix::view(RowMatrix& buffer) const {
  if (storage_ == WeightStorage::fp32) {
    if (f32_) return *f32_;
    buffer.resize(0, 0);
    return buffer;
  }
  buffer.resize(rows_, cols_);
  format::decode(format_of(storage_), std::span<const std::uint16_t>(*codes_),
                 std::span<float>(buffer.data(), static_cast<std::size_t>(buffer.size())));
  return buffer;
}

void WeightMatrix::read_rows(Eigen::Index row0, Eigen::Index n, std::span<float> out) const {
  if (row0 < 0 || n < 0 || row0 + n > rows_ || out.size() != static_cast<std::size_t>(n * cols_)) {
    throw ShapeError("weight matrix [" + std::to_string(rows_) + ", " + std::to_string(cols_) + "]: rows " +
                     std::to_string(row0) + "+" + std::to_string(n) + " into " + std::to_string(out.size()) +
                     " values");
  }
  const std::size_t lo = static_cast<std::size_t>(row0 * cols_);
  if (storage_ == WeightStorage::fp32) {
    if (!out.empty()) std::memcpy(out.data(), f32_->data() + lo, out.size_bytes());
    return;
  }
  format::decode(format_of(storage_), std::span<const std::uint16_t>(codes_->data() + lo, out.size()), out);
}

std::span<const std::uint16_t> WeightMatrix::codes() const {
  return codes_ ? std::span<const std::uint16_t>(*codes_) : std::span<const std::uint16_t>();
}

RowMatrix WeightMatrix::to_float() const {
  if (storage_ == WeightStorage::fp32) return f32_ ? *f32_ : RowMatrix();
  RowMatrix buffer;
  view(buffer);
  return buffer;
}

}  // namespace lpemu::engine
