// GEMM under datapaths (fp8_e4m3 inputs) beside Eigen's native float GEMM of the same shape.
// Figures go in notes, not assertions.
#include <map>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>
#include <Eigen/Dense>

#include "lpemu/datapath/gemm.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"

namespace {

using namespace lpemu;

struct Inputs {
  std::vector<std::uint8_t> a, b;
  Eigen::MatrixXf fa, fb;
};

const Inputs& inputs(std::size_t n) {
  static std::map<std::size_t, Inputs> cache;
  auto it = cache.find(n);
  if (it != cache.end()) return it->second;
  const auto& e4m3 = format::Registry::builtin().get("fp8_e4m3");
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Inputs in;
  in.a.resize(n * n);
  in.b.resize(n * n);
  in.fa.resize(static_cast<long>(n), static_cast<long>(n));
  in.fb.resize(static_cast<long>(n), static_cast<long>(n));
  for (std::size_t i = 0; i < n * n; ++i) {
    in.a[i] = static_cast<std::uint8_t>(format::encode(e4m3, static_cast<double>(normal(rng))));
    in.b[i] = static_cast<std::uint8_t>(format::encode(e4m3, static_cast<double>(normal(rng))));
    in.fa(static_cast<long>(i / n), static_cast<long>(i % n)) =
        static_cast<float>(format::decode(e4m3, in.a[i]));
    in.fb(static_cast<long>(i / n), static_cast<long>(i % n)) =
        static_cast<float>(format::decode(e4m3, in.b[i]));
  }
  return cache.emplace(n, std::move(in)).first->second;
}

void gemm_datapath(benchmark::State& state, const char* name) {
  const auto n = static_cast<std::size_t>(state.range(0));
  datapath::Datapath dp = datapath::DatapathRegistry::builtin().get(name);
  dp.a = dp.b = format::Registry::builtin().get("fp8_e4m3");  // ideal / fp32_sequential: e4m3 codes in
  const Inputs& in = inputs(n);
  std::vector<std::uint32_t> d(n * n);
  for (auto _ : state) {
    datapath::gemm(dp, n, n, n, in.a, in.b, {}, d);
    benchmark::DoNotOptimize(d.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(n * n * n));
  state.SetLabel("MACs/s");
}

// One worker thread: the same cores as Eigen's GEMM (single-threaded without OpenMP).
void gemm_datapath_1thread(benchmark::State& state, const char* name) {
  tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
  gemm_datapath(state, name);
}

// Decode-style GEMV: one row of A times the n × n B (m = 1), where packing B dominates.
// Threads: all.
void gemm_datapath_m1(benchmark::State& state, const char* name) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const datapath::Datapath& dp = datapath::DatapathRegistry::builtin().get(name);
  const Inputs& in = inputs(n);
  const std::span<const std::uint8_t> row(in.a.data(), n);
  std::vector<std::uint32_t> d(n);
  for (auto _ : state) {
    datapath::gemm(dp, 1, n, n, row, in.b, {}, d);
    benchmark::DoNotOptimize(d.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(n * n));
  state.SetLabel("MACs/s");
}

// m × n × n (m: the range's second argument) on one thread, B given as codes (packed on every
// call) or prepared once before timing (a weight: datapath::PreparedB, packed for the kernels).
void gemm_datapath_rows_1thread(benchmark::State& state, const char* name, bool prepared) {
  tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto m = static_cast<std::size_t>(state.range(1));
  const datapath::Datapath& dp = datapath::DatapathRegistry::builtin().get(name);
  const Inputs& in = inputs(n);
  const datapath::PreparedB b(dp, n, n, in.b, prepared);
  const std::span<const std::uint8_t> a(in.a.data(), m * n);
  std::vector<std::uint32_t> d(m * n);
  for (auto _ : state) {
    if (prepared) {
      datapath::gemm(m, a, b, {}, d);
    } else {
      datapath::gemm(dp, m, n, n, a, in.b, {}, d);
    }
    benchmark::DoNotOptimize(d.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(m * n * n));
  state.SetLabel("MACs/s");
}

void gemm_eigen_float(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const Inputs& in = inputs(n);
  Eigen::MatrixXf c(static_cast<long>(n), static_cast<long>(n));
  for (auto _ : state) {
    c.noalias() = in.fa * in.fb;
    benchmark::DoNotOptimize(c.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(n * n * n));
  state.SetLabel("MACs/s");
}

BENCHMARK(gemm_eigen_float)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(gemm_datapath, h100_e4m3_fp32, "h100_e4m3_fp32")
    ->Arg(64)
    ->Arg(256)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(gemm_datapath_1thread, h100_e4m3_fp32, "h100_e4m3_fp32")
    ->Arg(256)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(gemm_datapath_1thread, ideal, "ideal")
    ->Arg(256)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(gemm_datapath, ideal, "ideal")
    ->Arg(64)
    ->Arg(256)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(gemm_datapath_m1, h100_e4m3_fp32, "h100_e4m3_fp32")
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(gemm_datapath_rows_1thread, h100_e4m3_fp32_codes, "h100_e4m3_fp32", false)
    ->Args({1024, 1})
    ->Args({1024, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(gemm_datapath_rows_1thread, h100_e4m3_fp32_prepared_b, "h100_e4m3_fp32", true)
    ->Args({1024, 1})
    ->Args({1024, 64})
    ->Args({1024, 1024})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(gemm_datapath, fp32_sequential, "fp32_sequential")
    ->Arg(64)
    ->Arg(256)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
