// `lpemu cost` at cluster level end to end: training report, search table, inference table and
// the errors for inconsistent requests.
#include <sys/wait.h>
#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "support/test_support.hpp"

namespace {

struct Result {
  int rc;
  std::string out;
};

Result run(const std::string& args) {
  const std::string cmd = lpemu::test::lpemu_binary() + " " + args + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p.get())) > 0) out.append(buf.data(), n);
  const int status = pclose(p.release());
  return {WEXITSTATUS(status), out};
}

TEST_CASE("lpemu cost --phase train prints step, breakdown and memory", "[cost][cli][cluster]") {
  const auto r =
      run("cost --system dgx_h100 --model llama3_70b --phase train --devices 1024 "
          "--parallel tp=8,pp=4,sp=1 --context 8192 --global-batch 512");
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("parallel tp=8,pp=4,dp=32,sp=1,zero=1"));
  CHECK_THAT(r.out, Catch::Contains("16 micro-batches per pipeline"));
  CHECK_THAT(r.out, Catch::Contains("MFU") && Catch::Contains("bubble") && Catch::Contains("(fits)"));
  const auto j =
      run("cost --system dgx_h100 --model llama3_70b --phase train --devices 1024 "
          "--parallel tp=8,pp=4,sp=1 --context 8192 --global-batch 512 --json");
  REQUIRE(j.rc == 0);
  CHECK_THAT(j.out, Catch::Contains("\"train\":[{\"parallel\":\"tp=8,pp=4,dp=32,sp=1,zero=1\""));
}

TEST_CASE("lpemu cost --search lists ranked configurations", "[cost][cli][cluster]") {
  const auto r =
      run("cost --system dgx_h100 --model llama3_8b --phase train --devices 64 --search --top 3 "
          "--context 4096 --global-batch 64");
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("rank parallel") && Catch::Contains("consistent configurations"));
}

TEST_CASE("lpemu cost inference at scale tabulates batches and the KV limit", "[cost][cli][cluster]") {
  const auto r =
      run("cost --system dgx_h100 --model llama3_70b --phase decode --parallel tp=8 --context 4096 "
          "--batches 1,512");
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("largest batch that fits per device = 371"));
  CHECK_THAT(r.out, Catch::Contains("does not fit"));
}

TEST_CASE("lpemu cost cluster errors name the value", "[cost][cli][cluster]") {
  auto r = run("cost --system dgx_h100 --model llama3_70b --phase train --devices 1024 --parallel tp=8,pp=3");
  CHECK(r.rc != 0);
  CHECK_THAT(r.out, Catch::Contains("not a multiple of tp x pp x cp = 24"));
  r = run("cost --model llama3_70b --phase train");
  CHECK(r.rc != 0);
  CHECK_THAT(r.out, Catch::Contains("--system is required"));
  r = run("cost --system dgx_h9 --model llama3_70b --phase train");
  CHECK(r.rc != 0);
  CHECK_THAT(r.out, Catch::Contains("unknown system 'dgx_h9'"));
  r = run("cost --system dgx_h100 --model llama3_70b --phase train --recompute most");
  CHECK(r.rc != 0);
  CHECK_THAT(r.out, Catch::Contains("--recompute: most not in {none,selective,full}"));
}

}  // namespace
