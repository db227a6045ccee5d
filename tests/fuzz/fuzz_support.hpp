// Shared by the fuzz targets: an expected rejection is an lpemu::Error; anything else (another
// exception, a crash, a sanitizer report) is a bug that libFuzzer or the replay driver reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

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

}  // namespace lpemu::test
