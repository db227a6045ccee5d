// The Highway decode kernel under every SIMD target this machine runs (hwy::SetSupportedTargetsForTest
// narrows run-time dispatch to one target at a time): every code of every 8- and 16-bit floating
// format, with junk above the code width, decoded in bulk, bit for bit equal to the same code
// decoded alone (a one-element call takes the scalar kernel; all 8-bit codes, a sample of 16-bit
// ones and every NaN) and to the scalar decode().
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <hwy/targets.h>
#include <catch2/catch.hpp>

#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"

namespace {

using namespace lpemu::format;

// Bits of a decoded value: scalar decode() gives a double; NaNs compare by sign only.
bool same(float bulk, float alone, double scalar) {
  if (std::bit_cast<std::uint32_t>(bulk) != std::bit_cast<std::uint32_t>(alone)) return false;
  if (std::isnan(scalar)) return std::isnan(bulk) && std::signbit(bulk) == std::signbit(scalar);
  return std::bit_cast<std::uint32_t>(bulk) == std::bit_cast<std::uint32_t>(static_cast<float>(scalar));
}

template <class Code>
void check_format(const Format& f, const std::string& target) {
  const std::size_t n = std::size_t{1} << f.bits;
  // Every code, then every code again with junk above the width (ignored), and an odd count so
  // the last codes take the scalar tail.
  std::vector<Code> codes;
  for (std::size_t c = 0; c < n; ++c) codes.push_back(static_cast<Code>(c));
  if (f.bits < static_cast<int>(8 * sizeof(Code))) {
    for (std::size_t c = 0; c < n; ++c)
      codes.push_back(static_cast<Code>(c | (~f.code_mask() & 0x5A5A5A5AU)));
  }
  codes.push_back(static_cast<Code>(1));
  std::vector<float> bulk(codes.size());
  decode(f, std::span<const Code>(codes), std::span<float>(bulk));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const double scalar = decode(f, static_cast<std::uint64_t>(codes[i]) & f.code_mask());
    // One-element calls (the scalar kernel) for every 8-bit code, every 61st 16-bit one and every NaN.
    float alone = bulk[i];
    if (f.bits <= 8 || i % 61 == 0 || std::isnan(scalar)) {
      decode(f, std::span<const Code>(&codes[i], 1), std::span<float>(&alone, 1));
    }
    if (!same(bulk[i], alone, scalar)) {
      if (++bad <= 5) {
        FAIL_CHECK(target << " " << f.name << " code " << static_cast<std::uint64_t>(codes[i])
                          << ": bulk bits " << std::bit_cast<std::uint32_t>(bulk[i]) << ", alone "
                          << std::bit_cast<std::uint32_t>(alone) << ", scalar " << scalar);
      }
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("bulk decode gives the scalar kernel's bits under every SIMD target",
          "[format][exhaustive][simd]") {
  const auto targets = hwy::SupportedAndGeneratedTargets();
  REQUIRE(!targets.empty());
  const auto& reg = Registry::builtin();
  for (const std::int64_t t : targets) {
    hwy::SetSupportedTargetsForTest(t);
    const std::string target = hwy::TargetName(t);
    INFO("target " << target);
    for (const auto& name : reg.names()) {
      const Format& f = reg.get(name);
      if (f.kind != Kind::floating || f.bits > 16) continue;
      if (f.bits <= 8) check_format<std::uint8_t>(f, target);
      check_format<std::uint16_t>(f, target);
      check_format<std::uint32_t>(f, target);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  INFO("targets run: " << targets.size());
  CHECK(targets.size() >= 1);
}

}  // namespace
