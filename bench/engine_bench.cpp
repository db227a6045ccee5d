// Engine throughput: tokens/s of prefill (128 tokens) and decode for stories260K and for one
// Llama-7B-shaped block with random weights (d = 4096, 32 heads, SwiGLU 11008), under the fp32
// plan and element / block fake-quant plans. Baseline: the fp32 plan (lpemu's float GEMM). The
// block also runs with its (bf16-valued) weights held as bf16, beside the same weights held as
// float32. linear_fp32 / linear_eigen: the float kernel beside Eigen's product, m x 1024 x 1024.
// perplexity_context16: 32 short windows scored one per forward call beside one batch of all.
// With LPEMU_BENCH_1B=1 also a random model of Llama-3.2-1B shape (generated here, never shipped):
// prefill tokens/s for the fp32, mxfp4 and h100_e4m3 (FP8 datapath) plans beside Eigen's sgemm on
// the same weight matrices (the same GEMM FLOPs) in the same run, one thread and all threads.
// LPEMU_BENCH_1B_LAYERS=N keeps the first N of the 16 layers (same layer shape, same classifier).
// With LPEMU_BENCH_LOAD=1 also load_model of a 155M-parameter Llama-shaped float32 checkpoint
// (8 layers, dim 1024, 16/4 heads, FFN 2816, vocab 32000; 0.62 GB) that the benchmark writes into
// LPEMU_BENCH_DIR (default: the system's temporary directory) and removes after, from a warm page
// cache, beside reading the same file's bytes into memory (the page-cache copy rate).
// The 1B runs also report the session's preparation time (prepare_s) and the peak RSS so far.
// With LPEMU_BENCH_155M=1 the same 155M shape in memory: building a session under h100_e4m3 and
// mxfp8 (every weight quantised, encoded and prepared; weights/s) beside the bulk fp8_e4m3 encode
// of the same weights, and a 256-token prefill under fp32, h100_e4m3 and mxfp8 beside the
// engine's float GEMM (linear()) on every weight for the same tokens. These report the process's
// CPU time (all threads), the figure to read on a shared machine.
// With LPEMU_BENCH_8B=1 a random Llama-3-8B-shaped BF16 checkpoint written into LPEMU_BENCH_DIR
// and removed after: its load time and peak RSS, and a 16-token prefill under fp32 and h100_e4m3
// beside the engine's float GEMM on every weight for the same tokens (each where memory allows;
// LPEMU_BENCH_8B_LAYERS=N keeps the first N of its 32 layers).
#include <bit>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <span>
#include <string>

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include <cstdlib>
#include <fstream>
#include <vector>

#include <fcntl.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/ops.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/session.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/metrics/perplexity.hpp"

namespace {

using namespace lpemu::engine;

const QuantizerFactory& quantizers() {
  static const QuantizerFactory q = QuantizerFactory::standard(lpemu::format::Registry::builtin());
  return q;
}

// Plans by name: fp32 (reference), fp8 (element fake-quant of weights and linear inputs), and
// mxfp4 where a block-format provider is registered.
const PrecisionPlan* plan(const std::string& name) {
  static std::map<std::string, PrecisionPlan> plans;
  if (plans.empty()) {
    plans["fp32"] = builtin_plan("fp32");
    plans["fp8_e4m3"] = parse_plan_toml(
        "[defaults]\noverflow = \"saturate\"\n[roles]\nweights = \"fp8_e4m3\"\n"
        "linear_input = \"fp8_e4m3\"\n",
        "bench:fp8_e4m3", quantizers(), GemmFactory::builtin());
    if (GemmFactory::builtin().knows("h100_e4m3_fp32")) {
      plans["h100_e4m3"] = parse_plan_toml(
          "[defaults]\noverflow = \"saturate\"\n[roles]\nweights = \"fp8_e4m3\"\n"
          "linear_input = \"fp8_e4m3\"\nlm_head = \"fp8_e4m3\"\n"
          "lm_head_input = \"fp8_e4m3\"\ngemm = \"h100_e4m3_fp32\"\n",
          "bench:h100_e4m3", quantizers(), GemmFactory::builtin());
    }
    if (quantizers().knows("mxfp8_e4m3")) {  // experiments/plans/mxfp8.toml
      plans["mxfp8"] = parse_plan_toml(
          "[roles]\nweights = \"mxfp8_e4m3\"\nlinear_input = \"mxfp8_e4m3\"\nlm_head = \"mxfp8_e4m3\"\n"
          "lm_head_input = \"mxfp8_e4m3\"\nq = \"mxfp8_e4m3\"\nprobs = \"mxfp8_e4m3\"\n"
          "kv_cache = \"mxfp8_e4m3\"\n",
          "bench:mxfp8", quantizers(), GemmFactory::builtin());
    }
    if (quantizers().knows("mxfp4")) {
      plans["mxfp4"] = parse_plan_toml("[roles]\nweights = \"mxfp4\"\nlinear_input = \"mxfp4\"\n",
                                       "bench:mxfp4", quantizers(), GemmFactory::builtin());
    }
  }
  const auto it = plans.find(name);
  return it == plans.end() ? nullptr : &it->second;
}

const Model& stories() {
  static const Model m = [] {
    std::vector<std::filesystem::path> dirs;
    std::filesystem::path d = std::filesystem::read_symlink("/proc/self/exe").parent_path();
    for (int i = 0; i < 4 && !d.empty(); ++i, d = d.parent_path()) dirs.push_back(d);
    return load_model(resolve_model_path("stories260K", dirs));
  }();
  return m;
}

// One Llama-7B block (no tokenizer; 32-token vocabulary so the classifier costs nothing).
// The block's weights are bf16 values (random float32 with the low 16 bits cleared), held as
// float32 or, for the _bf16 model, as bf16 codes decoded before each GEMM.
// Next random weight in ±0.02 from the fixed LCG state s (the same stream on every run).
float random_weight(std::uint64_t& s) {
  s = s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (static_cast<float>(s >> 40) / 16777216.0F - 0.5F) * 0.04F;
}

// One transformer layer's weights by fill(matrix, rows, cols): attention dim × dim (K and V
// kv × dim), SwiGLU with `hidden` units; RMSNorm gains 1.
template <typename Fill>
LayerWeights random_layer(Fill& fill, Eigen::Index dim, Eigen::Index kv, Eigen::Index hidden) {
  LayerWeights w;
  fill(w.wq, dim, dim);
  fill(w.wk, kv, dim);
  fill(w.wv, kv, dim);
  fill(w.wo, dim, dim);
  fill(w.w1, hidden, dim);
  fill(w.w2, dim, hidden);
  fill(w.w3, hidden, dim);
  w.attention_norm = Vec<float>::Ones(dim);
  w.ffn_norm = Vec<float>::Ones(dim);
  return w;
}

Model make_llama7b_layer(WeightStorage storage) {
  Model x;
  Config& c = x.config;
  c.name = "llama7b-layer";
  c.dim = 4096;
  c.n_layers = 1;
  c.n_heads = 32;
  c.n_kv_heads = 32;
  c.head_dim = 128;
  c.hidden_dim = 11008;
  c.vocab_size = 32;
  c.seq_len = 256;
  const lpemu::format::Format& bf16 = lpemu::format::Registry::builtin().get("bf16");
  std::uint64_t s = 0x9E3779B97F4A7C15ULL;
  // Random weights, rounded to bf16 values so both storages hold the same model.
  auto fill = [&s, &bf16, storage](WeightMatrix& w, Eigen::Index r, Eigen::Index k) {
    RowMatrix v(r, k);
    for (Eigen::Index i = 0; i < v.size(); ++i) v.data()[i] = random_weight(s);
    const std::span<float> all(v.data(), static_cast<std::size_t>(v.size()));
    lpemu::format::quantize(bf16, all, all);
    w = storage == WeightStorage::fp32 ? WeightMatrix(std::move(v))
                                       : WeightMatrix::stored_as(storage, r, k, all);
  };
  fill(x.tok_embeddings, 32, 4096);
  fill(x.output, 32, 4096);
  x.layers.push_back(random_layer(fill, 4096, 4096, 11008));
  x.norm = Vec<float>::Ones(4096);
  return x;
}

const Model& llama7b_layer() {
  static const Model m = make_llama7b_layer(WeightStorage::fp32);
  return m;
}

const Model& llama7b_layer_bf16() {
  static const Model m = make_llama7b_layer(WeightStorage::bf16);
  return m;
}

// Layers of the 1B-shaped model: 16, or LPEMU_BENCH_1B_LAYERS.
int layers_1b() {
  const char* e = std::getenv("LPEMU_BENCH_1B_LAYERS");
  const int n = e != nullptr ? std::atoi(e) : 16;
  return n >= 1 && n <= 16 ? n : 16;
}

// Llama-3.2-1B shape (meta-llama/Llama-3.2-1B config.json: hidden 2048, 16 layers, 32 heads,
// 8 KV heads, intermediate 8192, vocab 128256, tied embeddings, rope_theta 500000, llama3 RoPE
// scaling factor 32) with random weights; 1.24e9 parameters, 4.9 GB in float32.
const Model& llama1b() {
  static const Model m = [] {
    Model x;
    Config& c = x.config;
    c.name = "llama3.2-1b-shape";
    c.dim = 2048;
    c.n_layers = layers_1b();
    c.n_heads = 32;
    c.n_kv_heads = 8;
    c.head_dim = 64;
    c.hidden_dim = 8192;
    c.vocab_size = 128256;
    c.seq_len = 256;
    c.rope_theta = 500000.0;
    c.rope_style = RopeStyle::half;
    c.rope_scaling = "llama3";
    c.rope_factor = 32.0;
    c.rope_low_freq_factor = 1.0;
    c.rope_high_freq_factor = 4.0;
    c.rope_original_max_positions = 8192;
    c.tied_embeddings = true;
    std::uint64_t s = 0x9E3779B97F4A7C15ULL;
    auto fill = [&s](WeightMatrix& w, Eigen::Index r, Eigen::Index k) {
      RowMatrix v(r, k);
      for (Eigen::Index i = 0; i < v.size(); ++i) v.data()[i] = random_weight(s);
      w = std::move(v);
    };
    fill(x.tok_embeddings, c.vocab_size, c.dim);
    x.output = x.tok_embeddings;
    for (int l = 0; l < c.n_layers; ++l) x.layers.push_back(random_layer(fill, 2048, 512, 8192));
    x.norm = Vec<float>::Ones(2048);
    x.validate();
    return x;
  }();
  return m;
}

// Multiply-adds of the model's GEMMs per token (linear layers and classifier; attention's
// score and value products excluded).
double gemm_macs_per_token(const Model& m) {
  double macs = static_cast<double>(m.output.size());
  for (const auto& w : m.layers) {
    macs += static_cast<double>(w.wq.size() + w.wk.size() + w.wv.size() + w.wo.size() + w.w1.size() +
                                w.w2.size() + w.w3.size());
  }
  return macs;
}

constexpr int kPrefill1b = 64;

// The process's peak resident set so far (getrusage), in GB.
double peak_rss_gb() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0 * 1e-9;  // ru_maxrss: KiB on Linux
}

std::vector<int> tokens(int n, int vocab);

// Prefill of kPrefill1b tokens under a plan; its own session, freed after (the mxfp4 copy of the
// weights is another 4.9 GB).
void prefill_1b(benchmark::State& state, const std::string& plan_name, int threads) {
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism,
                               static_cast<std::size_t>(threads));
  const Model& m = llama1b();
  const auto t0 = std::chrono::steady_clock::now();
  Session s(m, *plan(plan_name));
  const auto t = tokens(kPrefill1b, m.config.vocab_size);
  (void)s.forward(
      std::span<const int>(t.data(), 1));  // one token: weights encoded and prepared before timing
  state.counters["prepare_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto _ : state) {
    s.reset();
    benchmark::DoNotOptimize(s.forward(t));
  }
  const double n = kPrefill1b * static_cast<double>(state.iterations());
  state.counters["tokens/s"] = benchmark::Counter(n, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2e-9 * gemm_macs_per_token(m) * n, benchmark::Counter::kIsRate);
  state.counters["peak_rss_GB"] = peak_rss_gb();
}

// Eigen's sgemm on the same matrices and the same token count: Y = X · Wᵀ for every weight, one
// call per weight on one thread (Eigen's own product, no threads).
void sgemm_1b(benchmark::State& state) {
  const Model& m = llama1b();
  const RowMatrix x = RowMatrix::Constant(kPrefill1b, m.config.dim, 0.01F);
  const RowMatrix xh = RowMatrix::Constant(kPrefill1b, m.config.hidden_dim, 0.01F);
  RowMatrix y, buffer;  // float32 weights: view() is the stored matrix itself
  for (auto _ : state) {
    for (const auto& w : m.layers) {
      for (const WeightMatrix* wt : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w1, &w.w3}) {
        y.noalias() = x * wt->view(buffer).transpose();
        benchmark::DoNotOptimize(y.data());
      }
      y.noalias() = xh * w.w2.view(buffer).transpose();
      benchmark::DoNotOptimize(y.data());
    }
    y.noalias() = x * m.output.view(buffer).transpose();
    benchmark::DoNotOptimize(y.data());
  }
  const double n = kPrefill1b * static_cast<double>(state.iterations());
  state.counters["tokens/s"] = benchmark::Counter(n, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2e-9 * gemm_macs_per_token(m) * n, benchmark::Counter::kIsRate);
}

// The fp32 plan's linear map Y = X·Wᵀ (m × 1024 × 1024: the engine's float kernel, every sum in
// ascending k) beside Eigen's product of the same row-major matrices, both on `threads` threads
// (Eigen's product is single-threaded without OpenMP, so it runs on one only).
struct LinearInputs {
  RowMatrix x, w;
};

const LinearInputs& linear_inputs(Eigen::Index m) {
  static std::map<Eigen::Index, LinearInputs> cache;
  auto& in = cache[m];
  if (in.x.size() == 0) {
    std::uint64_t s = 3;
    in.x.resize(m, 1024);
    in.w.resize(1024, 1024);
    for (Eigen::Index i = 0; i < in.x.size(); ++i) in.x.data()[i] = random_weight(s);
    for (Eigen::Index i = 0; i < in.w.size(); ++i) in.w.data()[i] = random_weight(s);
  }
  return in;
}

void linear_fp32(benchmark::State& state) {
  const tbb::global_control threads(tbb::global_control::max_allowed_parallelism,
                                    static_cast<std::size_t>(state.range(1)));
  const LinearInputs& in = linear_inputs(state.range(0));
  RowMatrix y;
  for (auto _ : state) {
    linear(in.x, in.w, Vec<float>(), y);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2e-9 * static_cast<double>(in.x.rows()) * 1024.0 * 1024.0 * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

void linear_eigen(benchmark::State& state) {
  const LinearInputs& in = linear_inputs(state.range(0));
  RowMatrix y;
  for (auto _ : state) {
    y.noalias() = in.x * in.w.transpose();
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2e-9 * static_cast<double>(in.x.rows()) * 1024.0 * 1024.0 * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

BENCHMARK(linear_eigen)
    ->ArgName("m")
    ->Arg(1)
    ->Arg(64)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(linear_fp32)
    ->ArgNames({"m", "threads"})
    ->ArgsProduct({{1, 64, 1024}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

std::vector<int> tokens(int n, int vocab) {
  std::vector<int> t(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = i == 0 ? 1 : (i * 7 + 3) % vocab;
  return t;
}

// Sessions are shared by the prefill and decode benchmarks of a (model, plan) pair, so the 7B
// block's weights are converted once.
Session& session(const Model& m, const std::string& plan_name) {
  static std::map<std::pair<const Model*, std::string>, std::unique_ptr<Session>> sessions;
  auto& s = sessions[{&m, plan_name}];
  if (!s) s = std::make_unique<Session>(m, *plan(plan_name));
  return *s;
}

void prefill(benchmark::State& state, const Model& (*model)(), const std::string& plan_name) {
  const Model& m = model();
  Session& s = session(m, plan_name);
  const auto t = tokens(128, m.config.vocab_size);
  for (auto _ : state) {
    s.reset();
    benchmark::DoNotOptimize(s.forward(t));
  }
  state.counters["tokens/s"] =
      benchmark::Counter(128.0 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// One token per iteration after a context of at least 128 tokens (the cache restarts when full).
void decode(benchmark::State& state, const Model& (*model)(), const std::string& plan_name) {
  const Model& m = model();
  Session& s = session(m, plan_name);
  const auto t = tokens(128, m.config.vocab_size);
  if (s.position() < 128) {
    s.reset();
    (void)s.forward(t);
  }
  int tok = 5;
  for (auto _ : state) {
    if (s.position() >= m.config.seq_len) {
      state.PauseTiming();
      s.reset();
      (void)s.forward(t);
      state.ResumeTiming();
    }
    benchmark::DoNotOptimize(s.forward(std::span<const int>(&tok, 1)));
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// Sliding-window perplexity over 512 tokens in windows of 16 (32 windows, each token scored once),
// one window per forward call (batch_tokens = 16) or all in one batch (batch_tokens = 512): the
// same numbers (batching never changes a result), fewer and larger GEMMs.
void perplexity(benchmark::State& state, const Model& (*model)(), const std::string& plan_name) {
  const Model& m = model();
  lpemu::metrics::PerplexityOptions po;
  po.context = 16;
  po.batch_tokens = static_cast<int>(state.range(0));
  const std::vector<std::vector<int>> docs{tokens(512, m.config.vocab_size)};
  SessionOptions o;
  o.max_tokens = lpemu::metrics::perplexity_cache_tokens(m, docs, po);
  Session s(m, *plan(plan_name), o);
  double nll = 0;
  for (auto _ : state) {
    const auto r = lpemu::metrics::sliding_perplexity(s, docs, po);
    nll = r.front().mean_nll;  // reported below (DoNotOptimize on a double corrupts it with this GCC)
  }
  state.counters["tokens/s"] =
      benchmark::Counter(511.0 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["mean_nll"] = benchmark::Counter(nll, benchmark::Counter::kDefaults);
}

// Registered from main (not at static initialisation, when the format registry may not exist
// yet): plans whose formats are unknown (mxfp4 before the block layer registers its provider)
// are left out.
void register_all() {
  using Fn = void (*)(benchmark::State&, const Model& (*)(), const std::string&);
  for (const auto& [model_name, model] : {std::pair<std::string, const Model& (*)()>{"stories260K", &stories},
                                          {"llama7b_layer", &llama7b_layer},
                                          {"llama7b_layer_bf16", &llama7b_layer_bf16}}) {
    for (const auto& [kind, fn] : {std::pair<std::string, Fn>{"prefill128", &prefill}, {"decode", &decode}}) {
      for (const std::string p : {"fp32", "fp8_e4m3", "mxfp4", "h100_e4m3"}) {
        if (plan(p) == nullptr) continue;
        // Bit-exact datapath emulation of a 7B block would take minutes per iteration.
        if (p == "h100_e4m3" && model_name != "stories260K") continue;
        // The bf16-held block beside the float32-held one: the cost of decoding weights per GEMM.
        if (model_name == "llama7b_layer_bf16" && p != "fp32") continue;
        const auto m = model;
        const auto f = fn;
        benchmark::RegisterBenchmark((kind + "/" + model_name + "/" + p).c_str(),
                                     [m, f, p](benchmark::State& st) { f(st, m, p); })
            ->Unit(kind == "decode" ? benchmark::kMicrosecond : benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
  }
  for (const auto& [model_name, model] : {std::pair<std::string, const Model& (*)()>{"stories260K", &stories},
                                          {"llama7b_layer", &llama7b_layer}}) {
    for (const std::string p : {"fp32", "fp8_e4m3", "h100_e4m3"}) {
      if (plan(p) == nullptr || (p == "h100_e4m3" && model_name != "stories260K")) continue;
      const auto m = model;
      benchmark::RegisterBenchmark(("perplexity_context16/" + model_name + "/" + p).c_str(),
                                   [m, p](benchmark::State& st) { perplexity(st, m, p); })
          ->ArgName("batch_tokens")
          ->Arg(16)
          ->Arg(512)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
}

// The 155M-parameter Llama-shaped model of the load and preparation benchmarks (8 layers, dim
// 1024, 16/4 heads, FFN 2816, vocab 32000, untied), random float32 weights.
Model make_155m() {
  Model x;
  Config& c = x.config;
  c.name = "llama155m-shape";
  c.dim = 1024;
  c.n_layers = 8;
  c.n_heads = 16;
  c.n_kv_heads = 4;
  c.head_dim = 64;
  c.hidden_dim = 2816;
  c.vocab_size = 32000;
  c.seq_len = 256;
  std::uint64_t s = 0x9E3779B97F4A7C15ULL;
  auto fill = [&s](WeightMatrix& w, Eigen::Index r, Eigen::Index k) {
    RowMatrix v(r, k);
    for (Eigen::Index i = 0; i < v.size(); ++i) v.data()[i] = random_weight(s);
    w = std::move(v);
  };
  fill(x.tok_embeddings, c.vocab_size, c.dim);
  fill(x.output, c.vocab_size, c.dim);
  for (int l = 0; l < c.n_layers; ++l) x.layers.push_back(random_layer(fill, 1024, 256, 2816));
  x.norm = Vec<float>::Ones(1024);
  return x;
}

const Model& llama155m() {
  static const Model m = make_155m();
  return m;
}

// Every weight matrix of a model (classifier and embedding included), for the baselines.
std::vector<const WeightMatrix*> weight_matrices(const Model& m) {
  std::vector<const WeightMatrix*> w{&m.tok_embeddings, &m.output};
  for (const auto& l : m.layers) {
    for (const WeightMatrix* x : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) w.push_back(x);
  }
  return w;
}

// Weights a session prepares: every matrix but the embedding (looked up, never multiplied).
double prepared_weights(const Model& m) {
  double n = 0;
  for (const WeightMatrix* w : weight_matrices(m)) n += static_cast<double>(w->size());
  return n - static_cast<double>(m.tok_embeddings.size());
}

// Building a session of the 155M model under a plan: every weight quantised, encoded and (on a
// datapath) prepared for the GEMM kernels. weights/s counts the session's weights.
void prepare_155m(benchmark::State& state, const std::string& plan_name, int threads) {
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism,
                               static_cast<std::size_t>(threads));
  const Model& m = llama155m();
  for (auto _ : state) {
    const Session s(m, *plan(plan_name));
    benchmark::DoNotOptimize(&s);
  }
  state.counters["weights/s"] = benchmark::Counter(
      prepared_weights(m) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// Baseline of prepare_155m: the bulk encode kernel (fp8_e4m3, nearest even) on the same weights
// into one byte each, buffers allocated before timing.
void encode_155m(benchmark::State& state, int threads) {
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism,
                               static_cast<std::size_t>(threads));
  const Model& m = llama155m();
  const auto& f = lpemu::format::Registry::builtin().get("fp8_e4m3");
  std::vector<const WeightMatrix*> ws = weight_matrices(m);
  ws.erase(ws.begin());  // not the embedding
  std::vector<std::vector<std::uint8_t>> out;
  for (const WeightMatrix* w : ws) out.emplace_back(static_cast<std::size_t>(w->size()));
  RowMatrix buffer;
  for (auto _ : state) {
    for (std::size_t i = 0; i < ws.size(); ++i) {
      const RowMatrix& v = ws[i]->view(buffer);
      lpemu::format::encode(f, std::span<const float>(v.data(), static_cast<std::size_t>(v.size())),
                            std::span<std::uint8_t>(out[i]));
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["weights/s"] = benchmark::Counter(
      prepared_weights(m) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

constexpr int kPrefill155m = 256;

// Prefill of 256 tokens of the 155M model under a plan (the session built before timing).
void prefill_155m(benchmark::State& state, const std::string& plan_name, int threads) {
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism,
                               static_cast<std::size_t>(threads));
  const Model& m = llama155m();
  Session s(m, *plan(plan_name));
  const auto t = tokens(kPrefill155m, m.config.vocab_size);
  for (auto _ : state) {
    s.reset();
    benchmark::DoNotOptimize(s.forward(t));
  }
  const double n = kPrefill155m * static_cast<double>(state.iterations());
  state.counters["tokens/s"] = benchmark::Counter(n, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2e-9 * gemm_macs_per_token(m) * n, benchmark::Counter::kIsRate);
  state.counters["peak_rss_GB"] = peak_rss_gb();
}

// Baseline of prefill_155m: the engine's own float GEMM (linear(), the fp32 plan's kernel) on
// every weight of the model for the same 256 tokens, in the same order as a forward pass.
void linear_155m(benchmark::State& state, int threads) {
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism,
                               static_cast<std::size_t>(threads));
  const Model& m = llama155m();
  std::uint64_t seed = 11;
  RowMatrix x(kPrefill155m, m.config.dim), xh(kPrefill155m, m.config.hidden_dim), y;
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = random_weight(seed);
  for (Eigen::Index i = 0; i < xh.size(); ++i) xh.data()[i] = random_weight(seed);
  RowMatrix buffer;  // float32 weights: view() is the stored matrix itself
  for (auto _ : state) {
    for (const auto& w : m.layers) {
      for (const WeightMatrix* wt : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w1, &w.w3}) {
        linear(x, wt->view(buffer), Vec<float>(), y);
        benchmark::DoNotOptimize(y.data());
      }
      linear(xh, w.w2.view(buffer), Vec<float>(), y);
      benchmark::DoNotOptimize(y.data());
    }
    linear(x, m.output.view(buffer), Vec<float>(), y);
    benchmark::DoNotOptimize(y.data());
  }
  const double n = kPrefill155m * static_cast<double>(state.iterations());
  state.counters["tokens/s"] = benchmark::Counter(n, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2e-9 * gemm_macs_per_token(m) * n, benchmark::Counter::kIsRate);
}

// The 155M-parameter float32 checkpoint of the load benchmarks, written once per run.
class LoadCheckpoint {
 public:
  LoadCheckpoint() {
    const char* d = std::getenv("LPEMU_BENCH_DIR");
    dir_ = std::filesystem::path(d != nullptr ? d : std::filesystem::temp_directory_path().string()) /
           ("lpemu_bench_load_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    file_ = dir_ / "llama155m.h5";
    const Model x = make_155m();
    save_model(x, file_);
    bytes_ = static_cast<double>(std::filesystem::file_size(file_));
    params_ = static_cast<double>(x.weight_bytes()) / sizeof(float);
  }
  LoadCheckpoint(const LoadCheckpoint&) = delete;
  LoadCheckpoint& operator=(const LoadCheckpoint&) = delete;
  ~LoadCheckpoint() { std::filesystem::remove_all(dir_); }
  const std::filesystem::path& file() const { return file_; }
  double bytes() const { return bytes_; }
  double params() const { return params_; }

 private:
  std::filesystem::path dir_, file_;
  double bytes_ = 0, params_ = 0;
};

const LoadCheckpoint& load_checkpoint() {
  static const LoadCheckpoint c;
  return c;
}

// load_model of the checkpoint on `threads` threads; the file is read once before timing (warm cache).
void load_155m(benchmark::State& state, int threads) {
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism,
                               static_cast<std::size_t>(threads));
  const LoadCheckpoint& c = load_checkpoint();
  (void)load_model(c.file());
  for (auto _ : state) benchmark::DoNotOptimize(load_model(c.file()));
  const double n = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(1e-9 * c.bytes() * n, benchmark::Counter::kIsRate);
  state.counters["params"] = c.params();
}

// The page-cache copy rate, load_model's ceiling: the checkpoint's bytes read with pread in 64 MiB
// pieces on one thread into a buffer already in memory (allocated and touched before timing).
void read_file_155m(benchmark::State& state) {
  const LoadCheckpoint& c = load_checkpoint();
  const auto size = static_cast<std::size_t>(c.bytes());
  std::vector<char> buf(size);
  const auto read_all = [&] {
    const int fd =
        ::open(c.file().c_str(), O_RDONLY | O_CLOEXEC);  // NOLINT(cppcoreguidelines-pro-type-vararg)
    for (std::size_t done = 0; done < size;) {
      const ssize_t got =
          ::pread(fd, buf.data() + done, std::min<std::size_t>(size - done, std::size_t{64} << 20),
                  static_cast<off_t>(done));
      if (got <= 0) break;
      done += static_cast<std::size_t>(got);
    }
    ::close(fd);
    benchmark::DoNotOptimize(buf.data());
  };
  read_all();  // warm cache
  for (auto _ : state) read_all();
  const double n = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(1e-9 * c.bytes() * n, benchmark::Counter::kIsRate);
}

// Llama-3-8B shape (meta-llama/Meta-Llama-3-8B config.json: hidden 4096, 32 layers, 32 heads,
// 8 KV heads, intermediate 14336, vocab 128256, untied classifier, rope_theta 500000) with random
// BF16 weights: 8.03e9 parameters, a 16.1 GB model file. LPEMU_BENCH_8B_LAYERS=N keeps the first N
// of the 32 layers (same layer shape, same embedding and classifier), for machines it does not fit.
int layers_8b() {
  const char* e = std::getenv("LPEMU_BENCH_8B_LAYERS");
  const int n = e != nullptr ? std::atoi(e) : 32;
  return n >= 1 && n <= 32 ? n : 32;
}

constexpr int kPrefill8b = 16;

// The process's resident set now (/proc/self/statm), in GB.
double rss_gb() {
  std::ifstream in("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  in >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGE_SIZE)) * 1e-9;
}

// Memory the system could still give (MemAvailable), in GB.
double available_gb() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  std::size_t kb = 0;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return static_cast<double>(kb) * 1024.0 * 1e-9;
  }
  return 0;
}

// The 8B-shaped BF16 checkpoint, written by the benchmark into LPEMU_BENCH_DIR (default: the
// system's temporary directory) and removed after; the model generated for it is freed before
// anything is timed.
class Checkpoint8b {
 public:
  Checkpoint8b() {
    const char* d = std::getenv("LPEMU_BENCH_DIR");
    dir_ = std::filesystem::path(d != nullptr ? d : std::filesystem::temp_directory_path().string()) /
           ("lpemu_bench_8b_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    file_ = dir_ / "llama3_8b_bf16.h5";
    const auto t0 = std::chrono::steady_clock::now();
    {
      Model x;
      Config& c = x.config;
      c.name = "llama3-8b-shape";
      c.dim = 4096;
      c.n_layers = layers_8b();
      c.n_heads = 32;
      c.n_kv_heads = 8;
      c.head_dim = 128;
      c.hidden_dim = 14336;
      c.vocab_size = 128256;
      c.seq_len = 256;
      c.rope_theta = 500000.0;
      c.rope_style = RopeStyle::half;
      std::uint64_t s = 0x9E3779B97F4A7C15ULL;
      // bf16 codes of random weights (the float's upper half: exactly a bf16 value).
      auto fill = [&s](WeightMatrix& w, Eigen::Index r, Eigen::Index k) {
        std::vector<std::uint16_t> codes(static_cast<std::size_t>(r * k));
        for (auto& code : codes)
          code = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(random_weight(s)) >> 16);
        w = WeightMatrix::from_codes(WeightStorage::bf16, r, k, std::move(codes));
      };
      fill(x.tok_embeddings, c.vocab_size, c.dim);
      fill(x.output, c.vocab_size, c.dim);
      for (int l = 0; l < c.n_layers; ++l) x.layers.push_back(random_layer(fill, 4096, 1024, 14336));
      x.norm = Vec<float>::Ones(4096);
      x.validate();
      params_ = static_cast<double>(x.weight_bytes()) / 2;  // matrices in 2 bytes; norms are few
      save_model(x, file_);
    }
    ::malloc_trim(0);  // the generated model's memory back to the system before the load
    write_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bytes_ = static_cast<double>(std::filesystem::file_size(file_));
  }
  Checkpoint8b(const Checkpoint8b&) = delete;
  Checkpoint8b& operator=(const Checkpoint8b&) = delete;
  ~Checkpoint8b() { std::filesystem::remove_all(dir_); }
  const std::filesystem::path& file() const { return file_; }
  double bytes() const { return bytes_; }
  double params() const { return params_; }
  double write_s() const { return write_s_; }

 private:
  std::filesystem::path dir_, file_;
  double bytes_ = 0, params_ = 0, write_s_ = 0;
};

// The loaded 8B model, kept for the prefill benchmarks; the checkpoint is removed once loaded.
std::unique_ptr<Model>& model_8b() {
  static std::unique_ptr<Model> m;
  return m;
}

// load_model of the 8B checkpoint (once: its bf16 matrices are held as they are, 16 GB).
void load_8b(benchmark::State& state) {
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism, 2);
  double bytes = 0, params = 0, write_s = 0;
  {
    const Checkpoint8b c;
    bytes = c.bytes();
    params = c.params();
    write_s = c.write_s();
    for (auto _ : state) {
      model_8b().reset();
      model_8b() = std::make_unique<Model>(load_model(c.file()));
    }
  }
  state.counters["GB/s"] =
      benchmark::Counter(1e-9 * bytes * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["file_GB"] = 1e-9 * bytes;
  state.counters["params"] = params;
  state.counters["write_s"] = write_s;
  state.counters["rss_GB"] = rss_gb();
  state.counters["peak_rss_GB"] = peak_rss_gb();
}

// Baseline of prefill_8b: the engine's float GEMM (linear() on the bf16-held weights, decoded
// panel by panel as the fp32 plan's GEMMs read them) on every weight, the same tokens.
void linear_8b(benchmark::State& state) {
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism, 2);
  if (!model_8b()) {
    state.SkipWithError("the 8B model was not loaded (run load/llama3_8b_bf16 first)");
    return;
  }
  const Model& m = *model_8b();
  std::uint64_t seed = 11;
  RowMatrix x(kPrefill8b, m.config.dim), xh(kPrefill8b, m.config.hidden_dim), y;
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = random_weight(seed);
  for (Eigen::Index i = 0; i < xh.size(); ++i) xh.data()[i] = random_weight(seed);
  for (auto _ : state) {
    for (const auto& w : m.layers) {
      for (const WeightMatrix* wt : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w1, &w.w3}) {
        linear(x, *wt, Vec<float>(), y);
        benchmark::DoNotOptimize(y.data());
      }
      linear(xh, w.w2, Vec<float>(), y);
      benchmark::DoNotOptimize(y.data());
    }
    linear(x, m.output, Vec<float>(), y);
    benchmark::DoNotOptimize(y.data());
  }
  const double n = kPrefill8b * static_cast<double>(state.iterations());
  state.counters["tokens/s"] = benchmark::Counter(n, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2e-9 * gemm_macs_per_token(m) * n, benchmark::Counter::kIsRate);
}

// Prefill of kPrefill8b tokens of the 8B model under a plan, its session built (and timed as
// prepare_s) before; skipped, saying why, where the session's weights would not fit in memory.
void prefill_8b(benchmark::State& state, const std::string& plan_name) {
  const tbb::global_control gc(tbb::global_control::max_allowed_parallelism, 2);
  if (!model_8b()) {
    state.SkipWithError("the 8B model was not loaded (run load/llama3_8b_bf16 first)");
    return;
  }
  const Model& m = *model_8b();
  // A datapath plan keeps every multiplied weight as 1-byte codes (packed copies only within
  // LPEMU_PACKED_WEIGHTS_MB); the fp32 plan reads the bf16 weights as they are.
  // Beside them: the float32 copy of the weight being prepared (the classifier's: 2.1 GB).
  const double need = plan_name == "fp32" ? 1.0 : 1e-9 * gemm_macs_per_token(m) + 3.0;
  if (const double avail = available_gb(); avail < need) {
    state.SkipWithError(("needs about " + std::to_string(need) + " GB more memory, " + std::to_string(avail) +
                         " GB available: fewer layers (LPEMU_BENCH_8B_LAYERS) fit")
                            .c_str());
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Session s(m, *plan(plan_name));
  const auto t = tokens(kPrefill8b, m.config.vocab_size);
  (void)s.forward(std::span<const int>(t.data(), 1));  // one token: weights prepared before timing
  state.counters["prepare_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto _ : state) {
    s.reset();
    benchmark::DoNotOptimize(s.forward(t));
  }
  const double n = kPrefill8b * static_cast<double>(state.iterations());
  state.counters["tokens/s"] = benchmark::Counter(n, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2e-9 * gemm_macs_per_token(m) * n, benchmark::Counter::kIsRate);
  state.counters["rss_GB"] = rss_gb();
  state.counters["peak_rss_GB"] = peak_rss_gb();
}

}  // namespace

// Our own main (it takes precedence over benchmark_main's) so registration can depend on plans.
int main(int argc, char** argv) {
  register_all();
  if (const char* e = std::getenv("LPEMU_BENCH_1B"); e != nullptr && std::string(e) == "1") {
    const std::string n = "prefill" + std::to_string(kPrefill1b) + "/llama3.2_1b_shape/";
    benchmark::RegisterBenchmark((n + "eigen_sgemm_1thread").c_str(), sgemm_1b)
        ->Unit(benchmark::kSecond)
        ->UseRealTime();
    for (const std::string p : {"fp32", "mxfp4", "h100_e4m3"}) {
      if (plan(p) == nullptr) continue;
      for (const int t : {1, 2}) {
        benchmark::RegisterBenchmark((n + p + "/threads:" + std::to_string(t)).c_str(),
                                     [p, t](benchmark::State& st) { prefill_1b(st, p, t); })
            ->Unit(benchmark::kSecond)
            ->UseRealTime()
            ->Iterations(p == "h100_e4m3" ? 1 : 2);
      }
    }
  }
  if (const char* e = std::getenv("LPEMU_BENCH_155M"); e != nullptr && std::string(e) == "1") {
    benchmark::RegisterBenchmark("prepare/llama155m/encode_fp8_e4m3_baseline/threads:2",
                                 [](benchmark::State& st) { encode_155m(st, 2); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MeasureProcessCPUTime();
    for (const std::string p : {"h100_e4m3", "mxfp8"}) {
      if (plan(p) == nullptr) continue;
      benchmark::RegisterBenchmark(("prepare/llama155m/" + p + "/threads:2").c_str(),
                                   [p](benchmark::State& st) { prepare_155m(st, p, 2); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->MeasureProcessCPUTime();
    }
    const std::string n = "prefill" + std::to_string(kPrefill155m) + "/llama155m/";
    benchmark::RegisterBenchmark((n + "linear_gemms_baseline/threads:2").c_str(),
                                 [](benchmark::State& st) { linear_155m(st, 2); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MeasureProcessCPUTime();
    for (const std::string p : {"fp32", "h100_e4m3", "mxfp8"}) {
      if (plan(p) == nullptr) continue;
      benchmark::RegisterBenchmark((n + p + "/threads:2").c_str(),
                                   [p](benchmark::State& st) { prefill_155m(st, p, 2); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->MeasureProcessCPUTime();
    }
  }
  if (const char* e = std::getenv("LPEMU_BENCH_LOAD"); e != nullptr && std::string(e) == "1") {
    benchmark::RegisterBenchmark("load/llama155m_fp32/read_file_baseline", read_file_155m)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    for (const int t : {1, 2}) {
      benchmark::RegisterBenchmark(("load/llama155m_fp32/load_model/threads:" + std::to_string(t)).c_str(),
                                   [t](benchmark::State& st) { load_155m(st, t); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
  if (const char* e = std::getenv("LPEMU_BENCH_8B"); e != nullptr && std::string(e) == "1") {
    // In this order: the load keeps the model for the prefills.
    benchmark::RegisterBenchmark("load/llama3_8b_bf16/load_model/threads:2", load_8b)
        ->Unit(benchmark::kSecond)
        ->UseRealTime()
        ->MeasureProcessCPUTime()
        ->Iterations(1);
    const std::string n = "prefill" + std::to_string(kPrefill8b) + "/llama3_8b_bf16/";
    benchmark::RegisterBenchmark((n + "linear_gemms_baseline/threads:2").c_str(), linear_8b)
        ->Unit(benchmark::kSecond)
        ->UseRealTime()
        ->MeasureProcessCPUTime()
        ->Iterations(1);
    for (const std::string p : {"fp32", "h100_e4m3"}) {
      if (plan(p) == nullptr) continue;
      benchmark::RegisterBenchmark((n + p + "/threads:2").c_str(),
                                   [p](benchmark::State& st) { prefill_8b(st, p); })
          ->Unit(benchmark::kSecond)
          ->UseRealTime()
          ->MeasureProcessCPUTime()
          ->Iterations(1);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
