// Analytic limits of the core model over random cores and GEMMs: cycles never below the MACs over
// the lanes nor below the DRAM bytes over the bandwidth, DRAM traffic never below each operand
// moved once, a mapping efficiency of exactly one when (and only when) the GEMM tiles the array,
// and a lane packing four FP4 products per cycle against one; the same for tensor-core style
// dot units (data/cores/h100_sm_like.toml), where utilisation is exactly one when the GEMM tiles the
// units and nothing stalls.
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

// A dot-unit core of random size: output tile, units, terms and bandwidth.
core::Core random_dot_core(std::mt19937_64& rng) {
  core::Core c = core::load_core("h100_sm_like");
  std::uniform_int_distribution<int> tile(1, 64), units(1, 64), terms(1, 32);
  c = core::with_array(c, tile(rng), tile(rng));
  c.dot_units = units(rng);
  c.dot_terms = terms(rng);
  c.a.kib = std::uniform_real_distribution<double>(0.5, 512)(rng);
  c.b.kib = std::uniform_real_distribution<double>(0.5, 512)(rng);
  c.dram_bytes_per_cycle = (rng() % 2) == 0 ? 1e9 : std::uniform_real_distribution<double>(0.5, 64)(rng);
  // A third without an L2; the others with one of random size, 1 to 4 times DRAM's bandwidth.
  if (rng() % 3 == 0) {
    c.l2 = {};
  } else {
    c.l2.kib = std::uniform_real_distribution<double>(64, 65536)(rng);
    c.l2.bytes_per_cycle = c.dram_bytes_per_cycle * std::uniform_real_distribution<double>(1, 4)(rng);
  }
  c.double_buffered = (rng() & 1) != 0;
  c.dram_latency_cycles = 0;
  // Hidden: the first buffer-full is resident at cycle 0, so that a run can go without a stall.
  c.first_fill = (rng() & 1) != 0 ? core::FirstFill::hidden : core::FirstFill::exposed;
  return c;
}

TEST_CASE(
    "dot units: cycles never below MACs / (units x terms) nor DRAM bytes / bandwidth; 100 % "
    "utilisation exactly when the GEMM tiles the units and nothing stalls",
    "[core][property]") {
  std::mt19937_64 rng(Catch::rngSeed());
  const char* lanes[] = {"h100_bf16_fp32", "generic_fp8", "generic_fp4"};
  int full = 0;
  for (int i = 0; i < 3000; ++i) {
    const core::Core c = random_dot_core(rng);
    const auto& dp = lane(lanes[rng() % 3]);
    const core::Lane l = core::lane_of(c, dp);
    // Half the GEMMs are multiples of the tile and of terms x pack, so that some tile exactly.
    std::uniform_int_distribution<long long> mult(1, 4), any(1, 300);
    const long long step = static_cast<long long>(c.dot_terms) * l.pack;
    const bool aligned = (rng() & 1) != 0;
    const core::Gemm g{"g", aligned ? c.rows * mult(rng) : any(rng), aligned ? c.cols * mult(rng) : any(rng),
                       aligned ? step * mult(rng) : any(rng), 1};
    const core::GemmCycles r = core::simulate_gemm(c, dp, g);
    INFO(core::to_toml(c) << "lane " << dp.name << " gemm " << g.m << "x" << g.n << "x" << g.k);
    const double peak = static_cast<double>(c.dot_units) * c.dot_terms * l.pack;
    CHECK(core::peak_macs_per_cycle(c, l) == peak);
    CHECK(static_cast<double>(r.total_cycles) >= r.macs / peak);
    // DRAM bytes moved after cycle 0 (all of them when the first fill is exposed).
    const double after_start =
        r.dram_bytes - (c.first_fill == core::FirstFill::hidden ? r.preloaded_bytes : 0.0);
    CHECK(static_cast<double>(r.total_cycles) >= after_start / c.dram_bytes_per_cycle);
    if (c.l2.kib > 0) {  // nor below L2 bytes / L2 bandwidth; DRAM never moves more than the L2
      const double l2_after =
          r.l2_bytes - (c.first_fill == core::FirstFill::hidden ? r.preloaded_bytes : 0.0);
      CHECK(static_cast<double>(r.total_cycles) >= l2_after / c.l2.bytes_per_cycle);
      CHECK(r.dram_bytes <= r.l2_bytes);
    }
    CHECK(r.total_cycles == r.compute_cycles + r.sram_stall_cycles + r.dram_stall_cycles);
    CHECK(r.latency_cycles == l.pipeline_depth - 1);
    CHECK(r.utilization <= 1.0);
    const bool tiles = g.m % c.rows == 0 && g.n % c.cols == 0 && g.k % step == 0 &&
                       (static_cast<long long>(c.rows) * c.cols * (g.k / step)) % c.dot_units == 0;
    const bool stalls = r.dram_stall_cycles > 0 || r.sram_stall_cycles > 0;
    CHECK((r.utilization == 1.0) == (tiles && !stalls));
    if (tiles && !stalls) ++full;
  }
  CHECK(full > 50);  // the equivalence was exercised on both sides
}

TEST_CASE("dot units with FP4 at 4x the FP16 products: 4x fewer issue cycles, the same DRAM-bound time",
          "[core][property]") {
  core::Core wide = core::load_core("h100_sm_like");  // FP4 packs 4 products per term
  core::Core narrow = wide;
  narrow.pack.clear();
  narrow.port_bits = 0;  // one product per term, whatever the width
  const auto& fp4 = lane("generic_fp4");
  REQUIRE(core::lane_of(wide, fp4).pack == 4);
  REQUIRE(core::lane_of(narrow, fp4).pack == 1);
  core::Core wide_fast = wide, narrow_fast = narrow;
  wide_fast.dram_bytes_per_cycle = narrow_fast.dram_bytes_per_cycle = 1e9;
  wide_fast.l2.bytes_per_cycle = narrow_fast.l2.bytes_per_cycle = 1e9;
  wide_fast.first_fill = narrow_fast.first_fill = core::FirstFill::hidden;  // no stall at all
  const core::Gemm big{"big", 1024, 1024, 8192, 1};
  const core::GemmCycles w = core::simulate_gemm(wide_fast, fp4, big);
  const core::GemmCycles n = core::simulate_gemm(narrow_fast, fp4, big);
  REQUIRE(w.compute_bound);
  CHECK(n.compute_cycles - n.latency_cycles == 4 * (w.compute_cycles - w.latency_cycles));
  CHECK(w.utilization == 1.0);
  CHECK(n.utilization == 1.0);
  // Hand count: 8 x 4 tiles of 128 x 256 outputs, 8192 / (16 x 4) = 128 steps each, 128 units.
  CHECK(w.compute_cycles - w.latency_cycles == 32LL * 128 * 256 * 128 / 128);
  // One decode token through a 8192 x 8192 weight matrix, on 16-row output tiles (a 128-row tile
  // would spend 128x the issue slots on padding and be compute bound).
  wide = core::with_array(wide, 16, 256);
  narrow = core::with_array(narrow, 16, 256);
  const core::Gemm token{"token", 1, 8192, 8192, 1};
  const core::GemmCycles wt = core::simulate_gemm(wide, fp4, token);
  const core::GemmCycles nt = core::simulate_gemm(narrow, fp4, token);
  REQUIRE(!wt.compute_bound);
  REQUIRE(!nt.compute_bound);
  CHECK(wt.total_cycles == nt.total_cycles);
  CHECK(wt.dram_bytes == nt.dram_bytes);
}

}  // namespace
