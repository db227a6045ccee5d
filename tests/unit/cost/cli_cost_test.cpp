// `lpemu cost` end to end: the binary runs, prints the hand-checked MAC total and the errors.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <catch2/catch.hpp>

#include "support/test_support.hpp"

namespace {

using lpemu::test::Run;

// `lpemu ARGS` with stderr merged into Run::out.
Run run(const std::string& args) { return lpemu::test::run_lpemu_merged(args); }

TEST_CASE("lpemu cost mac prints the per-component breakdown", "[cost][cli]") {
  const auto r = run("cost mac --format bf16 --datapath generic_bf16");
  CHECK(r.status == 0);
  // Hand arithmetic (mac_model_test): 64 + 26.5 + 67.5 + 21.75 + 31.625 + 26.25 = 237.625 FA.
  CHECK_THAT(r.out, Catch::Matchers::Contains("multiplier         64.000"));
  CHECK_THAT(r.out, Catch::Matchers::Contains("total             237.625"));
  CHECK_THAT(r.out, Catch::Matchers::Contains("vs bf16: 1.000x area per MAC; 1024 MACs fit"));
}

TEST_CASE("lpemu cost prints both phases and the memory floor holds", "[cost][cli]") {
  const auto r =
      run("cost --target h100_sxm --model llama2_70b --plan bf16 --batch 1 --context 1 --phase decode");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Matchers::Contains("DO NOT FIT in 80 GB"));  // 137.95 GB of bf16 weights
  CHECK_THAT(r.out, Catch::Matchers::Contains("decode (batch 1, context 1): 1 tokens"));
  const auto j = run("cost --target h100_sxm --model stories260K --plan fp8 --json");
  CHECK(j.status == 0);
  CHECK_THAT(j.out, Catch::Matchers::StartsWith("{\"target\":\"h100_sxm\",\"model\":\"stories260K\""));
}

// The number after "key": in a JSON text (the first occurrence).
double json_number(const std::string& json, const std::string& key) {
  const auto at = json.find("\"" + key + "\":");
  REQUIRE(at != std::string::npos);
  return std::stod(json.substr(at + key.size() + 3));
}

// metric -> value of plan `index` in a sweep's results.csv.
std::map<std::string, double> csv_metrics(const std::filesystem::path& csv, int index) {
  std::ifstream in(csv);
  std::map<std::string, double> m;
  std::string line;
  const std::string prefix = std::to_string(index) + ",";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    const auto c2 = line.find(',', prefix.size());
    const auto c3 = line.find(',', c2 + 1);
    const std::string v = line.substr(c3 + 1);
    m[line.substr(c2 + 1, c3 - c2 - 1)] = v == "nan" ? std::nan("") : std::stod(v);
  }
  return m;
}

TEST_CASE("a sweep's cost columns equal `lpemu cost` on the plan files it wrote", "[cost][cli][experiment]") {
  namespace fs = std::filesystem;
  const lpemu::test::Scratch s("cli_join");
  const fs::path& dir = s.dir;
  std::ofstream(dir / "e.toml")
      << "name = \"join\"\n[source]\nmodel = \""
      << lpemu::test::source_path("data/models/stories260K/model.h5") << "\"\ntext = \""
      << lpemu::test::source_path("data/models/stories260K/paragraph.txt")
      << "\"\nmax_tokens = 16\n[cost]\ntarget = \"b200\"\nshape = \"llama3_8b\"\nphase = \"decode\"\nbatch = "
         "8\n"
         "context = 4096\n[grid]\nformats = [\"bf16\", \"mxfp4\"]\nkeep = [\"first\", \"last\", \"head\"]\n"
         "[grid.native]\nmxfp4 = \"b200_mxfp4_fp32\"\n[grid.others]\nq = \"bf16\"\nprobs = \"bf16\"\n"
         "kv_cache = \"bf16\"\n[grid.datapath]\nbase = \"h100_e4m3_fp32\"\nfused_terms = [4, 32]\n"
         "formats = [\"fp8_e4m3\"]\n";
  const auto sweep = run("sweep '" + (dir / "e.toml").string() + "' --out '" + (dir / "out").string() + "'");
  REQUIRE(sweep.status == 0);
  // Plans: bf16, mxfp4 (fp32 accumulation), mxfp4+b200_mxfp4_fp32, then the study's two variants.
  CHECK(fs::exists(dir / "out" / "datapath" / "h100_e4m3_fp32.n4.toml"));
  CHECK(fs::exists(dir / "out" / "datapath" / "h100_e4m3_fp32.n32.toml"));
  double area_n4 = 0, area_n32 = 0;
  for (int i = 0; i < 5; ++i) {
    INFO("plan " << i);
    char name[16];
    std::snprintf(name, sizeof name, "%04d.toml", i);
    const auto m = csv_metrics(dir / "out" / "results.csv", i);
    const auto c = run("--formats-dir '" + (dir / "out").string() + "' cost --plan '" +
                       (dir / "out" / "plans" / name).string() +
                       "' --target b200 --model llama3_8b --phase decode --batch 8 --context 4096 --json");
    REQUIRE(c.status == 0);
    CHECK(json_number(c.out, "tokens_per_s") ==
          Approx(m.at("cost_tokens_per_s")).epsilon(1e-8));  // results.csv prints 9 digits
    CHECK(json_number(c.out, "joules_per_token") ==
          Approx(m.at("cost_joules_per_token")).epsilon(1e-8));  // results.csv prints 9 digits
    CHECK(json_number(c.out, "bits_per_weight") ==
          Approx(m.at("weight_bits")).epsilon(1e-8));  // results.csv prints 9 digits
    CHECK(json_number(c.out, "mac_area_rel_bf16") ==
          Approx(m.at("cost_mac_area_rel_bf16")).epsilon(1e-8));  // results.csv prints 9 digits
    if (i == 2) CHECK_THAT(c.out, Catch::Matchers::Contains("mxfp4 x mxfp4 on b200_mxfp4_fp32"));
    if (i == 3) area_n4 = m.at("cost_mac_area_rel_bf16");
    if (i == 4) area_n32 = m.at("cost_mac_area_rel_bf16");
  }
  // The study's variants are emulated and priced under their own names: 4 fused terms cost more
  // area per lane than 32 (the accumulator and normaliser are shared by fewer lanes).
  CHECK(area_n4 > area_n32);
}

TEST_CASE("lpemu cost reports unknown names with suggestions", "[cost][cli]") {
  const auto r = run("cost --target h100 --model llama2_7b");
  CHECK(r.status != 0);
  CHECK(r.out ==
        "lpemu: error: unknown target 'h100'; closest known names: h100_sxm, proposed_h100_fp4, "
        "proposed_h100_fp6\n");
  const auto m = run("cost --target h100_sxm");
  CHECK(m.out == "lpemu: error: lpemu cost: --target and --model are required (see `lpemu cost --help`)\n");
}

}  // namespace
