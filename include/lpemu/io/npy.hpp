// NumPy .npy files (format version 1.0/2.0/3.0), read and written in streaming fashion so that
// arrays larger than memory can pass through. Only little-endian numeric dtypes, C order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "lpemu/io/output.hpp"

namespace lpemu::io {

/// Header of an .npy file.
struct NpyHeader {
  std::string dtype;               ///< NumPy descr, e.g. "<f4", "|u1", "<u2"
  std::vector<std::size_t> shape;  ///< C-order shape
  std::size_t data_offset = 0;     ///< byte offset of the data

  /// Number of elements (product of the shape).
  std::size_t count() const;
  /// Bytes per element of dtype.
  std::size_t item_size() const;
};

/// Reads and strictly validates the header (keys, dtype, shape overflow, and on a seekable stream
/// the declared data size against the bytes present); `name` is used in errors. Leaves the stream
/// at the data.
NpyHeader read_npy_header(std::istream& in, const std::string& name);
/// Writes a version-1.0 header padded to 64 bytes (header_length field padded so that a later
/// rewrite with a different shape of up to 20 digits per dimension fits in place).
void write_npy_header(std::ostream& out, const std::string& dtype, const std::vector<std::size_t>& shape);
/// The .npy dtype for unsigned codes of `bytes` bytes ("|u1", "<u2", "<u4", "<u8").
std::string npy_unsigned_dtype(std::size_t bytes);

/// Reads a whole float32 or float64 .npy array as float (float64 rounds to nearest); throws IoError.
std::vector<float> read_npy_floats(const std::filesystem::path& file, std::vector<std::size_t>& shape);
/// Reads a whole integer .npy array (any little-endian int/uint dtype) as int64; throws IoError.
std::vector<std::int64_t> read_npy_ints(const std::filesystem::path& file, std::vector<std::size_t>& shape);
/// Writes a float32 .npy array atomically (io/output.hpp) under `policy`.
void write_npy_floats(const std::filesystem::path& file, const std::vector<std::size_t>& shape,
                      const float* data, const OutputPolicy& policy = {});

}  // namespace lpemu::io
