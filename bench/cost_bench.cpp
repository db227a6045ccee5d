// Cost-model throughput: how fast a (target, model, plan) point is priced, for sweeps.
#include <benchmark/benchmark.h>

#include "lpemu/cost/catalog.hpp"

namespace {

void BM_DecodeRoofline(benchmark::State& state) {
  lpemu::cost::Catalog c(lpemu::format::Registry::builtin());
  const auto& t = c.target("h100_sxm");
  const auto& s = c.shape("llama2_70b");
  const auto plan = lpemu::cost::LayerwisePlan::uniform("nvfp4", "nvfp4", "nvfp4", "fp8_e4m3", s.n_layers);
  for (auto _ : state) {
    auto w = lpemu::cost::build_workload(s, plan, t, c, lpemu::cost::Phase::decode, 8, 4096);
    benchmark::DoNotOptimize(lpemu::cost::roofline(w, t).time_s);
  }
}
BENCHMARK(BM_DecodeRoofline);

void BM_MacCost(benchmark::State& state) {
  lpemu::cost::Catalog c(lpemu::format::Registry::builtin());
  const auto f = lpemu::cost::resolve_format("mxfp8_e4m3", c.formats());
  const auto& dp = c.datapath("generic_fp8");
  for (auto _ : state) benchmark::DoNotOptimize(lpemu::cost::mac_cost(f, f, dp).total_fa);
}
BENCHMARK(BM_MacCost);

}  // namespace
