// Block quantisation throughput, single thread (tbb::global_control inside each benchmark), beside
// plain element quantisation, the scalar generic path and a memcpy baseline. Items are elements; bytes are
// input bytes.
// `--sqnr` is not a Google Benchmark flag: BM_Sqnr reports each built-in format's SQNR on 10^6
// standard-normal values (seed 12345) as counters.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"

namespace {

namespace lb = lpemu::block;

constexpr std::size_t kRows = 1024, kCols = 1024;

const std::vector<float>& normal_data(std::size_t n) {
  static std::vector<float> x = [n] {
    std::mt19937_64 rng(12345);
    std::normal_distribution<float> d(0.0F, 1.0F);
    std::vector<float> v(n);
    for (auto& e : v) e = d(rng);
    return v;
  }();
  return x;
}

void set_counters(benchmark::State& st, std::size_t n) {
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(n));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) *
                       static_cast<std::int64_t>(n * sizeof(float)));
}

void block_quantize(benchmark::State& st, const char* name, int axis,
                    lpemu::format::RoundingMode rounding = lpemu::format::RoundingMode::nearest_even,
                    bool scalar = false) {
  tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
  lb::BlockFormat f = lb::BlockRegistry::builtin().get(name);
  f.axis = axis;
  f.element_options.rounding = rounding;
  const auto& x = normal_data(kRows * kCols);
  std::vector<float> out(x.size());
  const std::vector<std::size_t> shape{kRows, kCols};
  for (auto _ : st) {
    if (scalar) {
      lb::detail::quantize_generic(f, x, out, shape);
    } else {
      lb::quantize(f, x, out, shape);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(st, x.size());
}

void BM_Mxfp8_Contiguous(benchmark::State& st) { block_quantize(st, "mxfp8_e4m3", -1); }
void BM_Mxfp8_Across(benchmark::State& st) { block_quantize(st, "mxfp8_e4m3", 0); }
void BM_Mxfp4_Contiguous(benchmark::State& st) { block_quantize(st, "mxfp4", -1); }
void BM_Mxfp4_Across(benchmark::State& st) { block_quantize(st, "mxfp4", 0); }
void BM_Nvfp4_Contiguous(benchmark::State& st) { block_quantize(st, "nvfp4", -1); }
void BM_Mxint8_Contiguous(benchmark::State& st) { block_quantize(st, "mxint8", -1); }
// Non-power-of-two scales (FP32 or E4M3 scales, elements divided in double).
void BM_Nvfp4_Across(benchmark::State& st) { block_quantize(st, "nvfp4", 0); }
void BM_Int8PerChannel(benchmark::State& st) { block_quantize(st, "int8_per_channel", -1); }
void BM_Int8PerToken(benchmark::State& st) { block_quantize(st, "int8_per_token", -1); }
void BM_Fp8PerTensor(benchmark::State& st) { block_quantize(st, "fp8_e4m3_per_tensor", -1); }
// The same formats through the scalar generic path: the baseline of the kernels above.
constexpr auto kRne = lpemu::format::RoundingMode::nearest_even;
void BM_Nvfp4_Contiguous_Scalar(benchmark::State& st) { block_quantize(st, "nvfp4", -1, kRne, true); }
void BM_Int8PerChannel_Scalar(benchmark::State& st) {
  block_quantize(st, "int8_per_channel", -1, kRne, true);
}
void BM_Fp8PerTensor_Scalar(benchmark::State& st) {
  block_quantize(st, "fp8_e4m3_per_tensor", -1, kRne, true);
}
// Stochastic rounding of the elements (training recipes use it for gradients).
constexpr auto kSr = lpemu::format::RoundingMode::stochastic;
void BM_Mxfp8_Contiguous_Stochastic(benchmark::State& st) { block_quantize(st, "mxfp8_e4m3", -1, kSr); }
void BM_Mxfp4_Contiguous_Stochastic(benchmark::State& st) { block_quantize(st, "mxfp4", -1, kSr); }
void BM_Mxfp4_Across_Stochastic(benchmark::State& st) { block_quantize(st, "mxfp4", 0, kSr); }
void BM_Nvfp4_Contiguous_Stochastic(benchmark::State& st) { block_quantize(st, "nvfp4", -1, kSr); }
void BM_Nvfp4_Contiguous_Stochastic_Scalar(benchmark::State& st) {
  block_quantize(st, "nvfp4", -1, kSr, true);
}

void element_quantize(benchmark::State& st, const char* name) {
  tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
  const auto& f = lpemu::format::Registry::builtin().get(name);
  const auto& x = normal_data(kRows * kCols);
  std::vector<float> out(x.size());
  for (auto _ : st) {
    lpemu::format::quantize(f, std::span<const float>(x), std::span<float>(out));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(st, x.size());
}

void BM_Element_Fp8E4m3(benchmark::State& st) { element_quantize(st, "fp8_e4m3"); }
void BM_Element_Fp4E2m1(benchmark::State& st) { element_quantize(st, "fp4_e2m1"); }

void BM_Memcpy(benchmark::State& st) {
  const auto& x = normal_data(kRows * kCols);
  std::vector<float> out(x.size());
  for (auto _ : st) {
    std::memcpy(out.data(), x.data(), x.size() * sizeof(float));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(st, x.size());
}

// SQNR (dB) of each built-in block format on 10^6 standard-normal values, as a counter.
void BM_Sqnr(benchmark::State& st) {
  const auto names = lb::BlockRegistry::builtin().names();
  const auto& name = names[static_cast<std::size_t>(st.range(0))];
  st.SetLabel(name);
  std::mt19937_64 rng(12345);
  std::normal_distribution<float> d(0.0F, 1.0F);
  std::vector<float> x(1000000);
  for (auto& e : x) e = d(rng);
  std::vector<float> q(x.size());
  const std::vector<std::size_t> shape{1000, 1000};
  for (auto _ : st) lb::quantize(lb::BlockRegistry::builtin().get(name), x, q, shape);
  double s = 0, n = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    const double e = static_cast<double>(x[i]) - static_cast<double>(q[i]);
    n += e * e;
  }
  st.counters["sqnr_db"] = 10.0 * std::log10(s / n);
}

}  // namespace

BENCHMARK(BM_Memcpy);
BENCHMARK(BM_Element_Fp8E4m3);
BENCHMARK(BM_Element_Fp4E2m1);
BENCHMARK(BM_Mxfp8_Contiguous);
BENCHMARK(BM_Mxfp8_Across);
BENCHMARK(BM_Mxfp4_Contiguous);
BENCHMARK(BM_Mxfp4_Across);
BENCHMARK(BM_Nvfp4_Contiguous);
BENCHMARK(BM_Mxint8_Contiguous);
BENCHMARK(BM_Nvfp4_Across);
BENCHMARK(BM_Int8PerChannel);
BENCHMARK(BM_Int8PerToken);
BENCHMARK(BM_Fp8PerTensor);
BENCHMARK(BM_Nvfp4_Contiguous_Scalar);
BENCHMARK(BM_Int8PerChannel_Scalar);
BENCHMARK(BM_Fp8PerTensor_Scalar);
BENCHMARK(BM_Mxfp8_Contiguous_Stochastic);
BENCHMARK(BM_Mxfp4_Contiguous_Stochastic);
BENCHMARK(BM_Mxfp4_Across_Stochastic);
BENCHMARK(BM_Nvfp4_Contiguous_Stochastic);
BENCHMARK(BM_Nvfp4_Contiguous_Stochastic_Scalar);
BENCHMARK(BM_Sqnr)->DenseRange(0, 11)->Iterations(1);
