// The Highway codec kernels under every SIMD target this machine runs (hwy::SetSupportedTargetsForTest
// narrows run-time dispatch to one target at a time):
//  - decode: every code of every 8- and 16-bit floating format, with junk above the code width,
//    decoded in bulk, bit for bit equal to the same code decoded alone (a one-element call takes
//    the scalar kernel; all 8-bit codes, a sample of 16-bit ones and every NaN) and to the scalar
//    decode();
//  - encode and quantize: every deterministic rounding mode, overflow policy, FTZ and DAZ on the
//    boundary set of each fast-kernel format (every value and midpoint, ±1..4 float ulps around
//    each, binade edges, specials), a strided window and random bit patterns, into 8-, 16- and
//    32-bit code storage, equal to the scalar generic path element by element.
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <hwy/targets.h>
#include <catch2/catch.hpp>

#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "support/reference/conformance.hpp"

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

// Bulk encode into storage Code under the current target, compared with the scalar codes.
template <class Code>
std::size_t encode_mismatches(const Format& f, const std::vector<float>& in, const ConvertOptions& o,
                              const std::vector<std::uint64_t>& want, std::string& first) {
  std::vector<Code> got(in.size());
  encode(f, std::span<const float>(in), std::span<Code>(got), o);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (got[i] != want[i] && bad++ == 0) {
      first = std::to_string(8 * sizeof(Code)) + "-bit storage, input bits " +
              std::to_string(std::bit_cast<std::uint32_t>(in[i])) + ": code " + std::to_string(got[i]) +
              ", scalar " + std::to_string(want[i]);
    }
  }
  return bad;
}

TEST_CASE("bulk encode and quantize give the scalar path's codes under every SIMD target",
          "[format][exhaustive][simd]") {
  const auto targets = hwy::SupportedAndGeneratedTargets();
  REQUIRE(!targets.empty());
  const auto& reg = Registry::builtin();
  std::mt19937_64 rng(20261205);
  std::vector<float> random(1 << 12);
  for (auto& x : random) x = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
  std::size_t formats = 0;
  for (const auto& name : reg.names()) {
    const Format& f = reg.get(name);
    if (f.kind != Kind::floating || !f.has_zero || f.bits > 19) continue;  // the fast kernel's formats
    ++formats;
    std::vector<float> in;
    if (f.bits <= 16) {
      const lpemu::test::ref::Table t(f);
      in = lpemu::test::ref::boundary_set(t, f);
      if (f.bits > 8) {  // 16-bit formats: every 5th of ~10^6 (the window tests take all of them)
        for (std::size_t i = 0; 5 * i < in.size(); ++i) in[i] = in[5 * i];
        in.resize((in.size() + 4) / 5);
      } else {
        const auto strided =
            lpemu::test::ref::strided_window(lpemu::test::ref::interesting_window(t, f), 4093U);
        in.insert(in.end(), strided.begin(), strided.end());
      }
    } else {  // tf32: every 8191st float32 of every binade (its reference table would be too large)
      in = lpemu::test::ref::strided_window({-127, 128}, 8191U);
    }
    in.insert(in.end(), random.begin(), random.end());
    in.push_back(1.0F);  // an odd count: the last values take the scalar tail
    // Every rounding mode, each overflow policy, FTZ and DAZ; stochastic rounding with 1 to 32
    // random bits, several seeds and element indices (one run wraps the 64-bit index).
    struct Variant {
      RoundingMode mode;
      Overflow policy;
      int flush;  // 1: FTZ, 2: DAZ
      int sr_bits = 32;
      std::uint64_t seed = 0;
      std::uint64_t index_offset = 0;
    };
    std::vector<Variant> variants;
    for (const auto mode : kAllRoundingModes) variants.push_back({mode, Overflow::native, 0});
    for (const auto mode :
         {RoundingMode::nearest_even, RoundingMode::toward_zero, RoundingMode::toward_negative})
      variants.push_back({mode, Overflow::saturate, 0});
    for (const int flush : {1, 2}) {
      variants.push_back({RoundingMode::nearest_even, Overflow::native, flush});
      variants.push_back({RoundingMode::toward_positive, Overflow::saturate, flush});
    }
    constexpr auto kSr = RoundingMode::stochastic;
    variants.push_back({kSr, Overflow::native, 0, 1, 7, (std::uint64_t{1} << 40) + 3});
    variants.push_back({kSr, Overflow::saturate, 0, 8, 0xDEADBEEF, 5});
    variants.push_back({kSr, Overflow::native, 1, 13, 42, 0});
    variants.push_back({kSr, Overflow::saturate, 2, 23, 1, ~std::uint64_t{0} - 1000});
    variants.push_back({kSr, Overflow::native, 0, 31, 0, 17});
    for (const auto& [mode, policy, flush, sr_bits, seed, index_offset] : variants) {
      ConvertOptions o;
      o.rounding = mode;
      o.overflow = policy;
      o.flush_subnormal_outputs = flush == 1;
      o.flush_subnormal_inputs = flush == 2;
      o.sr_bits = sr_bits;
      o.seed = seed;
      o.index_offset = index_offset;
      std::vector<std::uint64_t> want(in.size());
      std::vector<float> want_q(in.size());
      for (std::size_t i = 0; i < in.size(); ++i) {
        want[i] = encode(f, in[i], o, index_offset + i);
        want_q[i] = static_cast<float>(quantize(f, in[i], o, index_offset + i));
      }
      for (const std::int64_t target : targets) {
        hwy::SetSupportedTargetsForTest(target);
        INFO(hwy::TargetName(target) << " " << f.name << " " << to_string(mode) << " " << to_string(policy)
                                     << " ftz " << (flush == 1) << " daz " << (flush == 2) << " sr_bits "
                                     << sr_bits << " seed " << seed << " index " << index_offset);
        std::string first;
        std::size_t bad = 0;
        if (f.bits <= 8) bad += encode_mismatches<std::uint8_t>(f, in, o, want, first);
        if (f.bits <= 16) bad += encode_mismatches<std::uint16_t>(f, in, o, want, first);
        bad += encode_mismatches<std::uint32_t>(f, in, o, want, first);
        std::vector<float> q(in.size());
        quantize(f, std::span<const float>(in), std::span<float>(q), o);
        for (std::size_t i = 0; i < in.size(); ++i) {
          const bool nan = std::isnan(want_q[i]);
          const bool ok = nan ? std::isnan(q[i]) && std::signbit(q[i]) == std::signbit(want_q[i])
                              : std::bit_cast<std::uint32_t>(q[i]) == std::bit_cast<std::uint32_t>(want_q[i]);
          if (!ok && bad++ == 0) {
            first = "quantize, input bits " + std::to_string(std::bit_cast<std::uint32_t>(in[i])) + ": " +
                    std::to_string(q[i]) + ", scalar " + std::to_string(want_q[i]);
          }
        }
        INFO(first);
        CHECK(bad == 0);
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  CHECK(formats >= 10);
}

}  // namespace
