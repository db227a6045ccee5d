// Element-format hot paths: float32 -> code (encode), float32 -> float32 (quantize,
// "fake quantisation") and code -> float32 (decode), each beside a plain memcpy of the same data
// and a naive scalar baseline (the per-element scalar API) in the same binary.
// Single thread: each benchmark holds tbb::global_control(max_allowed_parallelism, 1); the
// *_2threads variants lift it to show the parallel bulk path. Aim: encode >= 1 G elements/s and
// decode >= 2 G elements/s on one core.
#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"

namespace {

using namespace lpemu::format;

constexpr std::size_t kN = 1 << 16;  // 256 KiB of float32 input: stays in L2

// Normal-ish activations with a sprinkle of outliers, as a model layer would produce.
const std::vector<float>& inputs() {
  static const std::vector<float> v = [] {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0F, 4.0F);
    std::vector<float> out(kN);
    for (auto& x : out) x = nd(rng);
    for (std::size_t i = 0; i < kN; i += 97) out[i] *= 1000.0F;
    return out;
  }();
  return v;
}

ConvertOptions opts(RoundingMode m) {
  ConvertOptions o;
  o.rounding = m;
  o.overflow = Overflow::saturate;
  o.seed = 7;
  return o;
}

void finish(benchmark::State& state, std::size_t in_bytes, std::size_t out_bytes) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kN));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kN * (in_bytes + out_bytes)));
}

void BM_memcpy_f32(benchmark::State& state) {
  const auto& in = inputs();
  std::vector<float> out(kN);
  for (auto _ : state) {
    std::memcpy(out.data(), in.data(), kN * sizeof(float));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  finish(state, 4, 4);
}
BENCHMARK(BM_memcpy_f32);

void BM_memcpy_u8(benchmark::State& state) {
  std::vector<std::uint8_t> in(kN, 0x3c);
  std::vector<std::uint8_t> out(kN);
  for (auto _ : state) {
    std::memcpy(out.data(), in.data(), kN);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  finish(state, 1, 1);
}
BENCHMARK(BM_memcpy_u8);

template <class Code>
void encode_bulk(benchmark::State& state, const char* name, RoundingMode mode, int threads) {
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
  const Format& f = Registry::builtin().get(name);
  const auto& in = inputs();
  std::vector<Code> out(kN);
  const ConvertOptions o = opts(mode);
  for (auto _ : state) {
    encode(f, std::span<const float>(in), std::span<Code>(out), o);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  finish(state, 4, sizeof(Code));
}

void quantize_bulk(benchmark::State& state, const char* name, RoundingMode mode, int threads) {
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
  const Format& f = Registry::builtin().get(name);
  const auto& in = inputs();
  std::vector<float> out(kN);
  const ConvertOptions o = opts(mode);
  for (auto _ : state) {
    quantize(f, std::span<const float>(in), std::span<float>(out), o);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  finish(state, 4, 4);
}

// Naive baseline: the scalar API called per element.
void encode_scalar(benchmark::State& state, const char* name, RoundingMode mode) {
  const Format& f = Registry::builtin().get(name);
  const auto& in = inputs();
  std::vector<std::uint16_t> out(kN);
  const ConvertOptions o = opts(mode);
  for (auto _ : state) {
    for (std::size_t i = 0; i < kN; ++i) out[i] = static_cast<std::uint16_t>(encode(f, in[i], o, i));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  finish(state, 4, 2);
}

template <class Code>
std::vector<Code> codes_of(const Format& f) {
  std::vector<Code> c(kN);
  encode(f, std::span<const float>(inputs()), std::span<Code>(c), opts(RoundingMode::nearest_even));
  return c;
}

template <class Code>
void decode_bulk(benchmark::State& state, const char* name, int threads) {
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
  const Format& f = Registry::builtin().get(name);
  const auto codes = codes_of<Code>(f);
  std::vector<float> out(kN);
  for (auto _ : state) {
    decode(f, std::span<const Code>(codes), std::span<float>(out));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  finish(state, sizeof(Code), 4);
}

template <class Code>
void decode_scalar(benchmark::State& state, const char* name) {
  const Format& f = Registry::builtin().get(name);
  const auto codes = codes_of<Code>(f);
  std::vector<float> out(kN);
  for (auto _ : state) {
    for (std::size_t i = 0; i < kN; ++i) out[i] = static_cast<float>(decode(f, codes[i]));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  finish(state, sizeof(Code), 4);
}

constexpr auto kRne = RoundingMode::nearest_even;
constexpr auto kSr = RoundingMode::stochastic;

template <class Code>
void register_format(const char* fmt) {
  const std::string n(fmt);
  benchmark::RegisterBenchmark(("encode/" + n + "/nearest_even").c_str(), encode_bulk<Code>, fmt, kRne, 1);
  benchmark::RegisterBenchmark(("encode/" + n + "/stochastic").c_str(), encode_bulk<Code>, fmt, kSr, 1);
  benchmark::RegisterBenchmark(("encode/" + n + "/nearest_even/naive_scalar").c_str(), encode_scalar, fmt, kRne);
  benchmark::RegisterBenchmark(("quantize/" + n + "/nearest_even").c_str(), quantize_bulk, fmt, kRne, 1);
  benchmark::RegisterBenchmark(("quantize/" + n + "/stochastic").c_str(), quantize_bulk, fmt, kSr, 1);
  benchmark::RegisterBenchmark(("decode/" + n).c_str(), decode_bulk<Code>, fmt, 1);
  benchmark::RegisterBenchmark(("decode/" + n + "/naive_scalar").c_str(), decode_scalar<Code>, fmt);
}

const bool kRegistered = [] {
  register_format<std::uint8_t>("fp8_e4m3");
  register_format<std::uint8_t>("fp8_e5m2");
  register_format<std::uint8_t>("fp6_e2m3");
  register_format<std::uint8_t>("fp4_e2m1");
  register_format<std::uint16_t>("bf16");
  return true;
}();

// Multi-thread note: the same bulk calls with two threads on 16x more data (the bulk path splits
// work into 32 Ki-element chunks, so the kN array above is too small to split).
void encode_bulk_2threads(benchmark::State& state) {
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism, 2);
  const Format& f = Registry::builtin().get("fp8_e4m3");
  std::vector<float> in(16 * kN);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = inputs()[i % kN];
  std::vector<std::uint8_t> out(in.size());
  const ConvertOptions o = opts(kRne);
  for (auto _ : state) {
    encode(f, std::span<const float>(in), std::span<std::uint8_t>(out), o);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * in.size()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * in.size() * 5));
}
BENCHMARK(encode_bulk_2threads)->UseRealTime();

}  // namespace
