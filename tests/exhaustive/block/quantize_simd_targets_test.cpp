// The Highway block-quantize kernels under every SIMD target this machine runs
// (hwy::SetSupportedTargetsForTest narrows run-time dispatch to one target at a time): every
// built-in block format under every rounding mode (stochastic with two seeds and random-bit
// counts; zeros kept signed or made +0), blocks along the last axis and across rows, 2-D tiles
// (full, partial, runs longer than one kernel call, non-finite and all-zero blocks, subnormal and
// huge inputs), bit for bit equal to the scalar generic path, out of place and in place.
#include <algorithm>
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
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"

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

// Blocks of 16 whose amax sits on, and one float step either side of, every rounding boundary of
// an E4M3 or E5M2 block scale (amax = midpoint · max_elem · g), plus amax at and past the scale's
// overflow: the fast path's scale (rne_on_grid on the scale grid) must pick the codec's scale.
TEST_CASE("non-power-of-two block scales at every rounding boundary of the scale format, every SIMD target",
          "[block][exhaustive][simd]") {
  const auto& reg = lb::BlockRegistry::builtin();
  const auto& freg = lpemu::format::Registry::builtin();
  std::vector<lb::BlockFormat> formats;
  for (const char* scale : {"fp8_e4m3", "fp8_e5m2"}) {
    for (const auto overflow : {lb::ScaleOverflow::nan, lb::ScaleOverflow::clamp}) {
      for (const auto tensor : {lb::TensorScale::none, lb::TensorScale::fp32}) {
        lb::BlockFormat f = reg.get("nvfp4");
        f.scale = freg.get(scale);
        f.scale_overflow = overflow;
        f.tensor_scale = tensor;
        formats.push_back(f);
      }
    }
  }
  lb::BlockFormat i8 = reg.get("nvfp4");  // INT8 elements (128 below, 127 above) under an E4M3 scale
  i8.element = freg.get("int8");
  formats.push_back(i8);
  std::mt19937_64 rng(99);
  for (const auto& f : formats) {
    const lpemu::format::Format& sf = f.scale;
    // Every positive finite scale value, then the amax targets.
    std::vector<double> vals;
    for (std::uint64_t code = 1; code <= sf.code_mask(); ++code) {
      const double v = lpemu::format::decode(sf, code);
      if (std::isfinite(v) && v > 0.0) vals.push_back(v);
    }
    std::sort(vals.begin(), vals.end());
    const double me = f.element.max_finite;
    std::vector<float> targets;
    for (std::size_t k = 0; k + 1 < vals.size(); ++k) {
      const auto t = static_cast<float>((vals[k] + vals[k + 1]) / 2.0 * me);
      targets.insert(targets.end(), {t, std::nextafter(t, 0.0F), std::nextafter(t, 1e30F)});
    }
    const double top = vals.back();
    for (const double m : {1.0, 1.03125, 1.0625, 1.125, 2.0, 1e10})
      targets.push_back(static_cast<float>(top * me * m));
    targets.push_back(std::numeric_limits<float>::max());
    targets.push_back(std::numeric_limits<float>::denorm_min());
    // Without a tensor scale g = 1; with one, a block of amax max_elem · max_scale makes g = 1 too,
    // so the second tensor holds the targets up to that amax only.
    for (const bool capped : {false, true}) {
      std::vector<float> x;
      for (const float t : targets) {
        if (capped && t > static_cast<float>(top * me)) continue;
        for (int j = 0; j < 16; ++j) {
          const float u = static_cast<float>(static_cast<double>(rng() >> 11) * 0x1p-53);
          x.push_back((j == static_cast<int>(rng() % 16) ? t : t * u) * ((rng() & 1) != 0 ? -1.0F : 1.0F));
        }
        // The block's amax is t: make sure one element holds it.
        x[x.size() - 16] = (rng() & 1) != 0 ? -t : t;
      }
      if (capped) {
        for (int j = 0; j < 16; ++j) x.push_back(static_cast<float>(top * me));
      } else if (f.tensor_scale == lb::TensorScale::fp32) {
        continue;
      }
      const std::vector<std::size_t> shape{x.size() / 16, 16};
      std::vector<float> gen(x.size());
      lb::detail::quantize_generic(f, x, gen, shape);
      for (const std::int64_t t : hwy::SupportedAndGeneratedTargets()) {
        hwy::SetSupportedTargetsForTest(t);
        std::vector<float> fast(x.size());
        lb::quantize(f, x, fast, shape);
        INFO("target " << hwy::TargetName(t) << " element " << f.element.name << " scale " << sf.name
                       << " overflow " << to_string(f.scale_overflow) << " tensor scale "
                       << to_string(f.tensor_scale) << " capped " << capped);
        CHECK(mismatches(fast, gen) == 0);
      }
      hwy::SetSupportedTargetsForTest(0);
    }
  }
}

}  // namespace
