// `lpemu cost` end to end: the binary runs, prints the hand-checked MAC total and the errors.
#include <array>
#include <cstdio>
#include <memory>
#include <string>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include "support/test_support.hpp"

namespace {

struct Result {
  int rc;
  std::string out;
};

Result run(const std::string& args) {
  const std::string cmd = "'" + lpemu::test::lpemu_binary() + "' " + args + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p.get())) > 0) out.append(buf.data(), n);
  const int status = pclose(p.release());
  return {WEXITSTATUS(status), out};
}

TEST_CASE("lpemu cost mac prints the per-component breakdown", "[cost][cli]") {
  const auto r = run("cost mac --format bf16");
  CHECK(r.rc == 0);
  // Hand arithmetic (mac_model_test): 64 + 26.5 + 67.5 + 21.75 + 31.625 + 26.25 = 237.625 FA.
  CHECK_THAT(r.out, Catch::Matchers::Contains("multiplier         64.000"));
  CHECK_THAT(r.out, Catch::Matchers::Contains("total             237.625"));
  CHECK_THAT(r.out, Catch::Matchers::Contains("vs bf16: 1.000x area per MAC; 1024 MACs fit"));
}

TEST_CASE("lpemu cost prints both phases and the memory floor holds", "[cost][cli]") {
  const auto r = run("cost --target h100_sxm --model llama2_70b --plan bf16 --batch 1 --context 1 --phase decode");
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Matchers::Contains("DO NOT FIT in 80 GB"));  // 137.95 GB of bf16 weights
  CHECK_THAT(r.out, Catch::Matchers::Contains("decode (batch 1, context 1): 1 tokens"));
  const auto j = run("cost --target h100_sxm --model stories260K --plan fp8 --json");
  CHECK(j.rc == 0);
  CHECK_THAT(j.out, Catch::Matchers::StartsWith("{\"target\": \"h100_sxm\", \"model\": \"stories260K\""));
}

TEST_CASE("lpemu cost reports unknown names with suggestions", "[cost][cli]") {
  const auto r = run("cost --target h100 --model llama2_7b");
  CHECK(r.rc != 0);
  CHECK(r.out == "lpemu: error: unknown target 'h100'; did you mean: h100_sxm, proposed_h100_fp4, proposed_h100_fp6?\n");
  const auto m = run("cost --target h100_sxm");
  CHECK(m.out == "lpemu: error: lpemu cost: --target and --model are required (see `lpemu cost --help`)\n");
}

}  // namespace
