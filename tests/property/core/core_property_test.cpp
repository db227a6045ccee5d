// Analytic limits of the core model over random cores and GEMMs: cycles never below the MACs over
// the lanes nor below the DRAM bytes over the bandwidth, DRAM traffic never below each operand
// moved once, a mapping efficiency of exactly one when (and only when) the GEMM tiles the array,
// and a lane packing four FP4 products per cycle against one.
#include <cmath>
#include <random>
#include <string>

#include <catch2/catch.hpp>

#include "lpemu/core/core.hpp"
#include "lpemu/core/model.hpp"
#include "lpemu/datapath/datapath.hpp"

namespace {

namespace core = lpemu::core;

const lpemu::datapath::Datapath& lane(const char* name) {
  return lpemu::datapath::DatapathRegistry::builtin().get(name);
}

core::Core random_core(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> dim(1, 300);
  std::uniform_int_distribution<int> df(0, 2);
  std::uniform_real_distribution<double> kib(0.5, 4096);
  std::uniform_real_distribution<double> bw(0.5, 512);
  core::Core c = core::load_core("example_fp8");
  c = core::with_array(c, dim(rng), dim(rng));
  c = core::with_dataflow(c, static_cast<core::Dataflow>(df(rng)));
  c.a.kib = kib(rng), c.b.kib = kib(rng), c.c.kib = kib(rng);
  c.dram_bytes_per_cycle = bw(rng);
  c.double_buffered = (rng() & 1) != 0;
  c.first_fill = core::FirstFill::exposed;
  c.a.words_per_cycle = static_cast<int>(rng() % 3) * 8;  // 0 (unlimited), 8 or 16 words per bank
  return c;
}

long long random_dim(std::mt19937_64& rng) {
  // Mostly small or skinny, sometimes large.
  std::uniform_int_distribution<long long> small(1, 70), large(1, 20000);
  return (rng() % 4) == 0 ? large(rng) : small(rng);
}

TEST_CASE("core cycles are never below MACs / lanes nor below DRAM bytes / bandwidth", "[core][property]") {
  std::mt19937_64 rng(Catch::rngSeed());
  const char* lanes[] = {"generic_fp8", "generic_fp4", "generic_fp16", "b200_mxfp4_fp32"};
  for (int i = 0; i < 3000; ++i) {
    core::Core c = random_core(rng);
    c.port_bits = static_cast<int>(rng() % 3) * 8;
    const auto& dp = lane(lanes[rng() % 4]);
    const core::Gemm g{"g", random_dim(rng), random_dim(rng), random_dim(rng), 1};
    const core::GemmCycles r = core::simulate_gemm(c, dp, g);
    const core::Lane l = core::lane_of(c, dp);
    INFO(core::to_toml(c) << "lane " << dp.name << " gemm " << g.m << "x" << g.n << "x" << g.k);
    const double lanes_per_cycle = static_cast<double>(c.rows) * c.cols * l.pack;
    CHECK(static_cast<double>(r.total_cycles) >= r.macs / lanes_per_cycle);
    CHECK(static_cast<double>(r.total_cycles) >= r.dram_bytes / c.dram_bytes_per_cycle);
    CHECK(r.total_cycles == r.compute_cycles + r.sram_stall_cycles + r.dram_stall_cycles);
    CHECK(r.dram_stall_cycles >= 0);
    CHECK(r.utilization <= 1.0);
    // Each operand moves at least once, in its own width (block scales included).
    const double once = (static_cast<double>(g.m) * static_cast<double>(g.k) * (l.a_bits + l.a_scale_bits) +
                         static_cast<double>(g.k) * static_cast<double>(g.n) * (l.b_bits + l.a_scale_bits) +
                         static_cast<double>(g.m) * static_cast<double>(g.n) * l.c_bits) /
                        8;
    CHECK(r.dram_bytes >= once * (1 - 1e-12));
    // Mapping efficiency is exactly one when the GEMM tiles the array, below one otherwise.
    const bool tiles = r.sr % c.rows == 0 && r.sc % c.cols == 0;
    CHECK((r.mapping_efficiency == 1.0) == tiles);
  }
}

TEST_CASE("operands that fit their scratchpads move once; mapping efficiency is one on a tiling GEMM",
          "[core][property]") {
  core::Core c = core::load_core("example_fp8");  // 128 x 128, weight stationary, MiBs of scratchpad
  const core::GemmCycles r = core::simulate_gemm(c, lane("generic_fp8"), {"g", 256, 512, 1024, 1});
  CHECK(r.mapping_efficiency == 1.0);
  CHECK(r.a.dram_bytes == 256.0 * 1024);
  CHECK(r.b.dram_bytes == 1024.0 * 512);
  CHECK(r.c.dram_bytes == 256.0 * 512 * 2);  // 16-bit outputs
}

TEST_CASE("an FP4 lane at 4x the FP16 lanes: 4x fewer compute cycles, the same DRAM-bound time",
          "[core][property]") {
  // One core whose lanes take 16 operand bits per cycle (four FP4 products), one whose lanes take
  // one FP4 product (the FP16 lane count), both running the same FP4 datapath on the same data.
  core::Core wide = core::with_lane(core::load_core("example_fp8"), "generic_fp4", 16);
  core::Core narrow = core::with_lane(wide, "generic_fp4", 0);
  const auto& fp4 = lane("generic_fp4");
  REQUIRE(core::lane_of(wide, fp4).pack == 4);
  REQUIRE(core::lane_of(narrow, fp4).pack == 1);
  for (const core::Dataflow df : {core::Dataflow::os, core::Dataflow::ws, core::Dataflow::is}) {
    wide = core::with_dataflow(wide, df);
    narrow = core::with_dataflow(narrow, df);
    // Compute bound (DRAM made ample): K a multiple of 4 x rows, so the folds along K shrink 4x.
    core::Core wide_fast = wide, narrow_fast = narrow;
    wide_fast.dram_bytes_per_cycle = narrow_fast.dram_bytes_per_cycle = 1e6;
    const core::Gemm big{"big", 4096, 4096, 65536, 1};
    const core::GemmCycles w = core::simulate_gemm(wide_fast, fp4, big);
    const core::GemmCycles n = core::simulate_gemm(narrow_fast, fp4, big);
    INFO(core::to_string(df));
    REQUIRE(w.compute_bound);
    REQUIRE(n.compute_bound);
    const int extra = core::lane_of(wide, fp4).pipeline_depth - 1;  // the wide lane's adder tree
    const long long folds = w.row_folds * w.col_folds;
    if (df == core::Dataflow::os) {
      // OS streams K through the lane: the same folds, each streaming 4x fewer steps.
      CHECK(n.row_folds * n.col_folds == folds);
      CHECK(n.t == 4 * w.t);
      CHECK(n.cycles_per_fold - n.t == w.cycles_per_fold - extra - w.t);
    } else {
      // WS and IS map K onto the rows: 4x fewer folds of the same length.
      CHECK(n.compute_cycles == 4 * (w.compute_cycles - folds * extra));
    }
    CHECK(static_cast<double>(n.compute_cycles) / static_cast<double>(w.compute_cycles) > 3.9);
    // Memory bound: one decode token through a 8192 x 8192 weight matrix.
    // (at 4 bytes per cycle, so that even output stationary, which streams K, waits for DRAM).
    core::Core wide_slow = wide, narrow_slow = narrow;
    wide_slow.dram_bytes_per_cycle = narrow_slow.dram_bytes_per_cycle = 4;
    const core::Gemm token{"token", 1, 8192, 8192, 1};
    const core::GemmCycles wt = core::simulate_gemm(wide_slow, fp4, token);
    const core::GemmCycles nt = core::simulate_gemm(narrow_slow, fp4, token);
    REQUIRE(!wt.compute_bound);
    REQUIRE(!nt.compute_bound);
    CHECK(wt.total_cycles == nt.total_cycles);
    CHECK(wt.dram_bytes == nt.dram_bytes);
  }
}

}  // namespace
