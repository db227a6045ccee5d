// The full 2^32 sweep (label slow, built with -DLPEMU_SLOW_TESTS=ON): every float32 bit pattern
// into fp8_e4m3 under nearest_even / native overflow, through the bulk fast kernel, bulk quantize
// and the scalar generic path, each against the independent reference. Fixed 32 Ki chunks on oneTBB.
#include <bit>
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>
#include <tbb/parallel_for.h>

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
    std::vector<float> in(kBatch);
    for (std::uint64_t i = 0; i < kBatch; ++i) in[i] = std::bit_cast<float>(static_cast<std::uint32_t>(b * kBatch + i));
    lpemu::format::ConvertOptions o;
    o.index_offset = b * kBatch;
    lpemu::test::ref::check_batch(f, t, in, o, failures);
  });
  for (const auto& line : failures.first()) FAIL_CHECK(line);
  CHECK(failures.count() == 0);
  CHECK(failures.checked.load() == (std::uint64_t{1} << 32));
}

}  // namespace
