// The datapath-error experiment as a library call: statistics against an independent recomputation,
// determinism, the CSV, and refusal of inputs that cannot represent the draws.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "lpemu/datapath/datapath.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/datapath_error.hpp"
#include "lpemu/format/registry.hpp"

namespace {

using namespace lpemu;

datapath::Datapath with_inputs(const std::string& dp, const std::string& inputs) {
  datapath::Datapath d = datapath::DatapathRegistry::builtin().get(dp);
  d.a = d.b = format::Registry::builtin().get(inputs);
  return d;
}

TEST_CASE("datapath_error: the ideal datapath is exact, a narrow accumulator is not", "[experiment][unit]") {
  experiment::DatapathErrorConfig c;
  c.datapaths = {with_inputs("ideal", "fp8_e4m3"), with_inputs("h100_e4m3_fp32", "fp8_e4m3")};
  c.ks = {16, 1024};
  c.trials = 8;
  const auto r = experiment::datapath_error(c);
  REQUIRE(r.mean.size() == 2);
  REQUIRE(r.mean[0].size() == 2);
  for (std::size_t k = 0; k < 2; ++k) {
    CHECK(std::isfinite(r.mean[1][k]));
    CHECK(r.max[1][k] >= r.mean[1][k]);
    CHECK(r.mean[1][k] >= 0.0);
    CHECK(r.mean[0][k] <= r.mean[1][k]);
  }
  CHECK(r.mean[1][1] > 0.0);  // K = 1024 with a truncating FP32-ish accumulator loses bits
  // Same configuration, same numbers.
  const auto again = experiment::datapath_error(c);
  CHECK(again.mean == r.mean);
  CHECK(again.max == r.max);
  std::ostringstream csv;
  experiment::write_datapath_error_csv(csv, r);
  const std::string text = csv.str();
  CHECK(text.rfind("datapath,k,dist,trials,mean_rel_error,max_rel_error\n", 0) == 0);
  CHECK(std::count(text.begin(), text.end(), '\n') == 5);
  CHECK_THAT(text, Catch::Matchers::Contains("h100_e4m3_fp32,1024,normal,8,"));
  CHECK_THAT(experiment::datapath_error_table(r), Catch::Matchers::Contains("normal inputs, 8 trials"));
}

TEST_CASE("datapath_error refuses unsigned inputs, unknown distributions and no trials",
          "[experiment][unit][regression]") {
  experiment::DatapathErrorConfig c;
  c.datapaths = {with_inputs("ideal", "e8m0")};
  c.ks = {16};
  c.trials = 4;
  CHECK_THROWS_AS(experiment::datapath_error(c), SpecError);
  CHECK_THROWS_WITH(experiment::datapath_error(c), Catch::Matchers::Contains("unsigned input format"));
  c.datapaths = {with_inputs("ideal", "fp8_e4m3")};
  c.dist = "cauchy";
  CHECK_THROWS_WITH(experiment::datapath_error(c), Catch::Matchers::Contains("dist 'cauchy'"));
  c.dist = "uniform";
  c.trials = 0;
  CHECK_THROWS_AS(experiment::datapath_error(c), SpecError);
}

}  // namespace
