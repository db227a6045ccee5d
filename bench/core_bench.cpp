// The core model's speed: every GEMM of one Llama-3-70B block (decode at batch 1 and 64, context
// 4096) on the example 128x128 core, the analytic model against an in-run baseline that walks
// every fold of every GEMM one by one (what a fold-level simulator costs at least).
#include <vector>

#include <benchmark/benchmark.h>

#include "lpemu/app/core.hpp"
#include "lpemu/core/model.hpp"

namespace {

namespace core = lpemu::core;

struct Setup {
  core::Core c = core::load_core("example_fp8");
  const lpemu::datapath::Datapath* lane = nullptr;
  std::vector<core::Gemm> gemms;
};

Setup setup(long long batch) {
  static lpemu::experiment::Context ctx;  // its registries outlive the run
  Setup s;
  s.lane = &ctx.datapaths().get(s.c.lane);
  s.gemms = lpemu::app::shape_gemms(ctx.costs().shape("llama3_70b"), "layer", lpemu::cost::Phase::decode,
                                    batch, 4096);
  return s;
}

void BM_core_llama3_70b_layer(benchmark::State& state) {
  const Setup s = setup(state.range(0));
  for (auto _ : state) {
    long long cycles = 0;
    for (const core::Gemm& g : s.gemms) cycles += core::simulate_gemm(s.c, *s.lane, g).total_cycles * g.count;
    benchmark::DoNotOptimize(cycles);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<long long>(s.gemms.size()));
}

// Baseline: the stall-free cycles summed fold by fold (weight stationary: K folds x N folds).
void BM_core_llama3_70b_layer_fold_walk(benchmark::State& state) {
  const Setup s = setup(state.range(0));
  const long long R = s.c.rows, C = s.c.cols;
  for (auto _ : state) {
    long long cycles = 0;
    for (const core::Gemm& g : s.gemms) {
      for (long long k0 = 0; k0 < g.k; k0 += R) {
        for (long long n0 = 0; n0 < g.n; n0 += C) {
          benchmark::DoNotOptimize(n0);
          cycles += (2 * R + C + g.m - 2) * g.count;
        }
      }
    }
    benchmark::DoNotOptimize(cycles);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<long long>(s.gemms.size()));
}

}  // namespace

BENCHMARK(BM_core_llama3_70b_layer)->Arg(1)->Arg(64);
BENCHMARK(BM_core_llama3_70b_layer_fold_walk)->Arg(1)->Arg(64);
