#include "support/test_support.hpp"

#include <cmath>
#include <cstdio>

namespace lpemu::test {

std::string source_path(const std::string& relative) {
  return std::string(LPEMU_SOURCE_DIR) + "/" + relative;
}

std::string lpemu_binary() { return std::string(LPEMU_CLI_EMULATOR) + "'" + LPEMU_BINARY + "'"; }

std::string hex32(float x) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", std::bit_cast<std::uint32_t>(x));
  return buf;
}

std::string hex64(double x) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx",
                static_cast<unsigned long long>(std::bit_cast<std::uint64_t>(x)));
  return buf;
}

bool same_bits_or_nan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) {
    return std::isnan(a) && std::isnan(b) && std::signbit(a) == std::signbit(b);
  }
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

}  // namespace lpemu::test
