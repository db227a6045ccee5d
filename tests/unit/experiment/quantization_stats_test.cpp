// metrics::quantization_stats (what `lpemu quantize --stats` prints) against independent counts.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/metrics/metrics.hpp"

namespace {

using namespace lpemu;

TEST_CASE("quantization_stats counts saturation for non-power-of-two scales", "[metrics][unit][regression]") {
  const block::BlockFormat& f = block::BlockRegistry::builtin().get("nvfp4");
  std::mt19937_64 rng(3);
  std::normal_distribution<float> n(0.0F, 1.0F);
  const std::vector<std::size_t> shape{8, 64};
  std::vector<float> x(512), q(512);
  for (auto& v : x) v = n(rng);
  block::quantize(f, x, q, shape);
  const auto s = metrics::quantization_stats(f, x, q, shape);
  // Independent count: in each block of 16 along the last axis, the elements at the block's largest
  // |q| are at the FP4 maximum (the block's amax element always reaches it under amax/6 scaling).
  std::size_t want = 0;
  for (std::size_t b = 0; b < x.size() / 16; ++b) {
    float m = 0;
    for (std::size_t i = 0; i < 16; ++i) m = std::max(m, std::fabs(q[b * 16 + i]));
    for (std::size_t i = 0; i < 16; ++i) want += (m != 0 && std::fabs(q[b * 16 + i]) == m) ? 1 : 0;
  }
  CHECK(want >= x.size() / 16);
  CHECK(s.saturated == want);
  CHECK(s.count == x.size());
  CHECK(s.clipped <= s.saturated);
  CHECK(s.sqnr_db() > 15.0);
}

TEST_CASE("quantization_stats: finite inputs that became NaN are unbounded error",
          "[metrics][unit][regression]") {
  const block::BlockFormat& f = block::BlockRegistry::builtin().get("mxfp8_e4m3");
  std::vector<float> x(64, 0.5F), q(64);
  x[3] = std::numeric_limits<float>::quiet_NaN();  // the first block's scale becomes NaN
  const std::vector<std::size_t> shape{64};
  block::quantize(f, x, q, shape);
  const auto s = metrics::quantization_stats(f, x, q, shape);
  CHECK(s.nonfinite_inputs == 1);
  CHECK(s.nonfinite_outputs == 31);
  CHECK(s.count == 63);
  CHECK(s.sqnr_db() == -std::numeric_limits<double>::infinity());
  CHECK(std::isinf(s.max_abs));
  // An element format without scale: saturated means |q| is the format's largest finite value.
  const format::Format& e = format::Registry::builtin().get("fp8_e4m3");
  const std::vector<float> y{1000.0F, 448.0F, 1.0F, 0.0F}, qy{448.0F, 448.0F, 1.0F, 0.0F};
  const auto t = metrics::quantization_stats(e, y, qy);
  CHECK(t.saturated == 2);
  CHECK(t.clipped == 1);
  CHECK(t.fraction(t.saturated) == 0.5);
  CHECK(t.mse() == Approx(552.0 * 552.0 / 4));
}

}  // namespace
