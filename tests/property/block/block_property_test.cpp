// Randomised invariants of block quantisation, checked against the independent exact reference
// (tests/support/reference/block_reference.*). Inputs mix random float32 bit patterns with values
// clustered around a random binade, so blocks see subnormals, huge values, ties and zeros.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <tbb/global_control.h>
#include <catch2/catch.hpp>

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/format/codec.hpp"
#include "support/reference/block_reference.hpp"
#include "support/test_support.hpp"

namespace {

namespace lb = lpemu::block;
namespace ref = lpemu::test::ref;
using lpemu::format::RoundingMode;

std::vector<float> random_tensor(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> x(n);
  const int base = static_cast<int>(rng() % 200) - 110;
  for (std::size_t i = 0; i < n; ++i) {
    const auto kind = rng() % 16;
    std::uint32_t bits = 0;
    if (kind == 0) {
      bits = static_cast<std::uint32_t>(rng()) & 0xff7fffffU;  // any finite-ish pattern
      if ((bits & 0x7f800000U) == 0x7f800000U) bits &= 0xbfffffffU;
    } else if (kind == 1) {
      bits = static_cast<std::uint32_t>(rng()) & 0x807fffffU;  // float32 subnormal or zero
    } else if (kind == 2) {
      // a tie or near-tie: few significant bits
      const int e = base + static_cast<int>(rng() % 12) - 6;
      x[i] = std::ldexp(static_cast<float>(rng() % 64) / 8.0F, e) * ((rng() & 1) ? -1.0F : 1.0F);
      continue;
    } else {
      const int e = base + static_cast<int>(rng() % 16) - 8;
      const float m = 1.0F + static_cast<float>(rng() % (1U << 23)) / 8388608.0F;
      x[i] = std::ldexp(m, e) * ((rng() & 1) ? -1.0F : 1.0F);
      continue;
    }
    x[i] = std::bit_cast<float>(bits);
  }
  return x;
}

ref::Grid grid_of(const std::string& element) {
  if (element == "fp8_e4m3") return ref::fp8_e4m3();
  if (element == "fp8_e5m2") return ref::fp8_e5m2();
  if (element == "fp6_e2m3") return ref::fp6_e2m3();
  if (element == "fp6_e3m2") return ref::fp6_e3m2();
  if (element == "fp4_e2m1") return ref::fp4_e2m1();
  if (element == "mxint8_element") return ref::mxint8();
  FAIL("no reference grid for " << element);
  return {};
}

ref::Mode ref_mode(RoundingMode m) {
  switch (m) {
    case RoundingMode::nearest_even: return ref::Mode::nearest_even;
    case RoundingMode::nearest_away: return ref::Mode::nearest_away;
    case RoundingMode::toward_zero: return ref::Mode::toward_zero;
    case RoundingMode::toward_positive: return ref::Mode::toward_positive;
    case RoundingMode::toward_negative: return ref::Mode::toward_negative;
    default: return ref::Mode::nearest_even;
  }
}

bool same(float a, double b) { return lpemu::test::same_bits_or_nan(static_cast<double>(a), b); }

const char* const kMx[] = {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "mxint8"};

TEST_CASE("MX formats equal the exact reference for every rule and deterministic mode", "[block][property]") {
  const RoundingMode modes[] = {RoundingMode::nearest_even, RoundingMode::nearest_away,
                                RoundingMode::toward_zero, RoundingMode::toward_positive,
                                RoundingMode::toward_negative};
  std::uint64_t seed = 1;
  for (const char* name : kMx) {
    for (const char* rule : {"ocp", "ceil", "even"}) {
      for (RoundingMode mode : modes) {
        lb::BlockFormat f = lb::BlockRegistry::builtin().get(name);
        f.rule = lb::parse_scale_rule(rule);
        f.element_options.rounding = mode;
        const ref::Grid g = grid_of(f.element.name);
        for (int rep = 0; rep < 3; ++rep, ++seed) {
          const std::size_t rows = 3, cols = 70;  // 70 = 2 full blocks and a partial one
          const auto x = random_tensor(rows * cols, seed);
          std::vector<float> out(x.size());
          lb::quantize(f, x, out, std::vector<std::size_t>{rows, cols});
          for (std::size_t r = 0; r < rows; ++r) {
            for (std::size_t b0 = 0; b0 < cols; b0 += 32) {
              const std::size_t b1 = std::min(cols, b0 + 32);
              std::vector<float> blk(x.begin() + static_cast<long>(r * cols + b0),
                                     x.begin() + static_cast<long>(r * cols + b1));
              const auto want = ref::mx_block(blk, g, rule, ref_mode(mode));
              for (std::size_t i = b0; i < b1; ++i) {
                const double w = static_cast<double>(static_cast<float>(want.out[i - b0]));
                INFO(name << " rule " << rule << " mode " << lpemu::format::to_string(mode) << " seed "
                          << seed << " input " << lpemu::test::hex32(x[r * cols + i]) << " shared exp "
                          << want.shared_exp << " got " << out[r * cols + i] << " want " << w);
                REQUIRE(same(out[r * cols + i], w));
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("NVFP4 equals the exact two-level reference", "[block][property]") {
  for (std::uint64_t seed = 100; seed < 120; ++seed) {
    auto x = random_tensor(16 * 9 + 5, seed);
    const auto want = ref::nvfp4(x);
    std::vector<float> out(x.size());
    lb::quantize(lb::BlockRegistry::builtin().get("nvfp4"), x, out, std::vector<std::size_t>{x.size()});
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("seed " << seed << " i " << i << " input " << lpemu::test::hex32(x[i]) << " got " << out[i]
                   << " want " << want[i]);
      REQUIRE(same(out[i], want[i]));
    }
  }
}

TEST_CASE("fast path equals generic path and decode(encode(x)) equals quantize(x)", "[block][property]") {
  std::uint64_t seed = 500;
  for (const auto& name : lb::BlockRegistry::builtin().names()) {
    for (RoundingMode mode : lpemu::format::kAllRoundingModes) {
      for (int axis : {-1, 0}) {
        lb::BlockFormat f = lb::BlockRegistry::builtin().get(name);
        f.element_options.rounding = mode;
        f.element_options.seed = 42;
        f.axis = axis;
        const std::vector<std::size_t> shape{37, 45};
        const auto x = random_tensor(37 * 45, seed++);
        std::vector<float> fast(x.size()), gen(x.size()), dec(x.size());
        lb::quantize(f, x, fast, shape);
        lb::detail::quantize_generic(f, x, gen, shape);
        lb::decode(f, lb::encode(f, x, shape), dec);
        for (std::size_t i = 0; i < x.size(); ++i) {
          INFO(name << " mode " << lpemu::format::to_string(mode) << " axis " << axis << " i " << i
                    << " input " << lpemu::test::hex32(x[i]) << " fast " << fast[i] << " generic " << gen[i]
                    << " decoded " << dec[i]);
          REQUIRE(same(fast[i], gen[i]));
          REQUIRE(same(dec[i], gen[i]));
        }
      }
    }
  }
}

TEST_CASE("quantize is idempotent for power-of-two scale rules", "[block][property]") {
  std::uint64_t seed = 900;
  for (const char* name : kMx) {
    for (const char* rule : {"ocp", "ceil"}) {
      lb::BlockFormat f = lb::BlockRegistry::builtin().get(name);
      f.rule = lb::parse_scale_rule(rule);
      const auto x = random_tensor(32 * 20, seed++);
      std::vector<float> q1(x.size()), q2(x.size());
      lb::quantize(f, x, q1, std::vector<std::size_t>{x.size()});
      lb::quantize(f, q1, q2, std::vector<std::size_t>{x.size()});
      for (std::size_t i = 0; i < x.size(); ++i) {
        INFO(name << " " << rule << " i " << i << " q1 " << q1[i] << " q2 " << q2[i]);
        REQUIRE(same(q2[i], static_cast<double>(q1[i])));
      }
    }
  }
}

TEST_CASE("ceil never saturates and every element lies on the element grid times its scale",
          "[block][property]") {
  std::uint64_t seed = 1300;
  for (const char* name : kMx) {
    lb::BlockFormat f = lb::BlockRegistry::builtin().get(name);
    f.rule = lb::ScaleRule::ceil;
    const ref::Grid g = grid_of(f.element.name);
    const auto x = random_tensor(32 * 16, seed++);
    const auto t = lb::encode(f, x, std::vector<std::size_t>{x.size()});
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double s = lb::scale_value(f, t.scales[i / 32]);
      const double q = lpemu::format::decode(f.element, t.codes[i]);
      INFO(name << " i " << i << " x " << x[i] << " scale " << s << " element " << q);
      REQUIRE(std::fabs(static_cast<double>(x[i])) <= f.element.max_finite * s);  // amax/S ≤ max
      REQUIRE(ref::round_to_grid(q, g, ref::Mode::nearest_even) == q);            // on the grid
      REQUIRE(std::ilogb(s) >= -127);
      REQUIRE(std::ilogb(s) <= 127);
    }
  }
}

TEST_CASE("a 2-D tile format quantises a matrix and its transpose to the same values", "[block][property]") {
  // Square tiles cover the same elements of W and of Wᵀ, so the forward (along K) and the data
  // gradient (along N) GEMMs of a training step can share one quantised weight.
  for (const std::string& name : lb::BlockRegistry::builtin().names()) {
    const lb::BlockFormat& f = lb::BlockRegistry::builtin().get(name);
    if (f.granularity != lb::Granularity::tile || f.tile_rows != f.tile_cols) continue;
    for (const auto& [rows, cols] : std::vector<std::pair<std::size_t, std::size_t>>{{40, 56}, {256, 128}}) {
      const auto x = random_tensor(rows * cols, 31 + rows);
      std::vector<float> xt(x.size()), q(x.size()), qt(x.size());
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) xt[c * rows + r] = x[r * cols + c];
      const std::vector<std::size_t> shape{rows, cols}, shape_t{cols, rows};
      lb::quantize(f, x, q, shape);
      lb::quantize(f, xt, qt, shape_t);
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t c = 0; c < cols; ++c) {
          INFO(name << " " << rows << "x" << cols << " (" << r << ", " << c << ")");
          REQUIRE(same(q[r * cols + c], static_cast<double>(qt[c * rows + r])));
        }
      }
    }
  }
}

TEST_CASE("results are bit-identical with 1 and 2 threads and equal the generic path", "[block][property]") {
  const auto x = random_tensor(1 << 18, 77);
  for (const char* name : {"mxfp4", "nvfp4", "mxint8", "fp8_e4m3_tile128", "nvfp4_tile16",
                           "fp8_e4m3_per_tensor", "int8_per_token"}) {
    lb::BlockFormat f = lb::BlockRegistry::builtin().get(name);
    f.element_options.rounding = RoundingMode::stochastic;
    f.element_options.seed = 9;
    const std::vector<std::size_t> shape{512, 512};
    std::vector<float> one(x.size()), two(x.size());
    {
      tbb::global_control c(tbb::global_control::max_allowed_parallelism, 1);
      lb::quantize(f, x, one, shape);
    }
    {
      tbb::global_control c(tbb::global_control::max_allowed_parallelism, 2);
      lb::quantize(f, x, two, shape);
    }
    // A block larger than one task's share (per tensor) is split across tasks: still the generic bits.
    std::vector<float> gen(x.size());
    lb::detail::quantize_generic(f, x, gen, shape);
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO(name << " i " << i);
      REQUIRE(same(one[i], static_cast<double>(two[i])));
      REQUIRE(same(one[i], static_cast<double>(gen[i])));
    }
  }
}

}  // namespace

namespace {

double block_sse(const std::vector<float>& x, const std::vector<float>& q, std::size_t b0, std::size_t b1) {
  double s = 0;
  for (std::size_t i = b0; i < b1; ++i) {
    if (!std::isfinite(x[i])) continue;
    const double d = static_cast<double>(x[i]) - static_cast<double>(q[i]);
    s += d * d;
  }
  return s;
}

TEST_CASE("search never has a larger block error than its base rule", "[block][property]") {
  std::uint64_t seed = 2000;
  for (const char* name : {"mxfp4", "mxfp8_e4m3", "mxint8", "nvfp4"}) {
    lb::BlockFormat base = lb::BlockRegistry::builtin().get(name);
    lb::BlockFormat search = base;
    search.rule = lb::ScaleRule::search;
    search.search_radius = 2;
    const std::size_t bs = static_cast<std::size_t>(base.block_size);
    auto x = random_tensor(bs * 40, seed++);
    for (auto& v : x) v = std::isfinite(v) ? v : 1.0F;
    std::vector<float> qb(x.size()), qs(x.size());
    lb::quantize(base, x, qb, std::vector<std::size_t>{x.size()});
    lb::quantize(search, x, qs, std::vector<std::size_t>{x.size()});
    for (std::size_t b0 = 0; b0 < x.size(); b0 += bs) {
      INFO(name << " block " << b0 / bs);
      CHECK(block_sse(x, qs, b0, b0 + bs) <= block_sse(x, qb, b0, b0 + bs));
    }
  }
}

TEST_CASE("quantize in place equals quantize out of place", "[block][property]") {
  std::uint64_t seed = 3000;
  for (const auto& name : lb::BlockRegistry::builtin().names()) {
    for (int axis : {-1, 0}) {
      lb::BlockFormat f = lb::BlockRegistry::builtin().get(name);
      f.axis = axis;
      const std::vector<std::size_t> shape{40, 33};
      auto x = random_tensor(40 * 33, seed++);
      x[5] = std::numeric_limits<float>::infinity();  // forces a generic block/column beside fast ones
      std::vector<float> out(x.size());
      lb::quantize(f, x, out, shape);
      lb::quantize(f, x, x, shape);
      for (std::size_t i = 0; i < x.size(); ++i) {
        INFO(name << " axis " << axis << " i " << i);
        REQUIRE(same(x[i], static_cast<double>(out[i])));
      }
    }
  }
}

TEST_CASE("stochastic rounding is reproducible per seed and returns a grid neighbour", "[block][property]") {
  lb::BlockFormat f = lb::BlockRegistry::builtin().get("mxfp4");
  f.element_options.rounding = RoundingMode::stochastic;
  f.element_options.seed = 5;
  const auto x = random_tensor(32 * 64, 4000);
  std::vector<float> a(x.size()), b(x.size()), dn(x.size()), up(x.size());
  lb::quantize(f, x, a, std::vector<std::size_t>{x.size()});
  lb::quantize(f, x, b, std::vector<std::size_t>{x.size()});
  lb::BlockFormat fd = f, fu = f;
  fd.element_options.rounding = RoundingMode::toward_negative;
  fu.element_options.rounding = RoundingMode::toward_positive;
  lb::quantize(fd, x, dn, std::vector<std::size_t>{x.size()});
  lb::quantize(fu, x, up, std::vector<std::size_t>{x.size()});
  std::size_t differ_from_down = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO("i " << i << " x " << x[i]);
    REQUIRE(same(a[i], static_cast<double>(b[i])));
    const bool neighbour = same(a[i], static_cast<double>(dn[i])) || same(a[i], static_cast<double>(up[i])) ||
                           (a[i] == 0.0F && (dn[i] == 0.0F || up[i] == 0.0F));
    REQUIRE(neighbour);
    if (a[i] != dn[i]) ++differ_from_down;
  }
  CHECK(differ_from_down > 0);
  f.element_options.seed = 6;
  lb::quantize(f, x, b, std::vector<std::size_t>{x.size()});
  CHECK(a != b);
}

}  // namespace
