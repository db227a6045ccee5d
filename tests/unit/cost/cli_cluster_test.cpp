// `lpemu cost` at cluster level end to end: training report, search table, inference table and
// the errors for inconsistent requests.
#include <string>

#include <catch2/catch.hpp>

#include "support/test_support.hpp"

namespace {

using lpemu::test::Run;

// `lpemu ARGS` with stderr merged into Run::out.
Run run(const std::string& args) { return lpemu::test::run_lpemu_merged(args); }

TEST_CASE("lpemu cost --phase train prints step, breakdown and memory", "[cost][cli][cluster]") {
  const auto r =
      run("cost --system dgx_h100 --model llama3_70b --phase train --devices 1024 "
          "--parallel tp=8,pp=4,sp=1 --context 8192 --global-batch 512");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("parallel tp=8,pp=4,dp=32,sp=1,zero=1"));
  CHECK_THAT(r.out, Catch::Contains("16 micro-batches per pipeline"));
  CHECK_THAT(r.out, Catch::Contains("MFU") && Catch::Contains("bubble") && Catch::Contains("(fits)"));
  const auto j =
      run("cost --system dgx_h100 --model llama3_70b --phase train --devices 1024 "
          "--parallel tp=8,pp=4,sp=1 --context 8192 --global-batch 512 --json");
  REQUIRE(j.status == 0);
  CHECK_THAT(j.out, Catch::Contains("\"train\":[{\"parallel\":\"tp=8,pp=4,dp=32,sp=1,zero=1\""));
}

TEST_CASE("lpemu cost --search lists ranked configurations", "[cost][cli][cluster]") {
  const auto r =
      run("cost --system dgx_h100 --model llama3_8b --phase train --devices 64 --search --top 3 "
          "--context 4096 --global-batch 64");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("rank parallel") && Catch::Contains("consistent configurations"));
}

TEST_CASE("lpemu cost inference at scale tabulates batches and the KV limit", "[cost][cli][cluster]") {
  const auto r =
      run("cost --system dgx_h100 --model llama3_70b --phase decode --parallel tp=8 --context 4096 "
          "--batches 1,512");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("largest batch that fits per device = 371"));
  CHECK_THAT(r.out, Catch::Contains("does not fit"));
}

TEST_CASE("lpemu cost cluster errors name the value", "[cost][cli][cluster]") {
  auto r = run("cost --system dgx_h100 --model llama3_70b --phase train --devices 1024 --parallel tp=8,pp=3");
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("not a multiple of tp x pp x cp = 24"));
  r = run("cost --model llama3_70b --phase train");
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("--system is required"));
  r = run("cost --system dgx_h9 --model llama3_70b --phase train");
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("unknown system 'dgx_h9'"));
  r = run("cost --system dgx_h100 --model llama3_70b --phase train --recompute most");
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("--recompute: most not in {none,selective,full}"));
}

}  // namespace
