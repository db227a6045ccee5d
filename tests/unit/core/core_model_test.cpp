// The core model against SCALE-Sim v2 (https://github.com/scalesim-project/scale-sim-v2 at
// 22f88b17f1dd3160e18bff5df165035bf8146e83), and the core record's reader and writer.
//
// Every reference number below was produced by running SCALE-Sim v2 at that commit (python3,
// scalesim/single_layer_sim.py over one GEMM layer, ifmap = A [M,K], filter = B [K,N], as its
// topology_utils.load_arrays_gemm() maps a GEMM_mnk row) with its bundled configs/scale.cfg,
// configs/eyeriss.cfg and configs/google.cfg, the dataflow set to each of os, ws and is, over the
// layers of its bundled topologies/GEMM_mnk/{NCF,gpt2,transformer_partial,test_mnk_input,gnmt}.csv
// (those whose trace fits a quick run) plus three shapes of our own: a decode-like 1x4096x1024, a
// skinny 8x1000x700 and 33x17x45, none of which tiles the arrays. Columns: config, dataflow,
// layer, M, N, K, SCALE-Sim's total cycles (with InterfaceBandwidth = CALC it reports no stalls),
// its ifmap SRAM reads and its filter SRAM reads.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "lpemu/app/core.hpp"
#include "lpemu/core/core.hpp"
#include "lpemu/core/model.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/pricing.hpp"
#include "support/test_support.hpp"

namespace {

namespace core = lpemu::core;

struct Ref {
  const char* config;
  const char* dataflow;
  const char* layer;
  long long m, n, k;
  long long total_cycles, ifmap_sram_reads, filter_sram_reads;
};

const Ref kScaleSim[] = {
    {"scale", "os", "NCF:1", 256, 128, 2048, 67519, 2097152, 2097152},
    {"scale", "os", "NCF:2", 128, 64, 2048, 16879, 524288, 524288},
    {"scale", "os", "NCF:8", 2048, 128, 64, 32255, 524288, 524288},
    {"scale", "os", "NCF:9", 2048, 64, 128, 24319, 524288, 524288},
    {"scale", "os", "NCF:10", 128, 1, 2048, 8439, 262144, 8192},
    {"scale", "os", "NCF:11", 2048, 1, 128, 12159, 262144, 8192},
    {"scale", "os", "NCF:12", 2048, 128, 1, 16127, 8192, 8192},
    {"scale", "os", "gpt2:QKTV", 1024, 64, 1024, 69503, 2097152, 2097152},
    {"scale", "os", "transformer_partial:SD_MatMul_QK_00", 128, 64, 128, 1519, 32768, 32768},
    {"scale", "os", "transformer_partial:SD_MatMul_V_00", 128, 64, 128, 1519, 32768, 32768},
    {"scale", "os", "transformer_partial:MH_FC_DimRecast_0", 128, 512, 512, 36735, 1048576, 1048576},
    {"scale", "os", "test_mnk_input:Test_1", 128, 64, 256, 2543, 65536, 65536},
    {"scale", "os", "gnmt:6", 32, 2048, 1024, 69503, 2097152, 2097152},
    {"scale", "os", "gnmt:11", 32, 1024, 2048, 67519, 2097152, 2097152},
    {"scale", "os", "decode:b8", 8, 1000, 700, 24383, 179200, 700000},
    {"scale", "os", "odd:33x17x45", 33, 17, 45, 213, 1485, 1530},
    {"scale", "ws", "NCF:2", 128, 64, 2048, 28415, 524288, 131072},
    {"scale", "ws", "NCF:6", 2048, 128, 256, 68543, 2097152, 32768},
    {"scale", "ws", "NCF:7", 2048, 256, 128, 68543, 2097152, 32768},
    {"scale", "ws", "NCF:8", 2048, 128, 64, 17135, 524288, 8192},
    {"scale", "ws", "NCF:9", 2048, 64, 128, 17135, 524288, 8192},
    {"scale", "ws", "NCF:10", 128, 1, 2048, 14207, 262144, 2048},
    {"scale", "ws", "NCF:11", 2048, 1, 128, 8567, 262144, 128},
    {"scale", "ws", "NCF:12", 2048, 128, 1, 8567, 8192, 128},
    {"scale", "ws", "gpt2:QKT", 1024, 1024, 64, 71551, 2097152, 65536},
    {"scale", "ws", "gpt2:QKTV", 1024, 64, 1024, 71551, 2097152, 65536},
    {"scale", "ws", "transformer_partial:SD_MatMul_QK_00", 128, 64, 128, 1775, 32768, 8192},
    {"scale", "ws", "transformer_partial:SD_MatMul_V_00", 128, 64, 128, 1775, 32768, 8192},
    {"scale", "ws", "transformer_partial:MH_FC_DimRecast_0", 128, 512, 512, 56831, 1048576, 262144},
    {"scale", "ws", "test_mnk_input:Test_1", 128, 64, 256, 3551, 65536, 16384},
    {"scale", "ws", "gnmt:3", 2048, 1024, 32, 68543, 2097152, 32768},
    {"scale", "ws", "decode:b8", 8, 1000, 700, 71807, 179200, 700000},
    {"scale", "ws", "odd:33x17x45", 33, 17, 45, 253, 1485, 765},
    {"scale", "is", "NCF:2", 128, 64, 2048, 40447, 262144, 524288},
    {"scale", "is", "NCF:8", 2048, 128, 64, 28415, 131072, 524288},
    {"scale", "is", "NCF:9", 2048, 64, 128, 40447, 262144, 524288},
    {"scale", "is", "NCF:10", 128, 1, 2048, 24319, 262144, 8192},
    {"scale", "is", "NCF:11", 2048, 1, 128, 24319, 262144, 8192},
    {"scale", "is", "NCF:12", 2048, 128, 1, 14207, 2048, 8192},
    {"scale", "is", "gpt2:QKT", 1024, 1024, 64, 71551, 65536, 2097152},
    {"scale", "is", "transformer_partial:SD_MatMul_QK_00", 128, 64, 128, 2527, 16384, 32768},
    {"scale", "is", "transformer_partial:SD_MatMul_V_00", 128, 64, 128, 2527, 16384, 32768},
    {"scale", "is", "transformer_partial:MH_FC_DimRecast_0", 128, 512, 512, 38783, 65536, 1048576},
    {"scale", "is", "test_mnk_input:Test_1", 128, 64, 256, 5055, 32768, 65536},
    {"scale", "is", "gnmt:3", 2048, 1024, 32, 71551, 65536, 2097152},
    {"scale", "is", "gnmt:6", 32, 2048, 1024, 68543, 32768, 2097152},
    {"scale", "is", "gnmt:11", 32, 1024, 2048, 71551, 65536, 2097152},
    {"scale", "is", "decode:b8", 8, 1000, 700, 24067, 5600, 700000},
    {"scale", "is", "odd:33x17x45", 33, 17, 45, 443, 1485, 1530},
    {"eyeriss", "os", "NCF:2", 128, 64, 2048, 113959, 1310720, 1441792},
    {"eyeriss", "os", "NCF:8", 2048, 128, 64, 150479, 1310720, 1400832},
    {"eyeriss", "os", "NCF:9", 2048, 64, 128, 129959, 1310720, 1400832},
    {"eyeriss", "os", "NCF:10", 128, 1, 2048, 22791, 262144, 22528},
    {"eyeriss", "os", "NCF:11", 2048, 1, 128, 25991, 262144, 21888},
    {"eyeriss", "os", "NCF:12", 2048, 128, 1, 42749, 20480, 21888},
    {"eyeriss", "os", "transformer_partial:SD_MatMul_QK_00", 128, 64, 128, 8359, 81920, 90112},
    {"eyeriss", "os", "transformer_partial:SD_MatMul_V_00", 128, 64, 128, 8359, 81920, 90112},
    {"eyeriss", "os", "test_mnk_input:Test_1", 128, 64, 256, 15399, 163840, 180224},
    {"eyeriss", "os", "decode:b8", 8, 1000, 700, 52127, 403200, 700000},
    {"eyeriss", "os", "odd:33x17x45", 33, 17, 45, 413, 2970, 2295},
    {"eyeriss", "ws", "NCF:2", 128, 64, 2048, 140219, 1310720, 131072},
    {"eyeriss", "ws", "NCF:8", 2048, 128, 64, 125039, 1310720, 8192},
    {"eyeriss", "ws", "NCF:9", 2048, 64, 128, 114619, 1310720, 8192},
    {"eyeriss", "ws", "NCF:10", 128, 1, 2048, 28043, 262144, 2048},
    {"eyeriss", "ws", "NCF:11", 2048, 1, 128, 22923, 262144, 128},
    {"eyeriss", "ws", "NCF:12", 2048, 128, 1, 20839, 20480, 128},
    {"eyeriss", "ws", "transformer_partial:SD_MatMul_QK_00", 128, 64, 128, 9019, 81920, 8192},
    {"eyeriss", "ws", "transformer_partial:SD_MatMul_V_00", 128, 64, 128, 9019, 81920, 8192},
    {"eyeriss", "ws", "test_mnk_input:Test_1", 128, 64, 256, 18039, 163840, 16384},
    {"eyeriss", "ws", "odd:33x17x45", 33, 17, 45, 551, 2970, 765},
    {"eyeriss", "is", "NCF:2", 128, 64, 2048, 170999, 262144, 1310720},
    {"eyeriss", "is", "NCF:8", 2048, 128, 64, 144647, 131072, 1204224},
    {"eyeriss", "is", "NCF:9", 2048, 64, 128, 161699, 262144, 1204224},
    {"eyeriss", "is", "NCF:10", 128, 1, 2048, 63269, 262144, 20480},
    {"eyeriss", "is", "NCF:11", 2048, 1, 128, 59828, 262144, 18816},
    {"eyeriss", "is", "NCF:12", 2048, 128, 1, 24107, 2048, 18816},
    {"eyeriss", "is", "transformer_partial:SD_MatMul_QK_00", 128, 64, 128, 10999, 16384, 81920},
    {"eyeriss", "is", "transformer_partial:SD_MatMul_V_00", 128, 64, 128, 10999, 16384, 81920},
    {"eyeriss", "is", "test_mnk_input:Test_1", 128, 64, 256, 21999, 32768, 163840},
    {"eyeriss", "is", "decode:b8", 8, 1000, 700, 61123, 5600, 700000},
    {"eyeriss", "is", "odd:33x17x45", 33, 17, 45, 635, 1485, 2295},
    {"google", "os", "NCF:1", 256, 128, 2048, 2557, 524288, 262144},
    {"google", "os", "NCF:2", 128, 64, 2048, 2557, 262144, 131072},
    {"google", "os", "NCF:3", 256, 256, 2048, 2557, 524288, 524288},
    {"google", "os", "NCF:4", 2048, 256, 256, 6127, 524288, 524288},
    {"google", "os", "NCF:5", 2048, 256, 256, 6127, 524288, 524288},
    {"google", "os", "NCF:6", 2048, 128, 256, 6127, 524288, 262144},
    {"google", "os", "NCF:7", 2048, 256, 128, 5103, 262144, 262144},
    {"google", "os", "NCF:8", 2048, 128, 64, 4591, 131072, 65536},
    {"google", "os", "NCF:9", 2048, 64, 128, 5103, 262144, 65536},
    {"google", "os", "NCF:10", 128, 1, 2048, 2557, 262144, 2048},
    {"google", "os", "NCF:11", 2048, 1, 128, 5103, 262144, 1024},
    {"google", "os", "NCF:12", 2048, 128, 1, 4087, 2048, 1024},
    {"google", "os", "gpt2:QKTV", 1024, 64, 1024, 6135, 1048576, 262144},
    {"google", "os", "transformer_partial:MH_FC_DimReduce_VKQ_0", 128, 512, 1536, 4091, 393216, 786432},
    {"google", "os", "transformer_partial:SD_MatMul_QK_00", 128, 64, 128, 637, 16384, 8192},
    {"google", "os", "transformer_partial:SD_MatMul_V_00", 128, 64, 128, 637, 16384, 8192},
    {"google", "os", "transformer_partial:MH_FC_DimRecast_0", 128, 512, 512, 2043, 131072, 262144},
    {"google", "os", "transformer_partial:FF_A_0", 128, 512, 2048, 5115, 524288, 1048576},
    {"google", "os", "test_mnk_input:Test_1", 128, 64, 256, 765, 32768, 16384},
    {"google", "os", "decode:b8", 8, 1000, 700, 4839, 22400, 700000},
    {"google", "os", "odd:33x17x45", 33, 17, 45, 554, 1485, 765},
    {"google", "ws", "NCF:1", 256, 128, 2048, 8175, 524288, 262144},
    {"google", "ws", "NCF:2", 128, 64, 2048, 7151, 262144, 131072},
    {"google", "ws", "NCF:3", 256, 256, 2048, 8175, 524288, 524288},
    {"google", "ws", "NCF:4", 2048, 256, 256, 2813, 524288, 65536},
    {"google", "ws", "NCF:5", 2048, 256, 256, 2813, 524288, 65536},
    {"google", "ws", "NCF:6", 2048, 128, 256, 2813, 524288, 32768},
    {"google", "ws", "NCF:7", 2048, 256, 128, 2813, 262144, 32768},
    {"google", "ws", "NCF:8", 2048, 128, 64, 2813, 131072, 8192},
    {"google", "ws", "NCF:9", 2048, 64, 128, 2813, 262144, 8192},
    {"google", "ws", "NCF:10", 128, 1, 2048, 7151, 262144, 2048},
    {"google", "ws", "NCF:11", 2048, 1, 128, 2813, 262144, 128},
    {"google", "ws", "NCF:12", 2048, 128, 1, 2813, 2048, 128},
    {"google", "ws", "gpt2:QKT", 1024, 1024, 64, 7159, 262144, 65536},
    {"google", "ws", "gpt2:QKTV", 1024, 64, 1024, 7159, 1048576, 65536},
    {"google", "ws", "transformer_partial:SD_MatMul_QK_00", 128, 64, 128, 893, 16384, 8192},
    {"google", "ws", "transformer_partial:SD_MatMul_V_00", 128, 64, 128, 893, 16384, 8192},
    {"google", "ws", "transformer_partial:MH_FC_DimRecast_0", 128, 512, 512, 3575, 131072, 262144},
    {"google", "ws", "test_mnk_input:Test_1", 128, 64, 256, 893, 32768, 16384},
    {"google", "ws", "decode:b8", 8, 1000, 700, 9287, 22400, 700000},
    {"google", "ws", "odd:33x17x45", 33, 17, 45, 798, 1485, 765},
    {"google", "is", "NCF:1", 256, 128, 2048, 7151, 524288, 262144},
    {"google", "is", "NCF:2", 128, 64, 2048, 6639, 262144, 131072},
    {"google", "is", "NCF:3", 256, 256, 2048, 8175, 524288, 524288},
    {"google", "is", "NCF:4", 2048, 256, 256, 8175, 524288, 524288},
    {"google", "is", "NCF:5", 2048, 256, 256, 8175, 524288, 524288},
    {"google", "is", "NCF:6", 2048, 128, 256, 7151, 524288, 262144},
    {"google", "is", "NCF:7", 2048, 256, 128, 8175, 262144, 262144},
    {"google", "is", "NCF:8", 2048, 128, 64, 7151, 131072, 65536},
    {"google", "is", "NCF:9", 2048, 64, 128, 6639, 262144, 65536},
    {"google", "is", "NCF:10", 128, 1, 2048, 6135, 262144, 2048},
    {"google", "is", "NCF:11", 2048, 1, 128, 6135, 262144, 1024},
    {"google", "is", "NCF:12", 2048, 128, 1, 7151, 2048, 1024},
    {"google", "is", "gpt2:QKT", 1024, 1024, 64, 7159, 65536, 262144},
    {"google", "is", "transformer_partial:MH_FC_DimReduce_VKQ_0", 128, 512, 1536, 7667, 196608, 786432},
    {"google", "is", "transformer_partial:SD_MatMul_QK_00", 128, 64, 128, 829, 16384, 8192},
    {"google", "is", "transformer_partial:SD_MatMul_V_00", 128, 64, 128, 829, 16384, 8192},
    {"google", "is", "transformer_partial:MH_FC_DimRecast_0", 128, 512, 512, 2555, 65536, 262144},
    {"google", "is", "test_mnk_input:Test_1", 128, 64, 256, 829, 32768, 16384},
    {"google", "is", "decode:b8", 8, 1000, 700, 5297, 5600, 700000},
    {"google", "is", "odd:33x17x45", 33, 17, 45, 782, 1485, 765},
};

const lpemu::datapath::Datapath& int8_lane() {
  return lpemu::datapath::DatapathRegistry::builtin().get("generic_int8");
}

TEST_CASE("stall-free compute cycles equal SCALE-Sim v2's for every bundled config, dataflow and layer",
          "[core]") {
  for (const Ref& ref : kScaleSim) {
    const core::Core c = core::with_dataflow(core::load_core(std::string("scalesim_") + ref.config),
                                             core::parse_dataflow(ref.dataflow));
    const core::GemmCycles r = core::simulate_gemm(c, int8_lane(), {ref.layer, ref.m, ref.n, ref.k, 1});
    INFO(ref.config << " " << ref.dataflow << " " << ref.layer << " " << ref.m << "x" << ref.n << "x"
                    << ref.k);
    // SCALE-Sim's total is the index (from 0) of the cycle of the last output write,
    // double_buffered_scratchpad_mem.py: total_cycles = ofmap_serviced_cycles[-1]; lpemu counts the
    // cycles, one more.
    CHECK(r.compute_cycles == ref.total_cycles + 1);
    CHECK(r.a.sram_reads == static_cast<double>(ref.ifmap_sram_reads));
    CHECK(r.b.sram_reads == static_cast<double>(ref.filter_sram_reads));
  }
}

// SCALE-Sim v2 at the same commit with a user DRAM bandwidth of 10 words per cycle
// (InterfaceBandwidth = USER, Bandwidth = 10, as the bundled configs state it): runs whose
// operands fit their (half, double-buffered) scratchpads. SCALE-Sim reported 0 stall cycles for
// each; columns: config, dataflow, M, N, K, total cycles.
struct FitRef {
  const char* config;
  const char* dataflow;
  long long m, n, k, total_cycles;
};
const FitRef kScaleSimFits[] = {
    {"scale", "os", 128, 64, 256, 2543},  {"scale", "ws", 128, 64, 256, 3551},
    {"scale", "is", 128, 64, 256, 5055},  {"scale", "os", 100, 50, 70, 1055},
    {"scale", "is", 33, 17, 45, 443},     {"eyeriss", "ws", 64, 64, 64, 2999},
    {"eyeriss", "os", 50, 30, 100, 1859},
};

TEST_CASE("runs whose operands fit the scratchpads match SCALE-Sim v2's total cycles", "[core]") {
  for (const FitRef& ref : kScaleSimFits) {
    const core::Core c = core::with_dataflow(core::load_core(std::string("scalesim_") + ref.config),
                                             core::parse_dataflow(ref.dataflow));
    const core::GemmCycles r = core::simulate_gemm(c, int8_lane(), {"g", ref.m, ref.n, ref.k, 1});
    INFO(ref.config << " " << ref.dataflow << " " << ref.m << "x" << ref.n << "x" << ref.k);
    CHECK(r.total_cycles == ref.total_cycles + 1);
    CHECK(r.dram_stall_cycles == 0);
    CHECK(r.sram_stall_cycles == 0);
  }
}

TEST_CASE("the kernel-level hook gives the core model's time", "[core]") {
  const core::Core c = core::load_core("example_fp8");
  const auto& fp8 = lpemu::datapath::DatapathRegistry::builtin().get("generic_fp8");
  const core::GemmCycles r = core::simulate_gemm(c, fp8, {"g", 64, 4096, 8192, 1});
  const lpemu::cost::KernelEstimate e = lpemu::experiment::core_gemm_kernel(c, fp8, 64, 8192, 4096);
  CHECK(e.time_s == r.seconds);
  CHECK(e.time_s == static_cast<double>(r.total_cycles) / 1.5e9);
  CHECK(e.tiles == r.row_folds * r.col_folds);
  CHECK(e.compute_bound == r.compute_bound);
}

TEST_CASE("core records read back equal from what to_toml writes", "[core]") {
  for (const std::string& name : core::core_names()) {
    const core::Core c = core::load_core(name);
    const std::string text = core::to_toml(c);
    const core::Core back = core::parse_core_toml(text, name + ".toml");
    CHECK(back == c);
    CHECK(core::to_toml(back) == text);
  }
  const core::Core c = core::load_core("example_fp8_fp6_fp4");
  REQUIRE(c.pack.size() == 2);
  CHECK(c.pack[1].bits == 4);
  CHECK(c.pack[1].products == 4);
}

TEST_CASE("core records: bad fields are errors naming file, field and expectation", "[core]") {
  const std::string good = core::to_toml(core::load_core("scalesim_scale"));
  std::string bad = good;
  bad.replace(bad.find("rows = 32"), 9, "rows = 0");
  REQUIRE_THROWS_WITH(core::parse_core_toml(bad, "x.toml"),
                      "x.toml:8: field 'array.rows' = 0: expected a positive number of rows");
  bad = good;
  bad.replace(bad.find("dataflow = \"os\""), 15, "dataflow = \"xs\"");
  REQUIRE_THROWS_WITH(core::parse_core_toml(bad, "x.toml"), Catch::Contains("array.dataflow"));
  REQUIRE_THROWS_AS(core::load_core("no_such_core"), lpemu::UnknownNameError);
  REQUIRE_THROWS_AS(core::simulate_gemm(core::load_core("scalesim_scale"), int8_lane(), {"g", 0, 1, 1, 1}),
                    lpemu::ShapeError);
}

}  // namespace

namespace {

// A small dot-unit core: 16 units of 4 terms into a 16 x 16 output tile, 8-bit scratchpad words,
// ample DRAM, the first fill resident; A's scratchpad delivers `a_words` words per cycle.
core::Core dot_core(int a_words) {
  return core::parse_core_toml(
      "name = \"dot_ports\"\nsource = \"test\"\nclock_ghz = 1\n"
      "[array]\nkind = \"dot\"\nrows = 16\ncols = 16\nunits = 16\nterms = 4\ndataflow = \"os\"\n"
      "lane = \"generic_fp8\"\nport_bits = 8\n"
      "[sram]\nword_bits = 8\n[sram.a]\nkib = 64\nwords_per_cycle = " +
          std::to_string(a_words) +
          "\n[sram.b]\nkib = 64\n[sram.c]\nkib = 64\n"
          "[dram]\nbytes_per_cycle = 1000\nfirst_fill = \"hidden\"\n",
      "dot_ports.toml");
}

}  // namespace

TEST_CASE("dot units: scratchpad words per cycle limit operand delivery", "[core]") {
  const auto& fp8 = lpemu::datapath::DatapathRegistry::builtin().get("generic_fp8");
  const core::Gemm g{"g", 16, 16, 64, 1};
  // One 16 x 16 tile over K = 64 at 4 terms: 16 x 16 x 16 dot steps on 16 units = 256 issue cycles;
  // the tile reads its 16 x 64 = 1024 elements of A in them, 4 per cycle.
  const core::GemmCycles free = core::simulate_gemm(dot_core(0), fp8, g);
  CHECK(free.cycles_per_fold == 256);
  CHECK(free.compute_cycles == 256 + free.latency_cycles);
  CHECK(free.a.sram_reads == 1024);
  CHECK(free.sram_stall_cycles == 0);
  CHECK(core::simulate_gemm(dot_core(4), fp8, g).sram_stall_cycles == 0);  // 4 one-byte words: enough
  const core::GemmCycles half = core::simulate_gemm(dot_core(2), fp8, g);  // 2 per cycle: twice as long
  CHECK(half.sram_stall_cycles == 256);
  CHECK(half.total_cycles == free.total_cycles + 256);
  const core::GemmCycles quarter = core::simulate_gemm(dot_core(1), fp8, g);
  CHECK(quarter.sram_stall_cycles == 3 * 256);
}

TEST_CASE("an L2 serves the re-reads of an operand that fits it; its bandwidth can bound", "[core]") {
  const auto& fp8 = lpemu::datapath::DatapathRegistry::builtin().get("generic_fp8");
  const core::Core l2 = core::load_core("h100_sm_like");  // [l2] 50 MiB at 22.77 bytes per cycle
  REQUIRE(l2.l2.kib == 51200);
  core::Core none = l2;
  none.l2 = {};
  // 1024 x 256 x 8192 in FP8 on 128 x 256 tiles: 8 row folds; neither A's 128-row slice (1 MiB) nor
  // B's 8192 x 256 (2 MiB) fits 57 KiB of working scratchpad, so B is re-read per row fold.
  const core::Gemm g{"g", 1024, 256, 8192, 1};
  const core::GemmCycles a = core::simulate_gemm(none, fp8, g);
  const core::GemmCycles b = core::simulate_gemm(l2, fp8, g);
  const double A = 1024.0 * 8192, B = 8192.0 * 256, C = 1024.0 * 256 * 2;
  CHECK(a.dram_bytes == A + 8 * B + C);
  CHECK(a.l2_bytes == 0);
  CHECK(b.l2_bytes == A + 8 * B + C);  // every fill passes through the L2
  CHECK(b.dram_bytes == A + B + C);    // B comes from DRAM once
  CHECK(b.b.dram_bytes == B);
  // Exposed first fill: 600 cycles of latency and each operand's 57 KiB working half.
  const double pre = 2 * 114 * 1024 * 0.5;
  CHECK(a.preloaded_bytes == pre);
  CHECK(a.total_cycles ==
        static_cast<long long>(std::ceil(600 + pre / 13.87 + (A + 8 * B + C - pre) / 13.87)));
  // With the L2, its 22.77 bytes per cycle bound the run (DRAM alone would take fewer cycles).
  CHECK((A + B + C - pre) / 13.87 < (A + 8 * B + C - pre) / 22.77);
  CHECK(b.total_cycles ==
        static_cast<long long>(std::ceil(600 + pre / 13.87 + (A + 8 * B + C - pre) / 22.77)));
  CHECK(b.total_cycles < a.total_cycles);
  // An L2 too small for B (1 MiB) changes no DRAM byte, only adds its own bandwidth limit.
  core::Core small = l2;
  small.l2.kib = 1024;
  CHECK(core::simulate_gemm(small, fp8, g).dram_bytes == a.dram_bytes);
}

TEST_CASE("user cores load from DIR/cores by name or as a .toml file; a taken name is an error", "[core]") {
  lpemu::test::Scratch scratch("lpemu_core_records");
  std::filesystem::create_directories(scratch.dir / "cores");
  core::Core mine = core::with_name(core::load_core("example_fp8"), "my_core", "a copy");
  std::ofstream(scratch.dir / "cores" / "my_core.toml") << core::to_toml(mine);
  const core::Core back = core::load_core("my_core", {scratch.dir});
  CHECK(back.name == "my_core");
  CHECK(back.rows == 128);
  CHECK(core::load_core((scratch.dir / "cores" / "my_core.toml").string()) == back);
  const auto names = core::core_names({scratch.dir});
  CHECK(std::find(names.begin(), names.end(), "my_core") != names.end());
  CHECK(std::is_sorted(names.begin(), names.end()));
  REQUIRE_THROWS_WITH(core::load_core("my_cor", {scratch.dir}),
                      Catch::Contains("unknown core 'my_cor'") && Catch::Contains("my_core"));
  // A user file reusing a built-in name.
  std::ofstream(scratch.dir / "cores" / "dup.toml") << core::to_toml(core::load_core("example_fp8"));
  REQUIRE_THROWS_WITH(core::load_core("my_core", {scratch.dir}),
                      (scratch.dir / "cores" / "dup.toml").string() +
                          ": name = \"example_fp8\": the core 'example_fp8' is already defined by "
                          "builtin:data/cores/example_fp8.toml; expected a name of its own");
}
