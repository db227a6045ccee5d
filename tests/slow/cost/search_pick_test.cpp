// The training search against a published job: given only Llama 3 405B, 8,192 H100s and the
// paper's batch (2,048 sequences of 8,192 tokens), how far above the best published throughput
// does its top pick predict, and how far above the model's own price of the published layout under
// the published settings? A search over every layout takes about a minute, hence the slow label.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>

#include "lpemu/cost/catalog.hpp"
#include "lpemu/cost/parallel.hpp"

namespace {

using namespace lpemu::cost;

void print_breakdown(const char* what, const TrainResult& r) {
  const StepTime& t = r.time;
  std::printf(
      "%s: %s, mb %lld, recompute %s: %.1f TFLOP/s, step %.3f s = compute %.3f + memory-bound %.3f + TP "
      "%.3f + CP %.3f + PP %.3f + DP %.3f + bubble %.3f + optimizer %.3f (recomputation %.3f of the compute "
      "and memory-bound time); %.1f GB (activations %.1f)\n",
      what, r.config.par.str().c_str(), r.config.micro_batch, recompute_name(r.config.recompute),
      r.tflops_per_device, t.step_s, t.compute_s, t.memory_s, t.tp_s, t.cp_s, t.pp_s, t.dp_s, t.bubble_s,
      t.optimizer_s, t.recompute_s, r.memory.total / 1e9, r.memory.activations / 1e9);
}

TEST_CASE("search: Llama 3 405B on 8,192 H100s, top pick against the published 430 TFLOP/s",
          "[cost][cluster][validation]") {
  // "The Llama 3 Herd of Models" (arXiv:2407.21783), Table 4: 430 TFLOP/s per GPU at tp 8, cp 1,
  // pp 16, dp 64 on 8,192 H100s, BF16, 16M tokens per step; §3.3.2: first and last stage one layer
  // fewer, interleaved, "without activation checkpointing" at 8K tokens.
  Catalog c(lpemu::format::Registry::builtin());
  const System sys = load_system("dgx_h100");
  // BF16 GEMMs, FP32 gradients kept and reduced in FP32 ("reduce-scatter gradients in FP32 across
  // data parallel workers", §3.3.2), FP32 Adam states and master weights.
  const TrainFormats f{c.format("bf16"), c.format("bf16"), c.format("fp32"), c.format("fp32"),
                       c.format("fp32"), c.format("fp32"), c.format("bf16")};
  TrainConfig base;
  base.seq = 8192;
  base.global_batch = 2048;
  const auto all = search_training(c.shape("llama3_405b"), f, sys, c.target(sys.device),
                                   c.datapath("h100_bf16_fp32"), 8192, base);
  REQUIRE(!all.empty());
  const TrainResult& top = all.front();
  REQUIRE(top.memory.fits);
  TrainConfig meta = base;
  meta.par = parse_parallel("tp=8,pp=16,sp=1,zero=1,first=7,last=7,vpp=7", 8192);
  meta.micro_batch = 1;
  meta.recompute = Recompute::none;
  const TrainResult published =
      training_step(c.shape("llama3_405b"), f, sys, c.target(sys.device), c.datapath("h100_bf16_fp32"), meta);
  const double ratio = top.tflops_per_device / 430.0;
  const double over_layout = top.tflops_per_device / published.tflops_per_device;
  if (std::getenv("LPEMU_PRINT_VALIDATION") != nullptr) {
    print_breakdown("search top pick", top);
    print_breakdown("published layout", published);
    std::printf(
        "top pick %.3f x the published 430 TFLOP/s, %.3f x the model's price of the published layout\n",
        ratio, over_layout);
  }
  // The goal is at most +15% over 430. The pick (tp 4, cp 4, vpp 4, no recomputation) is 4.5% above
  // what the model predicts for Meta's own layout under Meta's own settings (no recomputation
  // either): the search exploits no layout a real job could not run; what is left is the model's
  // optimism for this job as a whole, 33% at the published layout (docs/cost-and-systems.md,
  // "Search" and the Llama 3 row of the validation). Honest bounds.
  CHECK(over_layout < 1.08);
  CHECK(ratio > 1.0);
  CHECK(ratio < 1.40);
}

}  // namespace
