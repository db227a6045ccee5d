// Hugging Face safetensors files: an 8-byte little-endian header length, a JSON header naming
// each tensor's dtype, shape and byte range, then the raw little-endian data
// (https://github.com/huggingface/safetensors, "Format").
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace lpemu::io {

/// One tensor's entry in a safetensors header.
struct SafetensorsEntry {
  std::string dtype;                 ///< safetensors dtype name: "F32", "F16", "BF16", "I64", ...
  std::vector<std::size_t> shape;    ///< C-order shape
  std::uint64_t begin = 0, end = 0;  ///< byte range relative to the start of the data section
};

/// An opened safetensors file: its parsed, validated header.
class SafetensorsFile {
 public:
  /// Reads and validates the header; throws IoError naming the file and the entry at fault.
  static SafetensorsFile open(const std::filesystem::path& file);

  /// The file's path.
  const std::filesystem::path& path() const { return path_; }
  /// Tensor entries by name (the "__metadata__" entry is left out).
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  /// True if the file holds tensor `name`.
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  /// The entry of `name`; throws IoError if absent.
  const SafetensorsEntry& entry(const std::string& name) const;
  /// The raw little-endian bytes of tensor `name` (callers decode per dtype); throws IoError.
  std::vector<std::uint8_t> read_bytes(const std::string& name) const;

 private:
  std::filesystem::path path_;
  std::uint64_t data_offset_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
};

/// Bytes per element of a safetensors dtype name, or 0 if unknown.
std::size_t safetensors_dtype_size(const std::string& dtype);

}  // namespace lpemu::io
