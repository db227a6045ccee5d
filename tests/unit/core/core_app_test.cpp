// The core model inside the application layer: the softmax unit's cycles in a model layer or step
// (against counts worked by hand from the shape and the core record), the tiling search that splits
// M so that partial sums stay on chip (against the fold formulas worked by hand), and `lpemu cost
// --core`, whose GEMM times are the core model's cycles / clock.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/app/core.hpp"
#include "lpemu/app/price.hpp"
#include "lpemu/app/proposal.hpp"
#include "lpemu/core/core.hpp"
#include "lpemu/core/model.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/experiment/experiment.hpp"
#include "lpemu/experiment/sweep.hpp"
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

  // The softmax unit's energy: 29.4 pJ per score (example_fp8's [softmax] pj_per_element).
  double gemm_energy = 0;
  for (const core::GemmCycles& g : r.gemms) gemm_energy += g.energy_pj * static_cast<double>(g.gemm.count);
  CHECK(r.softmax[0].energy_pj == 4096 * 29.4);
  CHECK(r.totals.softmax_energy_pj == 64 * (4096 * 29.4));
  CHECK(r.totals.energy_pj == Approx(gemm_energy + 64 * 4096 * 29.4).epsilon(1e-12));

  // Prefill of the whole step, the causal mask not exploited: 2048 x 4 rows by 2048 keys per
  // sequence, K/V head and block.
  q.causal_block = 0;
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

TEST_CASE("prefill attention exploits the causal mask per block of query positions", "[core]") {
  experiment::Context ctx;
  app::CoreRequest q;
  q.core = "example_fp8";
  q.model = "llama3_8b";  // 8 K/V heads, groups of 4 query heads, head_dim 128
  q.phase = "prefill";
  q.batch = 1;
  q.context = 512;
  q.causal_block = 128;
  const app::CoreResult r = app::simulate_core(ctx, q);
  // Blocks j = 0..3 of 128 positions (512 rows of the group), each against 128 (j + 1) keys.
  std::vector<const core::GemmCycles*> qk, pv;
  for (const core::GemmCycles& g : r.gemms) {
    if (g.gemm.name.rfind("qk", 0) == 0) qk.push_back(&g);
    if (g.gemm.name.rfind("pv", 0) == 0) pv.push_back(&g);
  }
  REQUIRE(qk.size() == 4);
  REQUIRE(pv.size() == 4);
  REQUIRE(r.softmax.size() == 4);
  double macs = 0;
  for (long long j = 0; j < 4; ++j) {
    const auto i = static_cast<std::size_t>(j);
    CHECK(qk[i]->gemm.name == "qk[" + std::to_string(j) + "]");
    CHECK(qk[i]->gemm.m == 512);
    CHECK(qk[i]->gemm.n == 128 * (j + 1));
    CHECK(qk[i]->gemm.k == 128);
    CHECK(qk[i]->gemm.count == 8);
    CHECK(pv[i]->gemm.m == 512);
    CHECK(pv[i]->gemm.n == 128);
    CHECK(pv[i]->gemm.k == 128 * (j + 1));
    CHECK(r.softmax[i].rows == 512);
    CHECK(r.softmax[i].cols == 128 * (j + 1));
    CHECK(r.softmax[i].cycles == 32 + 512 * 128 * (j + 1) / 128);
    macs += (qk[i]->macs + pv[i]->macs) * 8;
  }
  // (1 + 2 + 3 + 4) / (4 x 4) = 5/8 of the full square's 2 x 2048 x 512 x 128 MACs per K/V head.
  CHECK(macs == 2.0 * 2048 * 512 * 128 * 8 * 5 / 8);
  // Without the mask (0), or with one block covering the context, the whole square as one GEMM.
  for (const long long block : {0LL, 512LL, 4096LL}) {
    q.causal_block = block;
    const app::CoreResult full = app::simulate_core(ctx, q);
    REQUIRE(full.softmax.size() == 1);
    CHECK(full.softmax[0].rows == 2048);
    CHECK(full.softmax[0].cols == 512);
    for (const core::GemmCycles& g : full.gemms) {
      if (g.gemm.name == "qk") CHECK((g.gemm.m == 2048 && g.gemm.n == 512 && g.gemm.k == 128));
    }
  }
  // Decode is unchanged by the block: one query row per head against the whole cache.
  q.phase = "decode";
  q.causal_block = 128;
  const app::CoreResult dec = app::simulate_core(ctx, q);
  REQUIRE(dec.softmax.size() == 1);
  CHECK(dec.softmax[0].rows == 4);
  CHECK(dec.softmax[0].cols == 512);
  q.causal_block = -1;
  q.phase = "prefill";
  REQUIRE_THROWS_WITH(app::simulate_core(ctx, q), Catch::Contains("causal_block = -1"));
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

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The GEMM ops of a priced workload run one by one on `c`, each with its own datapath record:
// sum of count x (total cycles, MACs, energy) and of count x peak MACs x busy cycles.
struct Summed {
  double cycles = 0, macs = 0, energy_j = 0, peak_cycles = 0;
};
Summed sum_gemms(const core::Core& c, const datapath::DatapathRegistry& dps, const cost::Workload& w) {
  Summed s;
  for (const cost::Op& op : w.ops) {
    if (op.kind != "gemm") continue;
    const datapath::Datapath& dp = dps.get(op.datapath);
    const core::GemmCycles g =
        core::simulate_gemm(c, dp, {"g", std::llround(op.m), std::llround(op.n), std::llround(op.k), 1});
    const auto n = static_cast<double>(op.count);
    s.cycles += static_cast<double>(g.total_cycles) * n;
    s.macs += op.m * op.k * op.n * n;
    s.energy_j += g.energy_pj * 1e-12 * n;
    s.peak_cycles += core::peak_macs_per_cycle(c, core::lane_of(c, dp)) *
                     static_cast<double>(g.total_cycles - g.latency_cycles) * n;
  }
  return s;
}

TEST_CASE("a sweep's [cost] core: each plan's core columns equal lpemu cost --core on its plan file",
          "[core][experiment]") {
  test::Scratch scratch("lpemu_core_sweep");
  experiment::Context ctx;
  ctx.data_dirs = {test::source_path("")};
  const std::string head = "name = \"c\"\n[source]\nmodel = \"" +
                           test::source_path("data/models/stories260K/model.h5") + "\"\ntext = \"" +
                           test::source_path("data/models/stories260K/paragraph.txt") +
                           "\"\nmax_tokens = 16\n[cost]\ntarget = \"h100_sxm\"\nshape = \"llama3_8b\"\n"
                           "batch = 8\ncontext = 1024\n";
  const std::string grid = "[grid]\nformats = [\"bf16\", \"fp8_e4m3\"]\n";
  const auto with =
      experiment::parse_experiment_toml(head + "core = \"example_fp8\"\n" + grid, scratch.dir / "with.toml");
  const auto without = experiment::parse_experiment_toml(head + grid, scratch.dir / "without.toml");
  CHECK(with.cost.core == "example_fp8");
  CHECK(without.cost.core.empty());
  CHECK(with.fingerprint() != without.fingerprint());
  experiment::SweepOptions opt;
  opt.out = scratch.dir / "with";
  const auto files = experiment::run_sweep(with, ctx.toolbox(), opt);
  opt.out = scratch.dir / "without";
  const auto plain = experiment::run_sweep(without, ctx.toolbox(), opt);
  REQUIRE(files.plans.size() == 2);
  REQUIRE(plain.plans.size() == 2);
  const core::Core c = core::load_core("example_fp8");
  for (std::size_t i = 0; i < 2; ++i) {
    const experiment::PlanResult r =
        experiment::load_plan_result(scratch.dir / "with" / "plans" / (i == 0 ? "0000.h5" : "0001.h5"));
    INFO(r.label);
    // `lpemu cost --plan out/plans/NNNN.toml --core example_fp8` on the same setup.
    app::PriceRequest q;
    q.target = "h100_sxm";
    q.model = "llama3_8b";
    q.plan = (scratch.dir / "with" / "plans" / (i == 0 ? "0000.toml" : "0001.toml")).string();
    q.setup.phase = "decode";
    q.setup.batch = 8;
    q.setup.context = 1024;
    q.core = "example_fp8";
    const app::PriceResult priced = app::price(ctx, q);
    REQUIRE(priced.phases.size() == 1);
    REQUIRE(priced.phases[0].core);
    const experiment::CoreTotals& t = *priced.phases[0].core;
    CHECK(r.cost.core == "example_fp8");
    CHECK(r.cost.core_cycles == t.cycles);
    CHECK(r.cost.core_seconds == t.seconds);
    CHECK(r.cost.core_utilization == t.utilization);
    CHECK(r.cost.core_energy_j == t.energy_j);
    CHECK(r.cost.tokens_per_s == priced.phases[0].roofline.tokens_per_s());
    const app::Fields f = app::fields(priced)["phases"][0]["core_gemms"];
    CHECK(f["cycles"].get<double>() == t.cycles);
    // The same sums worked op by op with the core model (what `lpemu core --m --n --k` prints for each).
    const Summed s = sum_gemms(c, ctx.datapaths(), priced.phases[0].workload);
    CHECK(s.cycles > 0);
    CHECK(t.cycles == s.cycles);
    CHECK(t.seconds == Approx(s.cycles / 1.5e9).epsilon(1e-12));
    CHECK(t.macs == Approx(s.macs).epsilon(1e-12));
    CHECK(t.utilization == Approx(s.macs / s.peak_cycles).epsilon(1e-12));
    CHECK(t.energy_j == Approx(s.energy_j).epsilon(1e-12));
    // Without the key nothing changes: the roofline's tokens/s, no core columns or fields.
    q.core.clear();
    const app::PriceResult roof = app::price(ctx, q);
    CHECK_FALSE(roof.phases[0].core);
    CHECK_FALSE(app::fields(roof)["phases"][0].contains("core_gemms"));
    CHECK(plain.plans[i].cost.core.empty());
    CHECK(std::isnan(plain.plans[i].cost.core_cycles));
    CHECK(plain.plans[i].cost.tokens_per_s == roof.phases[0].roofline.tokens_per_s());
  }
  // A column in results.csv and the report's table; none without the key.
  CHECK_THAT(slurp(files.results_csv), Catch::Contains("0,bf16,core_cycles,"));
  CHECK_THAT(slurp(files.report_md), Catch::Contains("core cycles | core util | core energy J |"));
  CHECK_THAT(slurp(plain.results_csv), !Catch::Contains("core_cycles"));
  CHECK_THAT(slurp(plain.report_md), !Catch::Contains("core cycles"));
  // An unknown core is an error naming it, at parse time of a [cost] table it cannot price.
  const auto bad =
      experiment::parse_experiment_toml(head + "core = \"no_such_core\"\n" + grid, scratch.dir / "bad.toml");
  opt.out = scratch.dir / "bad";
  const auto badfiles = experiment::run_sweep(bad, ctx.toolbox(), opt);
  CHECK_THAT(badfiles.plans[0].cost.note, Catch::Contains("unknown core 'no_such_core'"));
  CHECK(std::isnan(badfiles.plans[0].cost.core_cycles));
}

TEST_CASE("a proposal with a core adds its core columns to summary.md, from the sweep's results",
          "[core][experiment]") {
  test::Scratch scratch("lpemu_core_proposal");
  experiment::Context ctx;
  ctx.data_dirs = {test::source_path("")};
  app::ProposalRequest q;
  q.format = "fp6_e2m3";
  q.out = (scratch.dir / "p").string();
  q.model = "stories260K";
  q.max_tokens = 16;
  q.core = "example_fp8";
  app::proposal(ctx, q);
  const std::string summary = slurp(scratch.dir / "p" / "summary.md");
  CHECK_THAT(summary, Catch::Contains("| core cycles | core util | core energy J |"));
  CHECK_THAT(summary, Catch::Contains("GEMMs timed on the core `example_fp8`"));
  CHECK_THAT(slurp(scratch.dir / "p" / "accuracy" / "experiment.toml"),
             Catch::Contains("core = \"example_fp8\""));
  // The bf16 row's core cycles are the sweep's, printed to 6 digits.
  const experiment::PlanResult bf16 =
      experiment::load_plan_result(scratch.dir / "p" / "accuracy" / "plans" / "0001.h5");
  REQUIRE(bf16.label == "bf16");
  char cycles[64];
  std::snprintf(cycles, sizeof cycles, "%.6g", bf16.cost.core_cycles);
  CHECK_THAT(summary, Catch::Contains("| bf16 | ") && Catch::Contains(std::string("| ") + cycles + " |"));
  // Without a core, no core columns.
  q.core.clear();
  q.out = (scratch.dir / "plain").string();
  app::proposal(ctx, q);
  CHECK_THAT(slurp(scratch.dir / "plain" / "summary.md"), !Catch::Contains("core cycles"));
  q.core = "no_such_core";
  q.out = (scratch.dir / "bad").string();
  REQUIRE_THROWS_AS(app::proposal(ctx, q), UnknownNameError);
}

}  // namespace
