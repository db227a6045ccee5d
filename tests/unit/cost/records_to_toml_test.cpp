// Cost records write themselves: every built-in hardware target (proposed ones as their [derive]
// recipe), model shape and system round-trips through to_toml; phase and recompute name tables.
#include <string>

#include <catch2/catch.hpp>

#include "lpemu/cost/catalog.hpp"
#include "lpemu/cost/parallel.hpp"
#include "lpemu/cost/system.hpp"
#include "lpemu/cost/workload.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/registry.hpp"

using namespace lpemu;

TEST_CASE("every built-in hardware target round-trips through to_toml", "[cost][records][unit]") {
  cost::Catalog cat(format::Registry::builtin());
  REQUIRE(cat.target_names().size() >= 11);
  bool proposed = false;
  for (const auto& name : cat.target_names()) {
    INFO(name);
    const cost::Target t = cat.target(name);
    const std::string text = cost::to_toml(t);
    const cost::Target back = cat.parse_target_toml(text, t.origin);
    CHECK(back == t);
    CHECK(cost::to_toml(back) == text);
    if (t.kind == "proposed") {
      proposed = true;
      CHECK(t.derive);
      CHECK(text.find("[derive]") != std::string::npos);
    }
  }
  CHECK(proposed);
  cost::Target bad = cat.target("proposed_h100_fp4");
  bad.derive.reset();
  CHECK_THROWS_AS(cost::to_toml(bad), SpecError);
}

TEST_CASE("every built-in model shape round-trips through to_toml", "[cost][records][unit]") {
  cost::Catalog cat(format::Registry::builtin());
  REQUIRE(cat.shape_names().size() >= 6);
  for (const auto& name : cat.shape_names()) {
    INFO(name);
    const cost::ModelShape& s = cat.shape(name);
    const std::string text = cost::to_toml(s);
    const cost::ModelShape back = cost::parse_shape_toml(text, s.origin);
    CHECK(back == s);
    CHECK(cost::to_toml(back) == text);
  }
}

TEST_CASE("every built-in system round-trips through to_toml", "[cost][records][unit]") {
  REQUIRE(cost::system_names().size() >= 4);
  for (const auto& name : cost::system_names()) {
    INFO(name);
    const cost::System s = cost::load_system(name);
    const std::string text = cost::to_toml(s);
    const cost::System back = cost::parse_system_toml(text, s.origin);
    CHECK(back == s);
    CHECK(cost::to_toml(back) == text);
  }
}

TEST_CASE("reals in cost records round-trip exactly", "[cost][records][unit]") {
  cost::Catalog cat(format::Registry::builtin());
  cost::Target t = cat.target("h100_sxm");
  t.bandwidth_gb_s = 0.1 + 0.2;            // 0.30000000000000004: the shortest text that reads back as it
  t.achieved_bandwidth_gb_s = 0.1 + 0.11;  // a measured bandwidth stays at most the peak
  t.capacity_gb = 1e-6 * 3;
  t.rates.begin()->second.tflops = 123456789.123456789;
  const cost::Target back = cat.parse_target_toml(cost::to_toml(t), t.origin);
  CHECK(back == t);
}

TEST_CASE("phase and recompute names parse what they print", "[cost][records][unit]") {
  for (const auto p : {cost::Phase::prefill, cost::Phase::decode})
    CHECK(cost::parse_phase(cost::to_string(p)) == p);
  for (const auto p : {cost::JobPhase::prefill, cost::JobPhase::decode, cost::JobPhase::train})
    CHECK(cost::parse_job_phase(cost::to_string(p)) == p);
  CHECK(cost::device_phase(cost::JobPhase::train) == cost::Phase::prefill);
  CHECK(cost::device_phase(cost::JobPhase::decode) == cost::Phase::decode);
  CHECK_THROWS_WITH(cost::parse_phase("train"), "phase 'train': expected one of prefill, decode");
  CHECK_THROWS_WITH(cost::parse_job_phase("x"), "phase 'x': expected one of prefill, decode, train");
  for (const auto r : {cost::Recompute::none, cost::Recompute::selective, cost::Recompute::full})
    CHECK(cost::parse_recompute(cost::to_string(r)) == r);
  CHECK_THROWS_WITH(cost::parse_recompute("some"), "--recompute \"some\": expected none, selective or full");
}
