// Validation of the cluster model against published measurements its parameters never saw: two
// more training runs (Megatron-Turing NLG 530B on A100s, Llama 3 405B on H100s), and two inference
// throughputs and two first-token latencies of TensorRT-LLM. Each row cites its source. Where the
// model misses by more than 15% the bound is the honest one and docs/cost-and-systems.md
// ("Validation") says what is off and why. LPEMU_PRINT_VALIDATION=1 prints the table.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "lpemu/cost/catalog.hpp"
#include "lpemu/cost/parallel.hpp"

namespace {

using namespace lpemu::cost;

Catalog& catalog() {
  static Catalog c(lpemu::format::Registry::builtin());
  return c;
}

bool print() { return std::getenv("LPEMU_PRINT_VALIDATION") != nullptr; }

TrainFormats train_formats(const char* w, const char* grad) {
  Catalog& c = catalog();
  return {c.format(w),      c.format(w),    c.format(grad), c.format("fp32"),
          c.format("fp32"), c.format(grad), c.format(w)};
}

// GPT-3-style shape of Megatron-Turing NLG 530B: Smith et al., "Using DeepSpeed and Megatron to
// Train Megatron-Turing NLG 530B" (arXiv:2201.11990), §3.1 / Table 1 of its hyper-parameters:
// 105 layers, hidden 20480, 128 heads, sequence 2048, vocabulary 51,200 (GPT-2 BPE padded).
ModelShape mt_nlg() {
  ModelShape m;
  m.name = "mt_nlg_530b";
  m.dim = 20480;
  m.n_layers = 105;
  m.n_heads = m.n_kv_heads = 128;
  m.hidden_dim = 4 * 20480;
  m.vocab_size = 51200;
  m.tied_embeddings = true;
  m.gated_mlp = false;
  return m;
}

TEST_CASE("validation: Megatron-Turing NLG 530B on A100s (Smith et al. 2022)",
          "[cost][cluster][validation]") {
  // Smith et al. (arXiv:2201.11990), §2.3 "System performance evaluation": 280, 350 and 420 DGX
  // A100 nodes (Selene), 8-way tensor and 35-way pipeline parallelism, global batch 1920 of 2048
  // tokens, 60.1 / 50.2 / 44.4 s per iteration, 126 / 121 / 113 teraFLOP/s per GPU. The paper's
  // run used activation checkpointing, FP16 mixed precision, Megatron's unfused attention and
  // DeepSpeed's non-interleaved 1F1B pipeline with micro-batch 1.
  struct Row {
    long long nodes;
    double seconds, tflops;
  };
  const System sys = load_system("dgx_a100");
  const Target& t = catalog().target(sys.device);
  const ModelShape m = mt_nlg();
  if (print()) std::printf("| run | GPUs | paper s/iter | lpemu s/iter | ratio |\n|---|---|---|---|---|\n");
  for (const Row row : {Row{280, 60.1, 126}, Row{350, 50.2, 121}, Row{420, 44.4, 113}}) {
    TrainConfig c;
    c.par = parse_parallel("tp=8,pp=35,zero=1", row.nodes * 8);
    c.seq = 2048;
    c.global_batch = 1920;
    c.micro_batch = 1;
    c.recompute = Recompute::full;
    c.flash_attention = false;
    c.overlap_dp = false;
    const TrainResult r =
        training_step(m, train_formats("fp16", "fp16"), sys, t, catalog().datapath("a100_fp16_fp32"), c);
    const double ratio = r.time.step_s / row.seconds;
    if (print())
      std::printf("| MT-NLG 530B | %lld | %.1f | %.1f | %.3f |\n", row.nodes * 8, row.seconds, r.time.step_s,
                  ratio);
    CHECK(r.memory.fits);
    // The model is faster than this run by 29-32%: the same model on the same machine under
    // Megatron's interleaved schedule measured 163 TFLOP/s (Narayanan et al. SC'21, Table 1, 529.6B
    // row), which the model predicts within 10%; what DeepSpeed's pipeline engine lost beyond the
    // non-interleaved schedule's bubble is no kernel's measured efficiency.
    CHECK(ratio > 0.6);
    CHECK(ratio < 0.8);
  }
}

TEST_CASE("validation: Llama 3 405B on 8,192 and 16,384 H100s (Llama Team 2024, Table 4)",
          "[cost][cluster][validation]") {
  // "The Llama 3 Herd of Models" (arXiv:2407.21783), Table 4: BF16, sequence 8192, 16M tokens per
  // step; TP 8, CP 1, PP 16, DP 64 on 8,192 GPUs: 430 TFLOPs/GPU (43% BF16 MFU); DP 128 on 16,384
  // GPUs: 400 TFLOPs/GPU (41%). §3.3.2: interleaved 1F1B with the first and last stage holding one
  // layer fewer (7 + 14 x 8 + 7 = 126), and "we could pre-train Llama 3 on sequences of 8K tokens
  // without activation checkpointing": no recomputation. The paper tunes the micro-batches and the
  // interleaving without stating them per row: micro-batch 1 and the deepest interleaving the
  // stages allow (vpp 7, one layer per virtual stage), the model's fastest.
  struct Row {
    long long gpus, dp;
    double tflops;
  };
  const System sys = load_system("dgx_h100");
  const Target& t = catalog().target(sys.device);
  const ModelShape& m = catalog().shape("llama3_405b");
  for (const Row row : {Row{8192, 64, 430}, Row{16384, 128, 400}}) {
    TrainConfig c;
    c.par = parse_parallel("tp=8,pp=16,sp=1,zero=1,first=7,last=7,vpp=7", row.gpus);
    REQUIRE(c.par.dp == row.dp);
    c.seq = 8192;
    c.global_batch = 2048;  // 16M tokens
    c.micro_batch = 1;
    c.recompute = Recompute::none;
    const TrainResult r =
        training_step(m, train_formats("bf16", "fp32"), sys, t, catalog().datapath("h100_bf16_fp32"), c);
    const double ratio = r.tflops_per_device / row.tflops;
    if (print())
      std::printf(
          "| Llama 3 405B | %lld | %.0f TFLOP/s | %.1f TFLOP/s (vpp 7, mb 1, none; %.1f GB) | %.3f |\n",
          row.gpus, row.tflops, r.tflops_per_device, r.memory.total / 1e9, ratio);
    // Under the paper's own settings the model is about 37% optimistic (docs/cost-and-systems.md,
    // "What is off and why"): the honest bound. Its memory for the layout is 12% over the 80 GB the
    // job ran in (Meta's own schedule and deallocation of stage inputs and outputs, §3.3.2, are not
    // modelled); the bound keeps that error below 15%.
    CHECK(ratio > 1.25);
    CHECK(ratio < 1.45);
    CHECK(r.memory.total < 1.15 * 80e9);
  }
}

// A static batch of `batch` prompts of `in` tokens generating `out` tokens each on tp devices: one
// prefill, then `out` decode steps whose context grows by one token each.
double generation_seconds(const ModelShape& m, const PlanFormats& f, const System& sys, const Target& t,
                          const MacDatapath& dp, long long tp, long long batch, long long in, long long out) {
  const Parallel par = parse_parallel("tp=" + std::to_string(tp));
  double s = inference_step(m, f, sys, t, dp, par, Phase::prefill, batch, in).step_s;
  for (long long i = 0; i < out; ++i)
    s += inference_step(m, f, sys, t, dp, par, Phase::decode, batch, in + i).step_s;
  return s;
}

TEST_CASE("validation: TensorRT-LLM Llama-2-70B throughput and first-token latency (H100 FP8, A100 FP16)",
          "[cost][cluster][validation]") {
  // NVIDIA/TensorRT-LLM's performance page (v0.6.1 throughput, v0.5 latency; static
  // batches, gptSessionBenchmark): H100 FP8 (FP8 weights, activations and KV cache) "LLaMA 70B"
  // (Llama-2-70B): batch 480, TP 4, 128 in / 2048 out: 1,486 output tokens/s per GPU; batch 64,
  // TP 2, 2048 / 2048: 547 per GPU. First-token latency at batch 1, TP 4, 2048 input tokens: H100
  // FP8 109 ms, A100 FP16 377 ms.
  Catalog& c = catalog();
  const ModelShape& m = c.shape("llama2_70b");
  const PlanFormats fp8{c.format("fp8_e4m3"), c.format("fp8_e4m3"), c.format("fp8_e4m3")};
  const PlanFormats fp16{c.format("fp16"), c.format("fp16"), c.format("fp16")};
  const System h100 = load_system("dgx_h100"), a100 = load_system("dgx_a100");
  const Target& th = c.target(h100.device);
  const Target& ta = c.target(a100.device);
  const MacDatapath& dh = c.datapath("h100_e4m3_fp32");
  const MacDatapath& da = c.datapath("a100_fp16_fp32");
  struct Throughput {
    long long batch, tp, in, out;
    double per_gpu;
  };
  for (const Throughput row : {Throughput{480, 4, 128, 2048, 1486}, Throughput{64, 2, 2048, 2048, 547}}) {
    REQUIRE(max_batch_for_kv(m, fp8, th, parse_parallel("tp=" + std::to_string(row.tp)), row.in + row.out) >=
            row.batch);
    const double s = generation_seconds(m, fp8, h100, th, dh, row.tp, row.batch, row.in, row.out);
    const double per_gpu = static_cast<double>(row.batch * row.out) / s / static_cast<double>(row.tp);
    const double ratio = per_gpu / row.per_gpu;
    if (print())
      std::printf("| TRT-LLM H100 FP8 b=%lld tp=%lld %lld/%lld | %.0f tok/s/GPU | %.0f | %.3f |\n", row.batch,
                  row.tp, row.in, row.out, row.per_gpu, per_gpu, ratio);
    // The model is 2.2-2.7x faster: it prices decode at the roofline of measured GEMM and HBM
    // rates, while this release's generation phase (masked multi-head attention over the KV cache,
    // per-step host work of a static batch) took 2-3x that roofline.
    CHECK(ratio > 1.5);
    CHECK(ratio < 3.0);
  }
  struct Latency {
    const System* sys;
    const Target* t;
    const PlanFormats* f;
    const MacDatapath* dp;
    double ms;
  };
  for (const Latency row : {Latency{&h100, &th, &fp8, &dh, 109}, Latency{&a100, &ta, &fp16, &da, 377}}) {
    const auto r =
        inference_step(m, *row.f, *row.sys, *row.t, *row.dp, parse_parallel("tp=4"), Phase::prefill, 1, 2048);
    const double ratio = r.step_s * 1e3 / row.ms;
    if (print())
      std::printf("| TRT-LLM first token %s tp=4 2048 in | %.0f ms | %.1f ms | %.3f |\n", row.t->name.c_str(),
                  row.ms, r.step_s * 1e3, ratio);
    // A100 within 15%; H100 FP8 37% faster than measured: its FP8 GEMMs ran below the 70.9% of peak
    // measured with a 2025 PyTorch (the v0.5 release predates FP8 FlashAttention and fused FP8 MLPs).
    CHECK(ratio > 0.55);
    CHECK(ratio < 1.0);
  }
}

}  // namespace
