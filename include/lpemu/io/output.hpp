// Safe outputs and inputs: every file lpemu writes goes through AtomicFile (temporary file in the
// target's folder, checked writes, fsync, rename), so a failed run never leaves a partial file
// under the final name, never overwrites without `force`, and never writes over one of its inputs.
// Inputs are opened through open_input, which refuses directories and bounds devices and FIFOs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lpemu::io {

/// What an output may replace: an existing file only with `force`, an input never.
struct OutputPolicy {
  bool force = false;                         ///< replace an existing regular file
  std::vector<std::filesystem::path> inputs;  ///< files this run reads; never written over
  /// Tensors this run reads as `FILE.h5:/dataset` (or `FILE.npy`): an output dataset never replaces
  /// one of them, even though writing another dataset into the same file is allowed.
  std::vector<std::string> input_tensors = {};
};

/// Throws IoError unless `target` may be written under `policy` (not an input, not a directory,
/// not an existing file without force).
void check_output(const std::filesystem::path& target, const OutputPolicy& policy);

/// A file written under a temporary name beside its target and renamed over it by commit().
/// Targets that exist and are not regular files (/dev/null, /dev/full, a FIFO) are written in place.
class AtomicFile {
 public:
  /// Checks `target` against `policy` and creates the temporary file; throws IoError.
  AtomicFile(std::filesystem::path target, const OutputPolicy& policy);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  /// Removes the temporary file unless commit() succeeded.
  ~AtomicFile();

  /// The stream to write to (binary).
  std::ostream& stream();
  /// The path being written (the temporary file; the target itself for devices).
  const std::filesystem::path& temp_path() const;
  /// The final path.
  const std::filesystem::path& target() const;
  /// Closes the stream (if still open) for writers that reopen temp_path() with another library.
  void close_stream();
  /// Flushes, checks every write, fsyncs and renames onto the target; throws IoError naming it.
  void commit();

 private:
  std::filesystem::path target_;
  std::filesystem::path temp_;
  std::ofstream out_;
  bool in_place_ = false;
  bool committed_ = false;
};

/// Writes `bytes` to `target` atomically under `policy`.
void write_file_atomic(const std::filesystem::path& target, std::string_view bytes,
                       const OutputPolicy& policy);

/// Creates `dir` and its parents if missing; throws IoError naming `dir` and the system's reason
/// if it cannot (an existing file or device such as /dev/null, a symlink loop, a read-only disk).
void create_output_dir(const std::filesystem::path& dir);

/// Throws IoError if `dir` exists, is not empty and holds no file `marker` (not a folder lpemu
/// wrote), so that lpemu never fills or overwrites a folder it does not own.
void check_output_dir(const std::filesystem::path& dir, const std::string& marker);

/// Opens `file` for binary reading; throws IoError if it is missing or a directory.
std::ifstream open_input(const std::filesystem::path& file);
/// A regular input file for positional reads, which several threads may issue at once (each
/// copies from the page cache on its own core).
class InputFile {
 public:
  /// Opens `file` for reading; throws IoError if it is missing, a directory or not a regular file.
  explicit InputFile(std::filesystem::path file);
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  /// Closes the file.
  ~InputFile();
  /// Reads up to `bytes` bytes at `offset`; returns how many arrived (fewer only at the end of the
  /// file); throws IoError naming the file on a read error.
  std::size_t read_at(std::uint64_t offset, void* to, std::size_t bytes) const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

/// Reads a whole input file (at most `max_bytes`, so /dev/zero or a FIFO cannot hang or exhaust
/// memory); throws IoError naming the file when it is missing, a directory or too large.
std::string read_input(const std::filesystem::path& file, std::size_t max_bytes = std::size_t{1} << 30);
/// Size in bytes of a regular input file; SIZE_MAX for devices and FIFOs (size unknown).
std::size_t input_size(const std::filesystem::path& file);

/// Flushes std::cout and C stdout; throws IoError if stdout could not take every byte (e.g. /dev/full).
void flush_stdout();

}  // namespace lpemu::io
