// End-to-end runs of `lpemu run/eval/replay` on the shipped stories260K model.
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "support/test_support.hpp"

namespace {

struct Result {
  int rc = -1;
  std::string out;
};

Result run(const std::string& args) {
  const std::string cmd = lpemu::test::lpemu_binary() + " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST_CASE("lpemu run generates the model README's greedy text", "[engine][cli]") {
  const Result r = run("run --model " + lpemu::test::source_path("data/models/stories260K/model.h5") +
                       " --plan fp32 --prompt 'Once upon a time' --steps 40");
  CHECK(r.rc == 0);
  CHECK_THAT(r.out,
             Catch::StartsWith("Once upon a time, there was a little girl named Lily. She loved to play"));
}

TEST_CASE("lpemu eval and replay report against the reference", "[engine][cli]") {
  const auto text = std::filesystem::temp_directory_path() / "lpemu_eval.txt";
  std::ofstream(text) << "Once upon a time, there was a little dog named Max.";
  const Result e = run("eval --model stories260K --plan fp64 --json --text " + text.string());
  CHECK(e.rc == 0);
  const auto j = nlohmann::json::parse(e.out);
  CHECK(j["top1_agreement"] == 1.0);
  CHECK(!j["per_token"].empty());
  const Result r =
      run("replay --model stories260K --plan " + lpemu::test::source_path("experiments/plans/fp8_e4m3.toml") +
          " --activations " + lpemu::test::source_path("data/models/stories260K/activations.h5"));
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("fp8_e4m3") && Catch::Contains("w2") && Catch::Contains("output"));
}

TEST_CASE("lpemu run with a bad plan exits non-zero naming file and line", "[engine][cli]") {
  const auto plan = std::filesystem::temp_directory_path() / "lpemu_bad_plan.toml";
  std::ofstream(plan) << "[roles]\nweights = \"fp8_e4m3\"\nkv_cash = \"bf16\"\n";
  const Result r = run("run --model stories260K --steps 4 --plan " + plan.string());
  CHECK(r.rc != 0);
  CHECK_THAT(r.out, Catch::Contains("lpemu_bad_plan.toml:3") && Catch::Contains("kv_cash") &&
                        Catch::Contains("kv_cache"));
  const Result m = run("run --model no_such_model --steps 4");
  CHECK(m.rc != 0);
  CHECK_THAT(m.out, Catch::Contains("no_such_model"));
}

}  // namespace
