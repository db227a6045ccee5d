// Shared by the fuzz targets: an expected rejection is an lpemu::Error; anything else (another
// exception, a crash, a sanitizer report) is a bug that libFuzzer or the replay driver reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <unistd.h>

#include "lpemu/error.hpp"

namespace lpemu::test {

/// Runs `f` and swallows lpemu::Error (bad input, correctly rejected).
template <class F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const lpemu::Error&) {
  }
}

/// The fuzzer's bytes as text.
inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// A per-process scratch path for the fuzzer's files, NAME prefixed with "lpemu_fuzz_<pid>_": in
/// /dev/shm where it exists (memory: the fsync and rename of an atomic output cost nothing there,
/// so an execution is not an on-disk write), else in the system's temporary folder.
inline std::filesystem::path scratch_path(const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
  return dir / ("lpemu_fuzz_" + std::to_string(::getpid()) + "_" + name);
}

}  // namespace lpemu::test
