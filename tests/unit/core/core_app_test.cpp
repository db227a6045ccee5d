// The core model inside the application layer: the softmax unit's cycles in a model layer or step
// (against counts worked by hand from the shape and the core record), the tiling search that splits
// M so that partial sums stay on chip (against the fold formulas worked by hand), and `lpemu cost
// --core`, whose GEMM times are the core model's cycles / clock.
#include <cmath>
#include <string>

#include <catch2/catch.hpp>

#include "lpemu/app/core.hpp"
#include "lpemu/app/price.hpp"
#include "lpemu/core/core.hpp"
#include "lpemu/core/model.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/context.hpp"
#include "support/test_support.hpp"

namespace {

using namespace lpemu;

TEST_CASE("a model layer's softmax runs on the core's softmax unit, serialised with the GEMMs", "[core]") {
  experiment::Context ctx;
  app::CoreRequest q;
  q.core = "example_fp8";  // [softmax] 128 scores per cycle, 32 cycles of latency; 1.5 GHz
  q.model = "llama3_8b";   // 32 query heads, 8 K/V heads: groups of 4
  q.phase = "decode";
  q.batch = 8;
  q.context = 1024;
  app::CoreResult r = app::simulate_core(ctx, q);
  REQUIRE(r.softmax.size() == 1);
  // Decode: per sequence and K/V head, 4 query rows by 1024 keys = 4096 scores: 32 + 4096 / 128.
  CHECK(r.softmax[0].rows == 4);
  CHECK(r.softmax[0].cols == 1024);
  CHECK(r.softmax[0].count == 8 * 8);
  CHECK(r.softmax[0].cycles == 32 + 32);
  CHECK(r.softmax[0].seconds == 64 / 1.5e9);
  double gemm_cycles = 0;
  for (const core::GemmCycles& g : r.gemms) gemm_cycles += static_cast<double>(g.total_cycles * g.gemm.count);
  CHECK(r.totals.softmax_cycles == 64.0 * 64);
  CHECK(r.totals.total_cycles == gemm_cycles + 64.0 * 64);

  // Prefill of the whole step: 2048 x 4 rows by 2048 keys per sequence, K/V head and block.
  q.phase = "prefill";
  q.batch = 2;
  q.context = 2048;
  q.scope = "step";
  r = app::simulate_core(ctx, q);
  REQUIRE(r.softmax.size() == 1);
  CHECK(r.softmax[0].count == 2 * 8 * 32);
  CHECK(r.softmax[0].cycles == 32 + 2048LL * 4 * 2048 / 128);
  CHECK(r.totals.softmax_cycles == static_cast<double>((32 + 2048LL * 4 * 2048 / 128) * 2 * 8 * 32));

  // A core without a [softmax] unit counts the GEMMs only; simulating a softmax on it is an error.
  q.core = "scalesim_google";
  q.datapath = "generic_fp8";
  r = app::simulate_core(ctx, q);
  CHECK(r.softmax.empty());
  CHECK(r.totals.softmax_cycles == 0);
  REQUIRE_THROWS_WITH(core::simulate_softmax(r.core, "s", 1, 1, 1), Catch::Contains("has no [softmax] unit"));
  REQUIRE_THROWS_AS(core::simulate_softmax(core::load_core("example_fp8"), "s", 0, 1, 1), ShapeError);
}

TEST_CASE("the tiling search splits M so that a 256-wide partial-sum tile stays on chip", "[core]") {
  const auto& fp8 = datapath::DatapathRegistry::builtin().get("generic_fp8");
  // example_fp8 at 256 x 256: C's scratchpad is 2 MiB, 1 MiB working half; FP32 partial sums.
  const core::Core search = core::with_array(core::load_core("example_fp8"), 256, 256);
  core::Core folds = search;
  folds.tiling = core::Tiling::folds;
  const core::Gemm q_proj{"q_proj", 2048, 8192, 8192, 1};  // Llama-3-70B prefill of 2048 tokens
  const core::GemmCycles s = core::simulate_gemm(search, fp8, q_proj);
  const core::GemmCycles f = core::simulate_gemm(folds, fp8, q_proj);
  // 2048 x 256 x 4 bytes = 2 MiB does not fit 1 MiB; 1024 rows do: two pieces of M.
  CHECK(f.splits == 1);
  CHECK(s.splits == 2);
  // 32 x 32 folds of 2 x 256 + 256 + 2048 - 2 = 2814 cycles unsplit; split, each piece pays the
  // 766 cycles of weight load, fill and drain again.
  CHECK(f.compute_cycles == 1024LL * 2814);
  CHECK(s.compute_cycles == 1024LL * (2 * 766 + 2048));
  // Split, only the 16-bit outputs leave C's scratchpad; unsplit, partial sums spill.
  CHECK(s.c.dram_bytes == 2048.0 * 8192 * 2);
  CHECK(f.c.dram_bytes > s.c.dram_bytes);
  CHECK(s.total_cycles < f.total_cycles);
  // A GEMM whose partial sums fit is not split.
  CHECK(core::simulate_gemm(search, fp8, {"small", 512, 8192, 8192, 1}).splits == 1);
}

TEST_CASE("lpemu cost --core: each GEMM's time is the core model's cycles / clock; without it unchanged",
          "[core][cost]") {
  experiment::Context ctx;
  ctx.data_dirs = {test::source_path("")};
  app::PriceRequest q;
  q.target = "h100_sxm";
  q.model = "llama3_8b";
  q.plan = "bf16";
  q.setup.phase = "decode";
  q.setup.batch = 16;
  q.setup.context = 2048;
  const app::PriceResult roof = app::price(ctx, q);
  q.core = "example_fp8";
  const app::PriceResult on_core = app::price(ctx, q);
  REQUIRE(roof.phases.size() == 1);
  REQUIRE(on_core.phases.size() == 1);
  CHECK(on_core.core == "example_fp8");
  const core::Core c = core::load_core("example_fp8");
  const cost::Workload& w0 = roof.phases[0].workload;
  const cost::Workload& w1 = on_core.phases[0].workload;
  REQUIRE(w0.ops.size() == w1.ops.size());
  const double bw = roof.target.bandwidth_gb_s * 1e9;
  double sum = 0;
  int gemms = 0;
  for (std::size_t i = 0; i < w0.ops.size(); ++i) {
    const cost::Op& a = w0.ops[i];
    const cost::Op& b = w1.ops[i];
    INFO(a.name);
    if (a.kind == "gemm") {
      ++gemms;
      const core::GemmCycles g =
          core::simulate_gemm(c, ctx.datapaths().get(b.datapath),
                              {"g", std::llround(b.m), std::llround(b.n), std::llround(b.k), 1});
      CHECK(b.time_s == static_cast<double>(g.total_cycles) / 1.5e9);
      CHECK(b.compute_bound == g.compute_bound);
      // Without --core the roofline: the longer of compute at peak and DRAM traffic.
      CHECK(a.time_s == std::max(a.flops * a.passes / roof.target.peak_ops(a.rate_class), a.bytes / bw));
    } else {
      CHECK(b.time_s == a.time_s);  // attention and memory ops are the roofline's either way
    }
    CHECK(b.energy_j == a.energy_j);
    sum += static_cast<double>(b.count) * b.time_s;
  }
  CHECK(gemms >= 7);
  CHECK(on_core.phases[0].roofline.time_s == sum);
  CHECK(app::fields(on_core)["core"] == "example_fp8");
  CHECK(app::fields(roof)["core"] == "");

  q.setup.system = "dgx_h100";
  REQUIRE_THROWS_WITH(app::price(ctx, q), Catch::Contains("--core times the GEMMs of one device"));
  q.setup.system.clear();
  q.core = "no_such_core";
  REQUIRE_THROWS_AS(app::price(ctx, q), UnknownNameError);
}

}  // namespace
