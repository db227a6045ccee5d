// GEMM kernel model: a GEMM that is exactly one wave runs at the measured in-wave rate; more tiles cost more
// waves (or a smaller tile); padding of edge tiles; split-K and memory-bound skinny shapes.
#include <catch2/catch.hpp>

#include "lpemu/cost/catalog.hpp"
#include "lpemu/cost/kernel.hpp"
#include "lpemu/cost/system.hpp"

namespace {

TEST_CASE("a GEMM that is exactly one wave runs at the measured in-wave rate", "[cost][cluster]") {
  lpemu::cost::Catalog cat(lpemu::format::Registry::builtin());
  const auto sys = lpemu::cost::load_system("dgx_h100");
  const auto& t = cat.target(sys.device);
  REQUIRE(sys.kernel_units == 132);
  // 12 x 11 = 132 tiles of 128 x 256: one full wave.
  const double m = 128 * 12, n = 256 * 11, k = 8192;
  const auto e = lpemu::cost::gemm_kernel(sys, t, "bf16", m, k, n, 0);
  CHECK(e.tiles == 132);
  CHECK(e.waves == 1);
  // H100 SXM's best measured BF16 GEMM: 794.5 of 989.4 TFLOP/s (Bekman, ML Engineering Open Book,
  // "Maximum Achievable Matmul FLOPS comparison table").
  CHECK(e.kernel_efficiency == Approx(794.5 / 989.4).epsilon(1e-12));
  CHECK(e.achievable_fraction == Approx(794.5 / 989.4).epsilon(1e-12));
  CHECK(e.compute_s == Approx(2 * m * n * k / 794.5e12));
  // 12 x 12 = 144 tiles of 128 x 256 would take two waves (the second 12/132 full, 2x the
  // time); 64-row tiles give 288 tiles in three half-length waves (1.5x): the kernel takes those.
  const auto e2 = lpemu::cost::gemm_kernel(sys, t, "bf16", 128 * 12, k, 256 * 12, 0);
  CHECK(e2.tile_m == 64);
  CHECK(e2.tiles == 288);
  CHECK(e2.waves == 3);
  CHECK(e2.wave_efficiency == Approx(288.0 / 396));
  CHECK(e2.compute_s == Approx(1.5 * e.compute_s));
  // m = 1 pads the smaller (64-row) tile: padding efficiency 1/64; decode-like GEMMs are memory bound.
  const auto e3 = lpemu::cost::gemm_kernel(sys, t, "bf16", 1, 8192, 8192, 8192.0 * 8192 * 2);
  CHECK(e3.tile_m == 64);
  CHECK(e3.padding_efficiency == Approx(1.0 / 64));
  CHECK_FALSE(e3.compute_bound);
  // 32 tiles on 132 units: split-K by floor(132 / 32) = 4, FP32 partials written and read once.
  CHECK(e3.split_k == 4);
  CHECK(e3.time_s == Approx((8192.0 * 8192 * 2 + 2 * 4 * 8192 * 4) / 3350e9));
}

}  // namespace
