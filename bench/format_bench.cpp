// Element-format hot paths: float32 -> code (encode), float32 -> float32 (quantize,
// "fake quantisation") and code -> float32 (decode), each beside a plain memcpy of the same data
// and a naive scalar baseline (the per-element scalar API) in the same binary.
// Single thread: each benchmark holds tbb::global_control(max_allowed_parallelism, 1); the
// *_2threads variants lift it to show the parallel bulk path. Aim: encode >= 1 G elements/s and
// decode >= 2 G elements/s on one core.
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/io/output.hpp"

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
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism,
                               static_cast<std::size_t>(threads));
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
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism,
                               static_cast<std::size_t>(threads));
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
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism,
                               static_cast<std::size_t>(threads));
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
  benchmark::RegisterBenchmark(("encode/" + n + "/nearest_even/naive_scalar").c_str(), encode_scalar, fmt,
                               kRne);
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

// Large arrays (64 Mi elements, far beyond the caches): decode beside memcpy of the same output
// bytes, one thread. The target is "decode within 2x of memcpy".
constexpr std::size_t kBig = std::size_t{1} << 26;

void memcpy_big_f32(benchmark::State& state) {
  std::vector<float> in(kBig, 1.0F), out(kBig);
  for (auto _ : state) {
    std::memcpy(out.data(), in.data(), kBig * sizeof(float));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBig));
}
BENCHMARK(memcpy_big_f32)->Unit(benchmark::kMillisecond);

void decode_big(benchmark::State& state, const char* name) {
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism, 1);
  const Format& f = Registry::builtin().get(name);
  const auto small = codes_of<std::uint8_t>(f);
  std::vector<std::uint8_t> codes(kBig);
  for (std::size_t i = 0; i < kBig; ++i) codes[i] = small[i % kN];
  std::vector<float> out(kBig);
  for (auto _ : state) {
    decode(f, std::span<const std::uint8_t>(codes), std::span<float>(out));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBig));
}
BENCHMARK_CAPTURE(decode_big, fp8_e4m3, "fp8_e4m3")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(decode_big, fp4_e2m1, "fp4_e2m1")->Unit(benchmark::kMillisecond);

// `lpemu convert` file to file (the lpemu binary of this build tree, all threads) beside, in the
// same run: the bulk kernel on the same values in memory with the same threads, and the I/O
// floor, which converts nothing: the input read with read() in the command's chunk size and the
// output's bytes written through io::AtomicFile (temporary file, fsync, rename), as the command
// does. Each runs with its files on disk (the temporary folder) and in memory (/dev/shm), where
// storage is no limit.
constexpr std::size_t kFile = std::size_t{1} << 26;  // 64 Mi float32: 256 MiB in

const std::vector<float>& file_values() {
  static const std::vector<float> v = [] {
    std::vector<float> out(kFile);
    for (std::size_t i = 0; i < kFile; ++i) out[i] = inputs()[i % kN];
    return out;
  }();
  return v;
}

// A scratch folder holding the input file (raw float32), removed when the program exits.
struct Scratch {
  std::filesystem::path dir;
  explicit Scratch(const std::filesystem::path& parent)
      : dir(parent / ("lpemu_bench_convert_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir);
    std::ofstream raw(dir / "in.f32", std::ios::binary);
    raw.write(reinterpret_cast<const char*>(file_values().data()), static_cast<std::streamsize>(kFile * 4));
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

// The scratch folder on disk (shm = false) or in memory; empty when /dev/shm is missing.
std::filesystem::path scratch(bool shm) {
  if (shm) {
    if (!std::filesystem::is_directory("/dev/shm")) return {};
    static const Scratch s("/dev/shm");
    return s.dir;
  }
  static const Scratch s(std::filesystem::temp_directory_path());
  return s.dir;
}

std::string lpemu_binary() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "lpemu").string();
}

// Runs `cmd` through the shell once per iteration; counts kFile items per iteration.
void run_command(benchmark::State& state, const std::string& cmd) {
  for (auto _ : state) {
    if (std::system(cmd.c_str()) != 0) {
      state.SkipWithError(("failed: " + cmd).c_str());
      break;
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kFile));
}

void convert_cli(benchmark::State& state, const char* to, bool packed, const char* ext, bool shm) {
  const auto dir = scratch(shm);
  if (dir.empty()) {
    state.SkipWithError("no /dev/shm");
    return;
  }
  const std::string out = (dir / (std::string("out.") + ext)).string();
  run_command(state, lpemu_binary() + " convert --from fp32 --to " + to + (packed ? " --packed" : "") +
                         " --force " + (dir / "in.f32").string() + " " + out + " 2>/dev/null");
  std::filesystem::remove(out);
}

// stdin to stdout through pipes, beside the same pipes with cat in lpemu's place.
void convert_pipe(benchmark::State& state, bool lpemu) {
  const std::string in = (scratch(true).empty() ? scratch(false) : scratch(true)) / "in.f32";
  const std::string middle =
      lpemu ? lpemu_binary() + " convert --from fp32 --to fp8_e4m3 - -" : std::string("cat");
  run_command(state, "cat " + in + " | " + middle + " | cat > /dev/null");
}

void convert_kernel(benchmark::State& state, const char* to) {
  const Format& f = Registry::builtin().get(to);
  const auto& in = file_values();
  std::vector<std::uint8_t> out(kFile);
  for (auto _ : state) {
    encode(f, std::span<const float>(in), std::span<std::uint8_t>(out), ConvertOptions{});
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kFile));
}

// The I/O of a float32 -> 8-bit conversion, converting nothing: read the input in 256 KiB
// read()s (the command's chunk), write a quarter of its bytes through io::AtomicFile.
void convert_io_floor(benchmark::State& state, bool shm) {
  const auto dir = scratch(shm);
  if (dir.empty()) {
    state.SkipWithError("no /dev/shm");
    return;
  }
  std::vector<char> chunk(std::size_t{1} << 18);
  for (auto _ : state) {
    std::ifstream in(dir / "in.f32", std::ios::binary);
    lpemu::io::AtomicFile out(dir / "floor.out", lpemu::io::OutputPolicy{true, {}});
    while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
      out.stream().write(chunk.data(), in.gcount() / 4);
    }
    out.commit();
  }
  std::filesystem::remove(dir / "floor.out");
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kFile));
}

// The command's fixed cost (process start, format registry, atomic output with fsync) on 8 values.
void convert_cli_startup(benchmark::State& state) {
  const auto dir = scratch(false);
  {
    std::ofstream tiny(dir / "tiny.f32", std::ios::binary);
    tiny.write(reinterpret_cast<const char*>(file_values().data()), 32);
  }
  const std::string cmd = lpemu_binary() + " convert --from fp32 --to fp8_e4m3 --force " +
                          (dir / "tiny.f32").string() + " " + (dir / "tiny.out").string() + " 2>/dev/null";
  for (auto _ : state) {
    if (std::system(cmd.c_str()) != 0) {
      state.SkipWithError(("failed: " + cmd).c_str());
      break;
    }
  }
}
BENCHMARK(convert_cli_startup)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_CAPTURE(convert_kernel, fp8_e4m3, "fp8_e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(convert_kernel, fp4_e2m1, "fp4_e2m1")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(convert_kernel, fp6_e2m3, "fp6_e2m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(convert_io_floor, shm, true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(convert_cli, fp8_e4m3_raw_shm, "fp8_e4m3", false, "raw", true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(convert_cli, fp8_e4m3_npy_shm, "fp8_e4m3", false, "npy", true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(convert_cli, fp4_e2m1_raw_shm, "fp4_e2m1", false, "raw", true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(convert_cli, fp4_e2m1_packed_shm, "fp4_e2m1", true, "raw", true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(convert_cli, fp6_e2m3_packed_shm, "fp6_e2m3", true, "raw", true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(convert_io_floor, disk, false)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(convert_cli, fp8_e4m3_raw_disk, "fp8_e4m3", false, "raw", false)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(convert_pipe, cat, false)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(convert_pipe, lpemu, true)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
