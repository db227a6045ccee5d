// Training throughput: tokens/s of one training step (forward, backward and AdamW update) of
// stories260K, batch 4 × seq 64, under emulated plans beside the fp32 plan in the same run
// (baseline: fp32, every GEMM on lpemu's float GEMM, nothing quantised). Plans: bf16 operands and
// gradients; MXFP8 (E4M3 forward operands, E5M2 output gradients); NVFP4 operands with
// stochastically rounded NVFP4 output gradients; NVFP4 operands and gradients on the B200 NVFP4
// datapath (bit-exact tensor-core emulation) in all three GEMMs of every block. One thread
// (tbb::global_control), so that the time per step is its CPU time. `range_counts` off: the same steps
// without the overflow and underflow counts `lpemu train` logs (LinearPlan::set_counting(false)).
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/train/backward.hpp"
#include "lpemu/train/linear_plan.hpp"
#include "lpemu/train/optimizer.hpp"

namespace {

using namespace lpemu;

const engine::Model& stories() {
  static const engine::Model m = [] {
    std::vector<std::filesystem::path> dirs;
    std::filesystem::path d = std::filesystem::read_symlink("/proc/self/exe").parent_path();
    for (int i = 0; i < 4 && !d.empty(); ++i, d = d.parent_path()) dirs.push_back(d);
    return engine::load_model(engine::resolve_model_path("stories260K", dirs));
  }();
  return m;
}

const std::map<std::string, std::string>& plan_texts() {
  static const std::map<std::string, std::string> p = {
      {"fp32", ""},
      {"bf16", "[roles]\nweights = \"bf16\"\nlinear_input = \"bf16\"\ngrad_output = \"bf16\"\n"},
      {"mxfp8",
       "[roles]\nweights = \"mxfp8_e4m3\"\nlinear_input = \"mxfp8_e4m3\"\ngrad_output = \"mxfp8_e5m2\"\n"},
      {"nvfp4_sr",
       "[roles]\nweights = \"nvfp4\"\nlinear_input = \"nvfp4\"\n"
       "grad_output = { format = \"nvfp4\", rounding = \"stochastic\" }\n"},
      // NVFP4 operands and gradients on the B200 NVFP4 datapath in all three GEMMs of every block.
      {"nvfp4_b200",
       "[roles]\nweights = \"nvfp4\"\nlinear_input = \"nvfp4\"\ngrad_output = \"nvfp4\"\n"
       "gemm = \"b200_nvfp4_fp32\"\ndgrad_gemm = \"b200_nvfp4_fp32\"\nwgrad_gemm = \"b200_nvfp4_fp32\"\n"
       "[[override]]\nkind = \"head\"\ngemm = \"none\"\ndgrad_gemm = \"none\"\nwgrad_gemm = \"none\"\n"},
  };
  return p;
}

void train_step(benchmark::State& state, const std::string& plan_name, bool counting) {
  const tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);
  const engine::Model& m = stories();
  static const auto q = engine::QuantizerFactory::standard(format::Registry::builtin());
  static const auto g = engine::GemmFactory::builtin();
  const std::string& text = plan_texts().at(plan_name);
  const engine::PrecisionPlan plan =
      text.empty() ? engine::builtin_plan("fp32") : engine::parse_plan_toml(text, plan_name + ".toml", q, g);
  train::LinearPlan lp(plan, q, g, m.config);
  lp.set_counting(counting);
  const int batch = 4;
  const int seq = 64;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> tok(0, m.config.vocab_size - 1);
  std::vector<int> tokens(static_cast<std::size_t>(batch * (seq + 1)));
  for (int& t : tokens) t = tok(rng);
  train::Params<float> p = train::params_from_model<float>(m);
  train::Params<float> grads;
  train::OptimizerOptions o;
  train::Optimizer<float> opt(o, p, &plan, &q, m.config.n_layers);
  for (auto _ : state) {
    const double loss = train::loss_and_gradients(m.config, p, tokens, batch, seq, grads, &lp);
    benchmark::DoNotOptimize(loss);
    opt.step(p, grads, o.lr);
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(batch * seq) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(train_step, fp32, std::string("fp32"), true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(train_step, bf16, std::string("bf16"), true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(train_step, bf16_no_range_counts, std::string("bf16"), false)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(train_step, mxfp8, std::string("mxfp8"), true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(train_step, mxfp8_no_range_counts, std::string("mxfp8"), false)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(train_step, nvfp4_sr, std::string("nvfp4_sr"), true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(train_step, nvfp4_sr_no_range_counts, std::string("nvfp4_sr"), false)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(train_step, nvfp4_b200, std::string("nvfp4_b200"), true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
