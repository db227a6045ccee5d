// Hardware targets: every shipped file loads, peak rates rebuild from units x MACs/clock x 2 x
// clock, format-rate ratios are the published ones, bad files get clear errors.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/cost/catalog.hpp"
#include "lpemu/error.hpp"
#include "support/test_support.hpp"

namespace {

using lpemu::cost::Catalog;
using lpemu::cost::Target;

Catalog& catalog() {
  static Catalog c(lpemu::format::Registry::builtin());
  return c;
}

struct Published {
  const char* target;
  const char* rate_class;
  double tflops;  // dense, from the datasheet / whitepaper named in the comment
};

// Dense figures as printed (or half the printed "with sparsity" figure, as the sheets say).
const Published kPublished[] = {
    {"a100", "bf16", 312},        // NVIDIA A100 datasheet (2021)
    {"a100", "fp16", 312},        // same
    {"a100", "tf32", 156},        // same
    {"a100", "int8", 624},        // same
    {"a100", "int4", 1248},       // NVIDIA A100 whitepaper (2020)
    {"h100_sxm", "tf32", 494.7},  // NVIDIA H100 whitepaper (2022); datasheet 989 sparse
    {"h100_sxm", "bf16", 989.4},  // datasheet 1,979 sparse
    {"h100_sxm", "fp16", 989.4},  {"h100_sxm", "fp8", 1978.9},  // datasheet 3,958 sparse
    {"h100_sxm", "int8", 1978.9}, {"h200", "bf16", 989.4},      // NVIDIA H200 datasheet (2024): 1,979 sparse
    {"h200", "fp8", 1978.9},                                    // 3,958 sparse
    {"mi300x", "tf32", 653.7},                                  // AMD MI300X datasheet (2023)
    {"mi300x", "bf16", 1307.4},   {"mi300x", "fp16", 1307.4},  {"mi300x", "fp8", 2614.9},
    {"mi300x", "int8", 2614.9},   {"mi355x", "bf16", 2516.6},  // AMD MI355X datasheet (2025)
    {"mi355x", "fp8", 5033.2},    {"mi355x", "fp6", 10066.3},  {"mi355x", "fp4", 10066.3},
};

TEST_CASE("every shipped target, shape, plan and datapath loads", "[cost]") {
  Catalog& c = catalog();
  const auto targets = c.target_names();
  for (const char* want : {"a100", "h100_sxm", "h200", "b200", "mi300x", "mi355x", "tpu_v5e", "tpu_v5p",
                           "gaudi3", "proposed_h100_fp6", "proposed_h100_fp4"}) {
    INFO(want);
    CHECK(std::find(targets.begin(), targets.end(), want) != targets.end());
  }
  for (const auto& name : targets) {
    INFO(name);
    const auto& t = c.target(name);
    CHECK(t.bandwidth_gb_s > 0);
    CHECK(t.capacity_gb > 0);
    CHECK_FALSE(t.rates.empty());
    CHECK_FALSE(t.bandwidth_source.empty());
    for (const auto& [cls, r] : t.rates) CHECK_FALSE(r.source.empty());
  }
  for (const auto& name : c.shape_names()) CHECK(c.shape(name).parameters() > 0);
  for (const auto& name : c.datapath_names()) CHECK(c.datapath(name).fused_terms >= 1);
  // NVIDIA Blackwell datasheet (2024), HGX B200 1,000 W column: FP32 80 TFLOPS (CUDA cores).
  CHECK(c.target("b200").rates.at("fp32").tflops == 80);
  CHECK(c.shape_names() == std::vector<std::string>{"llama2_70b", "llama2_7b", "llama3_405b", "llama3_70b",
                                                    "llama3_8b", "mixtral_8x7b", "stories260K", "tiny1m"});
}

TEST_CASE("shipped rates equal the datasheets and rebuild from units x MACs/clock x 2 x clock", "[cost]") {
  for (const auto& p : kPublished) {
    INFO(p.target << " " << p.rate_class);
    const auto& t = catalog().target(p.target);
    const auto* r = t.find_rate(p.rate_class);
    REQUIRE(r != nullptr);
    CHECK(r->tflops == Approx(p.tflops).epsilon(1e-9));
    const auto rebuilt = t.rebuilt_tflops(p.rate_class);
    REQUIRE(rebuilt.has_value());
    CHECK(*rebuilt == Approx(p.tflops).epsilon(0.002));  // datasheets round to 4-5 digits
  }
}

TEST_CASE("H100 SXM rebuild by hand: 528 TC x 512 MAC x 2 x 1.83 GHz", "[cost]") {
  const auto& t = catalog().target("h100_sxm");
  CHECK(*t.rebuilt_tflops("bf16") == Approx(528.0 * 512 * 2 * 1.83e9 / 1e12));
  CHECK(*t.rebuilt_tflops("bf16") == Approx(989.4).epsilon(0.001));
}

TEST_CASE("format-rate ratios come out as published", "[cost]") {
  // Printed figures are rounded to 0.1 TFLOPS, so ratios hold to 1e-3.
  auto ratio = [](const char* t, const char* a, const char* b) {
    const auto& g = catalog().target(t);
    return g.peak_ops(a) / g.peak_ops(b);
  };
  CHECK(ratio("h100_sxm", "fp8", "bf16") ==
        Approx(2.0).epsilon(0.001));  // Hopper whitepaper: FP8 2x FP16/BF16
  CHECK(ratio("h100_sxm", "bf16", "tf32") == Approx(2.0).epsilon(0.001));
  CHECK(ratio("h200", "fp8", "bf16") == Approx(2.0).epsilon(0.001));
  CHECK(ratio("a100", "int8", "fp16") == Approx(2.0).epsilon(0.001));   // A100 datasheet: 624 vs 312
  CHECK(ratio("a100", "int4", "fp16") == Approx(4.0).epsilon(0.001));   // A100 whitepaper: 1248 vs 312
  CHECK(ratio("b200", "fp4", "fp8") == Approx(2.0).epsilon(0.001));     // HGX B200: 18 vs 9 PFLOPS sparse
  CHECK(ratio("b200", "fp6", "fp8") == Approx(1.0).epsilon(0.001));     // "FP8/FP6" share a line
  CHECK(ratio("b200", "fp8", "bf16") == Approx(2.0).epsilon(0.001));    // 9 vs 4.5 PFLOPS sparse
  CHECK(ratio("mi300x", "fp8", "fp16") == Approx(2.0).epsilon(0.001));  // 2614.9 vs 1307.4
  CHECK(ratio("mi355x", "fp4", "fp8") == Approx(2.0).epsilon(0.001));   // 10 vs 5 PFLOPS
  CHECK(ratio("mi355x", "fp6", "fp4") == Approx(1.0).epsilon(0.001));   // MXFP6 at the MXFP4 rate
  CHECK(ratio("gaudi3", "fp8", "bf16") == Approx(1.0).epsilon(0.001));  // Hot Chips 2024: 1835 both
  CHECK(ratio("tpu_v5e", "int8", "bf16") == Approx(393.0 / 197.0).epsilon(0.001));
  CHECK(catalog().target("h100_sxm").find_rate("fp4") == nullptr);  // absent, not guessed
  CHECK(catalog().target("a100").find_rate("fp8") == nullptr);
}

TEST_CASE("memory figures are the datasheets'", "[cost]") {
  CHECK(catalog().target("h100_sxm").bandwidth_gb_s == 3350);  // H100 datasheet: 3.35 TB/s
  CHECK(catalog().target("h200").bandwidth_gb_s == 4800);      // H200 datasheet: 4.8 TB/s
  CHECK(catalog().target("h200").capacity_gb == 141);
  CHECK(catalog().target("mi300x").capacity_gb == 192);
  CHECK(catalog().target("tpu_v5p").bandwidth_gb_s == 2765);  // Cloud TPU v5p docs
  CHECK(catalog().target("gaudi3").capacity_gb == 128);
}

TEST_CASE("proposed target: H100 FP8 area spent on FP6 MACs", "[cost]") {
  const auto& t = catalog().target("proposed_h100_fp6");
  // Hand arithmetic with the MAC model on h100_e4m3_fp32 (n = 32, W = 14, fp32 keeping 13 fraction
  // bits): fp8_e4m3 = 16 + 16.8125 + 28 + 18.40625 + 2.859375 + 2.03125 = 84.109375 FA, fp6_e3m2 =
  // 9 + 13.84375 + 28 + 18.40625 + 2.859375 + 2.03125 = 74.140625 FA;
  // floor(1024 x 84.109375 / 74.140625) = floor(1161.69) = 1161 MACs/clock/TC.
  const auto* r = t.find_rate("fp6");
  REQUIRE(r != nullptr);
  CHECK(r->macs_per_clock_per_unit == 1161);
  CHECK(r->tflops == Approx(528.0 * 1161 * 2 * 1.83e9 / 1e12));
  CHECK(t.bandwidth_gb_s == 3350);
  CHECK(t.find_rate("bf16")->tflops == Approx(989.4));
}

TEST_CASE("bad target files get clear errors", "[cost]") {
  Catalog c(lpemu::format::Registry::builtin());
  const std::string missing_bw =
      "name = \"x\"\nkind = \"product\"\nsource = \"s\"\n[memory]\ncapacity_gb = 80\ncapacity_source = "
      "\"s\"\n"
      "[rates.bf16]\ntflops = 1\nsource = \"s\"\n";
  REQUIRE_THROWS_WITH(
      c.parse_target_toml(missing_bw, "bad.toml"),
      "bad.toml:4: field 'memory.bandwidth_gb_s' = (missing): expected a positive bandwidth in GB/s");
  const std::string bad_class =
      "name = \"x\"\nkind = \"product\"\nsource = \"s\"\n[memory]\nbandwidth_gb_s = 1\nbandwidth_source = "
      "\"s\"\n"
      "capacity_gb = 1\ncapacity_source = \"s\"\n[rates.fp9]\ntflops = 1\nsource = \"s\"\n";
  REQUIRE_THROWS_WITH(c.parse_target_toml(bad_class, "bad.toml"),
                      "bad.toml:9: field 'rates.fp9' = a table: expected a rate class (bf16, fp16, fp32, "
                      "fp4, fp6, fp8, int4, "
                      "int8, tf32); closest known names: fp4, fp6, fp8");
  const std::string neg =
      "name = \"x\"\nkind = \"product\"\nsource = \"s\"\n[memory]\nbandwidth_gb_s = -5\nbandwidth_source = "
      "\"s\"\n"
      "capacity_gb = 1\ncapacity_source = \"s\"\n[rates.bf16]\ntflops = 1\nsource = \"s\"\n";
  REQUIRE_THROWS_WITH(
      c.parse_target_toml(neg, "bad.toml"),
      "bad.toml:5: field 'memory.bandwidth_gb_s' = -5: expected a positive bandwidth in GB/s");
  const std::string no_source =
      "name = \"x\"\nkind = \"product\"\nsource = \"s\"\n[memory]\nbandwidth_gb_s = 1\nbandwidth_source = "
      "\"s\"\n"
      "capacity_gb = 1\ncapacity_source = \"s\"\n[rates.bf16]\ntflops = 1\n";
  REQUIRE_THROWS_WITH(c.parse_target_toml(no_source, "bad.toml"),
                      "bad.toml:9: field 'rates.bf16.source' = (missing): expected a string");
  REQUIRE_THROWS_WITH(c.parse_target_toml("name = \"x\"\nkind = \"real\"\n", "bad.toml"),
                      "bad.toml:2: field 'kind' = \"real\": expected \"product\" or \"proposed\"");
  REQUIRE_THROWS_WITH(
      c.target("h100"),
      "unknown target 'h100'; closest known names: h100_sxm, proposed_h100_fp4, proposed_h100_fp6");
}

TEST_CASE("bad shape files get clear errors", "[cost]") {
  const std::string bad_heads =
      "name = \"m\"\nsource = \"s\"\ndim = 64\nn_layers = 1\nn_heads = 7\nn_kv_heads = 7\nhidden_dim = 8\n"
      "vocab_size = 8\n";
  REQUIRE_THROWS_WITH(lpemu::cost::parse_shape_toml(bad_heads, "m.toml"),
                      "m.toml:5: field 'n_heads' = 7: expected a divisor of dim = 64");
  REQUIRE_THROWS_WITH(lpemu::cost::parse_shape_toml("name = \"m\"\nsource = \"s\"\ndim = 0\n", "m.toml"),
                      "m.toml:3: field 'dim' = 0: expected a positive integer");
}

}  // namespace

namespace {

TEST_CASE("user directories add targets and proposed targets derive from built-ins", "[cost]") {
  namespace fs = std::filesystem;
  const lpemu::test::Scratch scratch("cost_user_dir");
  const fs::path dir = scratch / "cost";
  fs::create_directories(dir / "hardware");
  {
    std::ofstream f(dir / "hardware" / "mine.toml");
    f << "name = \"mine\"\nkind = \"proposed\"\nsource = \"test\"\n[derive]\nbase = \"a100\"\n"
         "budget_class = \"bf16\"\nbudget_format = \"bf16\"\ndatapath = \"generic_bf16\"\n"
         "[derive.rates.fp8]\nformat = \"fp8_e4m3\"\n";
  }
  Catalog c(lpemu::format::Registry::builtin(), {dir});
  const auto& t = c.target("mine");
  // A100 bf16 array: 256 MACs/clock/TC at 237.625 FA; fp8_e4m3 MAC 178.625 FA:
  // floor(256 x 237.625 / 178.625) = floor(340.56) = 340; 432 x 340 x 2 x 1.41 GHz = 414.2 TFLOP/s.
  REQUIRE(t.find_rate("fp8") != nullptr);
  CHECK(t.find_rate("fp8")->macs_per_clock_per_unit == 340);
  CHECK(t.find_rate("fp8")->tflops == Approx(432.0 * 340 * 2 * 1.41e9 / 1e12));
  CHECK(t.bandwidth_gb_s == 2039);
  fs::remove_all(dir);
  REQUIRE_THROWS_WITH(Catalog(lpemu::format::Registry::builtin(), {dir}),
                      dir.string() + ": cost data directory does not exist");
}

TEST_CASE("measured efficiencies: HBM streaming and fused attention, with their fallbacks", "[cost]") {
  const Target& a = catalog().target("a100");
  // A streaming read kernel at 1.80 of A100's 2.039 TB/s (88%).
  CHECK(a.memory_efficiency() == Approx(1800.0 / 2039));
  CHECK_FALSE(a.achieved_bandwidth_source.empty());
  // FlashAttention-2: forward up to 73%, backward up to 63% of A100's 312 TFLOP/s.
  CHECK(a.attention_efficiency("bf16", false) == Approx(227.8 / 312));
  CHECK(a.attention_efficiency("bf16", true) == Approx(196.6 / 312));
  // FlashAttention-3 on H100, head dim 128: 648 forward, 561 backward of 989.4.
  const Target& h = catalog().target("h100_sxm");
  CHECK(h.attention_efficiency("fp16", false) == Approx(648 / 989.4));
  CHECK(h.attention_efficiency("fp16", true) == Approx(561 / 989.4));
  // No attention measurement for FP8: the class's measured GEMM efficiency (1402.6 of 1978.9).
  CHECK(h.attention_efficiency("fp8", false) == Approx(h.gemm_efficiency("fp8")));
  // No HBM measurement: the datasheet bandwidth.
  CHECK(catalog().target("tpu_v5e").memory_efficiency() == 1.0);
  // A class the target lacks: 1.
  CHECK(catalog().target("a100").attention_efficiency("fp8", true) == 1.0);

  // Only the measured direction published: it stands for the other.
  Catalog c(lpemu::format::Registry::builtin());
  const std::string base =
      "name = \"x\"\nkind = \"product\"\nsource = \"s\"\n[memory]\nbandwidth_gb_s = 100\nbandwidth_source = "
      "\"s\"\ncapacity_gb = 1\ncapacity_source = \"s\"\n";
  const Target one =
      c.parse_target_toml(base +
                              "[rates.bf16]\ntflops = 100\nsource = \"s\"\nattention_forward_tflops = "
                              "50\nattention_source = \"s\"\n",
                          "one.toml");
  CHECK(one.attention_efficiency("bf16", true) == Approx(0.5));
  // Errors name the field and what was expected.
  REQUIRE_THROWS_WITH(
      c.parse_target_toml(
          base + "[rates.bf16]\ntflops = 100\nsource = \"s\"\nattention_forward_tflops = 50\n", "bad.toml"),
      Catch::Contains("bad.toml") && Catch::Contains("rates.bf16.attention_source"));
  REQUIRE_THROWS_WITH(
      c.parse_target_toml(
          base + "achieved_gb_s = 200\nachieved_source = \"s\"\n[rates.bf16]\ntflops = 1\nsource = \"s\"\n",
          "bad.toml"),
      Catch::Contains("memory.achieved_gb_s") && Catch::Contains("at most bandwidth_gb_s"));
}

}  // namespace
