// The full 2^32 sweep (label slow, built with -DLPEMU_SLOW_TESTS=ON): every float32 bit pattern
// into fp8_e4m3 under nearest_even / native overflow, through the bulk fast kernel and bulk quantize
// on every pattern and the scalar generic path on every 256th (the window sweeps below check the
// scalar path on every pattern that can round differently), each against the independent
// reference. Fixed 32 Ki chunks on oneTBB.
#include <bit>
#include <cstdint>
#include <vector>

#include <tbb/parallel_for.h>
#include <catch2/catch.hpp>

#include "lpemu/format/registry.hpp"
#include "support/reference/conformance.hpp"

namespace {

TEST_CASE("every float32 bit pattern converts to fp8_e4m3 as the reference", "[format][slow]") {
  const auto& f = lpemu::format::Registry::builtin().get("fp8_e4m3");
  const lpemu::test::ref::Table t(f);
  constexpr std::uint64_t kBatch = 1 << 15;
  constexpr std::uint64_t kBatches = (std::uint64_t{1} << 32) / kBatch;
  lpemu::test::ref::Failures failures;
  tbb::parallel_for(std::uint64_t{0}, kBatches, [&](std::uint64_t b) {
    thread_local std::vector<float> in(kBatch);  // reused: no page faults per batch
    for (std::uint64_t i = 0; i < kBatch; ++i)
      in[i] = std::bit_cast<float>(static_cast<std::uint32_t>(b * kBatch + i));
    lpemu::format::ConvertOptions o;
    o.index_offset = b * kBatch;
    lpemu::test::ref::Paths paths;
    paths.scalar_stride = 256;
    lpemu::test::ref::check_batch(f, t, in, o, failures, paths);
  });
  for (const auto& line : failures.first()) FAIL_CHECK(line);
  CHECK(failures.count() == 0);
  CHECK(failures.checked.load() == (std::uint64_t{1} << 32));
}

}  // namespace

namespace {

// The full interesting window x every rounding mode x overflow policy (the CI
// set checks this only on boundary sets). One DYNAMIC_SECTION per format, so
// `lpemu_slow_tests "<name>" -c fp4_e2m1` runs one format.
TEST_CASE("every float32 in the interesting window converts as the reference in every mode and policy",
          "[format][slow]") {
  const auto& reg = lpemu::format::Registry::builtin();
  for (const auto& name : reg.names()) {
    const auto& f = reg.get(name);
    if (f.bits > 8 || !f.has_zero) continue;
    DYNAMIC_SECTION(name) {
      const lpemu::test::ref::Table t(f);
      const auto window = lpemu::test::ref::interesting_window(t, f);
      const std::uint32_t lo = static_cast<std::uint32_t>(window.first + 127) << 23;
      const std::uint32_t hi = static_cast<std::uint32_t>(window.second + 128) << 23;
      constexpr std::uint32_t kBatch = 1 << 15;
      for (const auto mode : lpemu::format::kAllRoundingModes) {
        for (const auto policy : lpemu::format::kAllOverflowPolicies) {
          lpemu::test::ref::Failures failures;
          tbb::parallel_for(std::uint32_t{0}, 2 * ((hi - lo) / kBatch), [&](std::uint32_t b) {
            const std::uint32_t sign = b % 2 == 0 ? 0U : 0x80000000U;
            const std::uint32_t start = lo + (b / 2) * kBatch;
            thread_local std::vector<float> in(kBatch);
            for (std::uint32_t i = 0; i < kBatch; ++i) in[i] = std::bit_cast<float>(sign | (start + i));
            lpemu::format::ConvertOptions o;
            o.rounding = mode;
            o.overflow = policy;
            o.seed = 11;
            o.sr_bits = 13;
            o.index_offset = std::uint64_t{b} * kBatch;
            lpemu::test::ref::check_batch(f, t, in, o, failures);
          });
          INFO(name << " " << lpemu::format::to_string(mode) << " " << lpemu::format::to_string(policy));
          for (const auto& line : failures.first()) FAIL_CHECK(line);
          CHECK(failures.count() == 0);
          CHECK(failures.checked.load() == 2ULL * (hi - lo));
        }
      }
    }
  }
}

}  // namespace
