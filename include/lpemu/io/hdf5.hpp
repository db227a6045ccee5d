// HDF5 files without HDF5 types in the interface: tensors, attributes and groups by path.
// Every error names the file and the object at fault. Used by every layer's loaders.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "lpemu/io/output.hpp"

namespace lpemu::io {

/// A dense row-major tensor of 16-bit float codes.
struct Codes16 {
  std::vector<std::size_t> shape;
  std::vector<std::uint16_t> codes;
  std::string kind;  ///< "bf16" or "fp16"
};

/// A dense row-major float tensor.
struct Tensor {
  std::vector<std::size_t> shape;
  std::vector<float> data;

  /// Number of elements implied by the shape.
  std::size_t count() const;
};

/// An HDF5 dataset named on the command line as `FILE.h5:/path/to/dataset`.
struct DatasetRef {
  std::filesystem::path file;
  std::string dataset;
};

/// Splits `FILE.h5:/path` (also .hdf5 / .he5); nullopt if `text` does not name a dataset.
std::optional<DatasetRef> parse_dataset_ref(const std::string& text);

/// An open HDF5 file.
class H5File {
 public:
  /// Opens an existing file read-only; throws IoError if missing or not HDF5.
  static H5File open(const std::filesystem::path& file);
  /// Opens a file for writing, held in memory (HDF5's core driver): a copy of `file` when it
  /// exists, else empty; nothing reaches the disk until close(); errors name `shown` when given.
  static H5File open_rw(const std::filesystem::path& file, const std::filesystem::path& shown = {});
  /// Opens a file for writing in memory: a copy of `file` when `load`, else an empty file.
  static H5File open_in_memory(const std::filesystem::path& file, const std::filesystem::path& shown,
                               bool load);

  H5File(H5File&&) noexcept;
  H5File& operator=(H5File&&) noexcept;
  ~H5File();

  /// Closes the file; one open for writing is put on disk atomically (io/output.hpp) from memory,
  /// and IoError names it if that fails (e.g. disk full). The destructor of an unclosed file
  /// open for writing discards it.
  void close();
  /// Closes a file open for writing and writes its bytes to `out` (without copying them in memory).
  void close_into(std::ostream& out);
  /// The file's path.
  const std::filesystem::path& path() const;
  /// True if an object (group or dataset) exists at `name`, intermediate groups included.
  bool exists(const std::string& name) const;
  /// Names of the members of a group, sorted.
  std::vector<std::string> list(const std::string& group) const;
  /// Shape of a dataset.
  std::vector<std::size_t> shape(const std::string& dataset) const;
  /// Any numeric dataset converted to float32; throws IoError naming file and dataset.
  Tensor read_floats(const std::string& dataset) const;
  /// Any numeric dataset converted to float32 straight into `out`, which must hold exactly its
  /// element count (IoError naming file and dataset otherwise). A contiguous float32 dataset in
  /// this machine's byte order is copied from the file without libhdf5, so calls from several
  /// threads on one file read in parallel; every other layout goes through libhdf5 (serialised).
  void read_floats_into(const std::string& dataset, std::span<float> out) const;
  /// The raw codes of a dataset stored as 16-bit floats of either layout write_codes16 writes
  /// (bf16, or IEEE binary16 from any writer), in either byte order, without conversion to float;
  /// nullopt for any other type.
  std::optional<Codes16> read_codes16(const std::string& dataset) const;
  /// Any numeric dataset converted to float64.
  std::vector<double> read_doubles(const std::string& dataset,
                                   std::vector<std::size_t>* shape = nullptr) const;
  /// An integer dataset converted to int64.
  std::vector<std::int64_t> read_ints(const std::string& dataset,
                                      std::vector<std::size_t>* shape = nullptr) const;
  /// A 1-D dataset of variable- or fixed-length strings.
  std::vector<std::string> read_strings(const std::string& dataset) const;

  /// True if object `obj` ("/" for the root) has attribute `name`.
  bool has_attr(const std::string& obj, const std::string& name) const;
  /// A numeric attribute as double; throws IoError if missing or not numeric.
  double attr_double(const std::string& obj, const std::string& name) const;
  /// A numeric attribute as int64.
  std::int64_t attr_int(const std::string& obj, const std::string& name) const;
  /// A string attribute.
  std::string attr_string(const std::string& obj, const std::string& name) const;

  /// Writes (replacing) a float32 dataset, creating intermediate groups.
  void write_floats(const std::string& dataset, const std::vector<std::size_t>& shape, const float* data);
  /// Writes (replacing) a dataset of 16-bit float codes as they are: `kind` "bf16" (bfloat16: sign,
  /// 8 exponent bits, 7 mantissa bits, bias 127) or "fp16" (IEEE binary16), stored little-endian as
  /// an HDF5 float type, so read_floats widens it and read_codes16 returns the codes.
  void write_codes16(const std::string& dataset, const std::vector<std::size_t>& shape,
                     const std::uint16_t* codes, const std::string& kind);
  /// Bits per element of a numeric dataset as stored in the file (16 for bf16/fp16 weights).
  int stored_bits(const std::string& dataset) const;
  /// Writes (replacing) a float64 dataset.
  void write_doubles(const std::string& dataset, const std::vector<std::size_t>& shape, const double* data);
  /// Writes (replacing) an int64 dataset.
  void write_ints(const std::string& dataset, const std::vector<std::size_t>& shape,
                  const std::int64_t* data);
  /// Writes (replacing) a uint8 dataset.
  void write_bytes(const std::string& dataset, const std::vector<std::size_t>& shape,
                   const std::uint8_t* data);
  /// Writes (replacing) a 1-D dataset of variable-length UTF-8 strings.
  void write_strings(const std::string& dataset, const std::vector<std::string>& values);
  /// Creates a group and its parents if missing.
  void ensure_group(const std::string& group);
  /// Sets a string attribute on an existing object.
  void set_attr(const std::string& obj, const std::string& name, const std::string& value);
  /// Sets a float64 attribute.
  void set_attr(const std::string& obj, const std::string& name, double value);
  /// Sets an int64 attribute.
  void set_attr(const std::string& obj, const std::string& name, std::int64_t value);

 private:
  struct Impl;
  explicit H5File(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Makes libhdf5 return the memory it frees to the allocator at once instead of keeping it on its
/// free lists, so a leak checker (LeakSanitizer, valgrind) sees every block it frees and reuses.
void h5_disable_free_lists();

/// The files, groups, datasets and attributes libhdf5 holds open: 0 once every H5File
/// lpemu opened is closed (a leaked handle is a nonzero count).
std::size_t h5_open_objects();

/// Reads a float tensor from `FILE.npy` or `FILE.h5:/dataset`.
Tensor read_tensor(const std::string& spec);
/// Writes an HDF5 file atomically: `fill` writes into a file in memory (a copy of `file` when
/// `keep_existing` and it exists), whose bytes go to a temporary file renamed onto `file`
/// (AtomicFile). libhdf5 never writes to disk, so a full disk is an IoError from lpemu's writer.
void write_h5_atomic(const std::filesystem::path& file, const OutputPolicy& policy, bool keep_existing,
                     const std::function<void(H5File&)>& fill);
/// The file part of a tensor spec (`FILE.npy` or `FILE.h5:/dataset`).
std::filesystem::path tensor_file(const std::string& spec);
/// Writes a float tensor to `FILE.npy` or `FILE.h5:/dataset` atomically (io/output.hpp): an
/// existing .npy file or dataset is replaced only with `policy.force`, an input never, a group never.
void write_tensor(const std::string& spec, const Tensor& t, const OutputPolicy& policy);

}  // namespace lpemu::io
