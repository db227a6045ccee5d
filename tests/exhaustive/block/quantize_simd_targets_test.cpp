// The Highway block-quantize kernels under every SIMD target this machine runs
// (hwy::SetSupportedTargetsForTest narrows run-time dispatch to one target at a time): every
// built-in block format under every rounding mode (stochastic with two seeds and random-bit
// counts; zeros kept signed or made +0), blocks along the last axis and across rows, 2-D tiles
// (full, partial, runs longer than one kernel call, non-finite and all-zero blocks, subnormal and
// huge inputs), bit for bit equal to the scalar generic path, out of place and in place.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <hwy/targets.h>
#include <catch2/catch.hpp>

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/quantize.hpp"

namespace {

namespace lb = lpemu::block;

// Values around a random binade per block, with float32 subnormals, huge values, zeros, ties and
// (rarely) Inf or NaN; some blocks are all zero.
std::vector<float> mixed_tensor(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> x(n);
  int base = 0;
  bool zero_block = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 32 == 0) {
      base = static_cast<int>(rng() % 260) - 140;
      zero_block = rng() % 13 == 0;
    }
    const auto kind = rng() % 64;
    if (zero_block) {
      x[i] = (rng() & 1) != 0 ? -0.0F : 0.0F;
    } else if (kind == 0) {
      x[i] =
          (rng() & 1) != 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
    } else if (kind < 6) {
      x[i] = std::bit_cast<float>(static_cast<std::uint32_t>(rng()) & 0x807fffffU);  // subnormal or zero
    } else if (kind < 12) {
      x[i] = std::ldexp(static_cast<float>(rng() % 64) / 8.0F, base) * ((rng() & 1) != 0 ? -1.0F : 1.0F);
    } else {
      const float m = 1.0F + static_cast<float>(rng() % (1U << 23)) / 8388608.0F;
      x[i] = std::ldexp(m, base + static_cast<int>(rng() % 16) - 8) * ((rng() & 1) != 0 ? -1.0F : 1.0F);
    }
  }
  return x;
}

std::size_t mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const bool nan_both = std::isnan(a[i]) && std::isnan(b[i]);
    if (!nan_both && std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) ++bad;
  }
  return bad;
}

TEST_CASE("block quantize's Highway kernels give the generic path's bits under every SIMD target",
          "[block][exhaustive][simd]") {
  const auto targets = hwy::SupportedAndGeneratedTargets();
  REQUIRE(!targets.empty());
  const std::vector<std::vector<std::size_t>> shapes = {{37, 45}, {64, 96}, {3, 1000},  {32 * 300},
                                                        {5},      {4, 0},   {130, 300}, {3, 70, 40}};
  const auto& reg = lb::BlockRegistry::builtin();
  for (const std::int64_t t : targets) {
    hwy::SetSupportedTargetsForTest(t);
    const std::string target = hwy::TargetName(t);
    std::uint64_t seed = 7;
    for (const auto& name : reg.names()) {
      for (int v = 0; v < 18; ++v) {
        // Every mode; then stochastic with another seed and 5 random bits, and two modes with
        // zero results made +0.
        lb::BlockFormat f = reg.get(name);
        if (v >= 9) f.axis = 0;  // blocks across rows (for 1-D blocks)
        auto& o = f.element_options;
        const int w = v % 9;
        o.rounding = w < 6 ? lpemu::format::kAllRoundingModes[w] : lpemu::format::RoundingMode::stochastic;
        if (w == 6) {
          o.seed = 0x5EED;
          o.sr_bits = 5;
        }
        if (w >= 7) {
          f.signed_zero = lb::SignedZero::positive;
          if (w == 7) o.rounding = lpemu::format::RoundingMode::nearest_even;
        }
        for (const auto& shape : shapes) {
          std::size_t n = 1;
          for (const auto d : shape) n *= d;
          const auto x = mixed_tensor(n, seed++);
          std::vector<float> fast(n), gen(n);
          lb::quantize(f, x, fast, shape);
          lb::detail::quantize_generic(f, x, gen, shape);
          std::vector<float> in_place = x;
          lb::quantize(f, in_place, in_place, shape);
          INFO("target " << target << " format " << name << " rounding " << to_string(o.rounding)
                         << " sr_bits " << o.sr_bits << " +0 " << (f.signed_zero == lb::SignedZero::positive)
                         << " axis " << f.axis << " elements " << n);
          CHECK(mismatches(fast, gen) == 0);
          CHECK(mismatches(in_place, gen) == 0);
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
