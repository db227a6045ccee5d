// End-to-end runs of `lpemu run/eval/replay` on the shipped stories260K model.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "support/test_support.hpp"

namespace {

using lpemu::test::Run;
using lpemu::test::Scratch;

// `lpemu ARGS` with stderr merged into Run::out.
Run run(const std::string& args) { return lpemu::test::run_lpemu_merged(args); }

TEST_CASE("lpemu run generates the model README's greedy text", "[engine][cli]") {
  const Run r = run("run --model " + lpemu::test::source_path("data/models/stories260K/model.h5") +
                    " --plan fp32 --prompt 'Once upon a time' --steps 40");
  CHECK(r.status == 0);
  CHECK_THAT(r.out,
             Catch::StartsWith("Once upon a time, there was a little girl named Lily. She loved to play"));
}

TEST_CASE("lpemu eval and replay report against the reference", "[engine][cli]") {
  const Scratch s("eval");
  const auto text = s / "lpemu_eval.txt";
  std::ofstream(text) << "Once upon a time, there was a little dog named Max.";
  const Run e = run("eval --model stories260K --plan fp64 --json --text " + text.string());
  CHECK(e.status == 0);
  const auto j = nlohmann::json::parse(e.out);
  CHECK(j["top1_agreement"] == 1.0);
  CHECK(!j["per_token"].empty());
  const Run r =
      run("replay --model stories260K --plan " + lpemu::test::source_path("experiments/plans/fp8_e4m3.toml") +
          " --activations " + lpemu::test::source_path("data/models/stories260K/activations.h5"));
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("fp8_e4m3") && Catch::Contains("w2") && Catch::Contains("output"));
}

TEST_CASE("lpemu eval and run say where the time went", "[engine][cli]") {
  const Scratch s("eval_timing");
  const auto text = s / "timed.txt";
  std::ofstream(text) << "Once upon a time, there was a little dog named Max.";
  const std::string model = " --model " + lpemu::test::source_path("data/models/stories260K/model.h5");
  const Run e = run("eval" + model + " --plan fp8_e4m3 --json --text " + text.string());
  REQUIRE(e.status == 0);
  const auto t = nlohmann::ordered_json::parse(e.out)["timing"];  // in the printed order
  const std::vector<std::string> stages{
      "load_s",  "plan_prepare_s", "plan_forward_s", "reference_prepare_s", "reference_forward_s",
      "hooks_s", "total_s"};
  std::vector<std::string> keys;
  for (const auto& [k, v] : t.items()) {
    keys.push_back(k);
    CHECK(v.get<double>() >= 0);
  }
  CHECK(keys == stages);
  // The stages are parts of the whole call, and the hooks run inside the sessions' stages.
  const double parts = t["load_s"].get<double>() + t["plan_prepare_s"].get<double>() +
                       t["plan_forward_s"].get<double>() + t["reference_prepare_s"].get<double>() +
                       t["reference_forward_s"].get<double>();
  CHECK(parts <= t["total_s"].get<double>());
  CHECK(t["hooks_s"].get<double>() <= parts - t["load_s"].get<double>());
  CHECK(t["plan_forward_s"].get<double>() > 0);
  const Run v = run("eval" + model + " --plan fp32 --verbose --text " + text.string());
  CHECK(v.status == 0);
  CHECK_THAT(v.out, Catch::Contains("lpemu: eval timing: load ") && Catch::Contains(" s, plan_prepare ") &&
                        Catch::Contains(", total "));
  const Run g = run("run" + model + " --plan fp32 --steps 8 --json");
  REQUIRE(g.status == 0);
  // `run` also prints its speed on standard error (merged here): the JSON is the braces' span.
  const auto json = g.out.substr(g.out.find('{'), g.out.rfind('}') - g.out.find('{') + 1);
  const auto gt = nlohmann::json::parse(json)["timing"];
  CHECK(gt["generate_s"].get<double>() > 0);
  CHECK(gt["load_s"].get<double>() + gt["prepare_s"].get<double>() + gt["generate_s"].get<double>() <=
        gt["total_s"].get<double>());
}

TEST_CASE("lpemu run with a bad plan exits non-zero naming file and line", "[engine][cli]") {
  const Scratch s("bad_plan");
  const auto plan = s / "lpemu_bad_plan.toml";
  std::ofstream(plan) << "[roles]\nweights = \"fp8_e4m3\"\nkv_cash = \"bf16\"\n";
  const Run r = run("run --model stories260K --steps 4 --plan " + plan.string());
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("lpemu_bad_plan.toml:3") && Catch::Contains("kv_cash") &&
                        Catch::Contains("kv_cache"));
  const Run m = run("run --model no_such_model --steps 4");
  CHECK(m.status != 0);
  CHECK_THAT(m.out, Catch::Contains("no_such_model"));
}

}  // namespace
