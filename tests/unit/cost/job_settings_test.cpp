// The settings real training jobs use: uneven pipeline stages (fewer layers beside the embedding
// and the LM head), fused/unfused attention, DP overlap, separate wire formats, and the warnings or
// named errors for ill-posed degrees.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/cost/catalog.hpp"
#include "lpemu/cost/parallel.hpp"
#include "lpemu/error.hpp"

namespace {

using namespace lpemu::cost;

Catalog& catalog() {
  static Catalog c(lpemu::format::Registry::builtin());
  return c;
}

TrainFormats bf16_formats() {
  Catalog& c = catalog();
  return {c.format("bf16"), c.format("bf16"), c.format("fp32"), c.format("fp32"),
          c.format("fp32"), c.format("bf16"), c.format("bf16")};
}

TrainResult step(const ModelShape& shape, const std::string& parallel, long long devices, long long seq,
                 long long global_batch) {
  const System sys = load_system("dgx_h100");
  TrainConfig c;
  c.par = parse_parallel(parallel, devices);
  c.seq = seq;
  c.global_batch = global_batch;
  return training_step(shape, bf16_formats(), sys, catalog().target(sys.device),
                       catalog().datapath("generic_bf16"), c);
}

TEST_CASE("stage_layers: even, Llama 3's fewer layers on the first and last stage, explicit",
          "[cost][cluster]") {
  Parallel p;
  p.pp = 4;
  CHECK(stage_layers(p, 80) == std::vector<long long>{20, 20, 20, 20});
  // Llama 3 405B (arXiv:2407.21783 §3.3.2): 126 layers on 16 stages, one fewer on the first and last.
  p.pp = 16;
  std::vector<long long> want(16, 8);
  want.front() = want.back() = 7;
  CHECK(stage_layers(p, 126) == want);
  // 70 layers on 12 stages: 5 + 10 x 6 + 5.
  p.pp = 12;
  std::vector<long long> want70(12, 6);
  want70.front() = want70.back() = 5;
  CHECK(stage_layers(p, 70) == want70);
  // Explicit: first = 2 (last the same) leaves 6 layers for 2 middle stages.
  p = parse_parallel("pp=4,first=2");
  CHECK(stage_layers(p, 10) == std::vector<long long>{2, 3, 3, 2});
  p = parse_parallel("pp=4,first=1,last=3");
  CHECK(stage_layers(p, 10) == std::vector<long long>{1, 3, 3, 3});
  // No split: 10 layers cannot give 8 stages ceil(10/8) = 2 middle layers each.
  p = parse_parallel("pp=8");
  CHECK_THROWS_WITH(stage_layers(p, 10),
                    "pp = 8, n_layers = 10: no split gives every stage at least one layer; expected first + "
                    "(pp - 2) x k + last = n_layers with first, last and k at least 1");
  p = parse_parallel("pp=4,first=5");
  CHECK_THROWS_WITH(stage_layers(p, 10), Catch::StartsWith("pp = 4, first = 5, n_layers = 10: no split"));
  // Virtual stages need not be equal (stages of 2, 3, 3, 2 layers run vpp = 2), but each holds a layer.
  CHECK(stage_layers(parse_parallel("pp=4,vpp=2"), 10) == std::vector<long long>{2, 3, 3, 2});
  p = parse_parallel("pp=4,vpp=3");
  CHECK_THROWS_WITH(
      stage_layers(p, 10),
      "pp = 4 x vpp = 3, n_layers = 10: a stage of 2 layers cannot hold vpp = 3 virtual stages of at "
      "least one layer");
}

TEST_CASE("126 layers train on pp=16 and 70 on pp=12; the busiest stage holds the device's weights",
          "[cost][cluster]") {
  const ModelShape s405 = catalog().shape("llama3_405b");
  const TrainResult r = step(s405, "tp=8,pp=16,zero=1", 1024, 8192, 128);
  CHECK(r.time.step_s > 0);
  // Per layer 2 d^2 + 2 d kv + 3 d H = 3,187,671,040 parameters; embedding 128,256 x 16,384 =
  // 2,101,346,304. First stage 7 layers + embedding = 24.415 G < middle 8 layers = 25.501 G, so the
  // device holds 8 layers / tp = 8 in bf16.
  const double per_layer = 2.0 * 16384 * 16384 + 2.0 * 16384 * 1024 + 3.0 * 16384 * 53248;
  CHECK(per_layer == 3187671040.0);
  CHECK(r.memory.weights == Approx(8 * per_layer / 8 * 2).epsilon(1e-12));
  // The critical stage is a middle one (8 layers, no head), so the explicit split with one more
  // layer on the last stage is slower and the 8-8 middle unchanged.
  const TrainResult same = step(s405, "tp=8,pp=16,first=7,last=7,zero=1", 1024, 8192, 128);
  CHECK(same.time.step_s == r.time.step_s);
  ModelShape s70 = catalog().shape("llama2_70b");
  s70.name = "llama2_70b_70_layers";
  s70.n_layers = 70;
  CHECK(step(s70, "tp=8,pp=12,zero=1", 96, 4096, 96).time.step_s > 0);
  // Inference: the same split is accepted.
  const System sys = load_system("dgx_h100");
  const PlanFormats pf{catalog().format("bf16"), catalog().format("bf16"), catalog().format("bf16")};
  CHECK(inference_step(s405, pf, sys, catalog().target(sys.device), catalog().datapath("generic_bf16"),
                       parse_parallel("tp=8,pp=16"), Phase::decode, 8, 4096)
            .step_s > 0);
}

TEST_CASE("unfused attention and no DP overlap only add time", "[cost][cluster]") {
  const System sys = load_system("dgx_h100");
  TrainConfig c;
  c.par = parse_parallel("tp=8,pp=1,zero=1", 64);
  c.seq = 4096;
  c.global_batch = 64;
  c.recompute = Recompute::none;
  const ModelShape s = catalog().shape("llama3_8b");
  const auto run = [&](const TrainConfig& cfg) {
    return training_step(s, bf16_formats(), sys, catalog().target(sys.device),
                         catalog().datapath("generic_bf16"), cfg);
  };
  const TrainResult fused = run(c);
  TrainConfig u = c;
  u.flash_attention = false;
  const TrainResult unfused = run(u);
  CHECK(unfused.time.step_s > fused.time.step_s);
  // Unfused attention keeps the s x s softmax output (Llama has no attention dropout, so no mask
  // and no dropout output): a bytes x heads / tp x s^2 per layer, 32 layers.
  CHECK(unfused.memory.activations - fused.memory.activations ==
        Approx(32.0 * (32.0 / 8) * 4096.0 * 4096.0 * 2.0).epsilon(1e-9));
  TrainConfig o = c;
  o.overlap_dp = false;
  const TrainResult serial = run(o);
  CHECK(serial.time.dp_s >= fused.time.dp_s);
  CHECK(serial.time.dp_s > 0);
}

TEST_CASE("ill-posed degrees: a warning names the degree, or the parse fails", "[cost][cluster]") {
  const System sys = load_system("dgx_h100");
  // tp = 16 spans two 8-GPU NVLink domains.
  const auto tp16 = parallel_warnings(parse_parallel("tp=16"), sys, 4096);
  REQUIRE(tp16.size() == 1);
  CHECK(tp16[0] ==
        "tp = 16 is wider than system 'dgx_h100''s scale-up domain of 8 devices: its all-reduces cross the "
        "scale-out network in every layer");
  // cp = 8 on an 8-token sequence: one token per rank.
  const auto cp8 = parallel_warnings(parse_parallel("cp=8"), sys, 8);
  REQUIRE(cp8.size() == 1);
  CHECK(
      cp8[0] ==
      "cp = 8 leaves 1 tokens per rank of a 8-token sequence, fewer than one 128-row attention tile: the K/V "
      "exchange outweighs the work it splits");
  CHECK(parallel_warnings(parse_parallel("tp=8,cp=8"), sys, 8192).empty());  // 1,024 tokens per rank
  // ZeRO-3 on a 260K-parameter model.
  TrainConfig c;
  c.par = parse_parallel("zero=3", 8);
  c.seq = 256;
  c.global_batch = 8;
  const TrainResult r = training_step(catalog().shape("stories260K"), bf16_formats(), sys,
                                      catalog().target(sys.device), catalog().datapath("generic_bf16"), c);
  REQUIRE(r.warnings.size() == 1);
  CHECK_THAT(r.warnings[0],
             Catch::StartsWith("zero = 3 shards ") &&
                 Catch::EndsWith(" GB of weights, gradients and optimizer states that fit unsharded "
                                 "in 80 GB per device: it only adds weight all-gathers"));
  // Llama-3-70B does not fit unsharded on an 80 GB device: no warning.
  c.par = parse_parallel("tp=8,zero=3", 64);
  c.seq = 4096;
  c.global_batch = 64;
  CHECK(training_step(catalog().shape("llama3_70b"), bf16_formats(), sys, catalog().target(sys.device),
                      catalog().datapath("generic_bf16"), c)
            .warnings.empty());
  // Degrees past 2^20 are refused by name before any product is formed.
  CHECK_THROWS_WITH(parse_parallel("tp=4294967296,pp=4294967296"),
                    "--parallel \"tp=4294967296,pp=4294967296\": tp = 4294967296: expected at most 1048576");
}

TEST_CASE("the search tries interleaving and every ZeRO stage", "[cost][cluster]") {
  const System sys = load_system("dgx_h100");
  TrainConfig base;
  base.seq = 4096;
  base.global_batch = 64;
  const auto all =
      search_training(catalog().shape("llama3_8b"), bf16_formats(), sys, catalog().target(sys.device),
                      catalog().datapath("generic_bf16"), 16, base);
  bool vpp2 = false, zero2 = false, zero3 = false;
  for (const auto& r : all) {
    vpp2 = vpp2 || r.config.par.vpp == 2;
    zero2 = zero2 || r.config.par.zero == 2;
    zero3 = zero3 || r.config.par.zero == 3;
  }
  CHECK(vpp2);
  CHECK(zero2);
  CHECK(zero3);
}

}  // namespace

TEST_CASE("ZeRO-2 and 3 reduce-scatter every micro-batch's gradients; ZeRO-1 all-reduces once",
          "[cost][cluster]") {
  // Llama-3-8B on 64 H100s, pure DP: 512 sequences of 4,096 tokens are 8 micro-batches per rank.
  // Without overlap the DP time is the collectives themselves, rebuilt here from collective():
  // ZeRO-2 keeps only its gradient shard, so each of the 8 backward passes reduce-scatters
  // (DeepSpeed, github.com/deepspeedai/DeepSpeed/issues/2252), then one weight all-gather.
  const System sys = load_system("dgx_h100");
  const ModelShape& m = catalog().shape("llama3_8b");
  const double params = static_cast<double>(m.parameters());  // tp = pp = 1: the whole model
  TrainConfig c;
  c.seq = 4096;
  c.global_batch = 512;
  c.overlap_dp = false;
  const auto price = [&](int zero) {
    c.par = parse_parallel("tp=1,pp=1,zero=" + std::to_string(zero), 64);
    return training_step(m, bf16_formats(), sys, catalog().target(sys.device),
                         catalog().datapath("generic_bf16"), c);
  };
  const TrainResult z1 = price(1), z2 = price(2);
  REQUIRE(z1.microbatches == 8);
  const double g = params * 2.0;  // bf16 gradients and weights on the wire
  const double ar = collective(sys, Collective::all_reduce, g, 64, 1).time_s;
  const double rs = collective(sys, Collective::reduce_scatter, g, 64, 1).time_s;
  const double ag = collective(sys, Collective::all_gather, g, 64, 1).time_s;
  CHECK(z1.time.dp_s == Approx(ar).epsilon(1e-9));
  CHECK(z2.time.dp_s == Approx(8 * rs + ag).epsilon(1e-9));
  // ZeRO-1 holds the full FP32 gradient buffer (Megatron-Core's distributed optimizer: 6 + 12/d
  // bytes per parameter), ZeRO-2 only its 1/64 shard.
  CHECK(z1.memory.gradients == Approx(params * 4.0).epsilon(1e-9));
  CHECK(z2.memory.gradients == Approx(params * 4.0 / 64).epsilon(1e-9));
}

TEST_CASE("NVIDIA NeMo's Llama 3 70B recipe (cp=2 at 8,192 tokens) is priced with its CP exchange",
          "[cost][cluster]") {
  // NVIDIA/NeMo, nemo/collections/llm/recipes/llama3_70b.py: 4 nodes x 8 GPUs, tensor 4, pipeline 4,
  // virtual pipeline 5, context 2, sequence parallel; 8,192 tokens, global batch 512, micro-batch 1,
  // no recomputation set. Context parallelism at 8K tokens is published practice for this model.
  const System sys = load_system("dgx_h100");
  TrainConfig c;
  c.par = parse_parallel("tp=4,pp=4,vpp=5,cp=2,sp=1,zero=1", 32);
  c.seq = 8192;
  c.global_batch = 512;
  c.recompute = Recompute::none;
  const TrainResult r = training_step(catalog().shape("llama3_70b"), bf16_formats(), sys,
                                      catalog().target(sys.device), catalog().datapath("generic_bf16"), c);
  CHECK(r.config.par.dp == 1);
  CHECK(r.warnings.empty());
  // The model's memory for it is 82.9 GB per device (activations after Korthikanti et al. 26.4 GB),
  // 3.6% over the 80 GB the recipe runs in (docs/cost-and-systems.md, "Search"): the bound keeps
  // that error below 5%.
  CHECK(r.memory.total < 1.05 * 80e9);
  // Its K/V exchange: per layer and micro-batch an all-gather (K and V of 8 heads over the 4 TP
  // ranks: 2 heads each) and a reduce-scatter of their gradients, stride 4 inside one node.
  const double kv = 2.0 * 8192 * 1024 / 4 * 2.0;
  const double one = collective(sys, Collective::all_gather, kv, 2, 4).time_s +
                     collective(sys, Collective::reduce_scatter, kv, 2, 4).time_s;
  CHECK(r.time.cp_s > 0);
  CHECK(r.time.cp_s == Approx(20.0 * one * static_cast<double>(r.microbatches)).epsilon(1e-9));
}

TEST_CASE("kernel launches bound decode at small batch, not prefill", "[cost][cluster]") {
  // Every op is one kernel the host launches in at least 5 us (Holistic Trace Analysis docs: 5-20
  // us): a step can never be shorter than its kernel count times that.
  const System sys = load_system("dgx_h100");
  const Target& t = catalog().target(sys.device);
  const ModelShape& m = catalog().shape("llama3_8b");
  Catalog& c = catalog();
  const PlanFormats f{c.format("bf16"), c.format("bf16"), c.format("bf16")};
  const MacDatapath& dp = c.datapath("generic_bf16");
  const Parallel par = parse_parallel("tp=1");
  const InferenceResult d1 = inference_step(m, f, sys, t, dp, par, Phase::decode, 1, 4096);
  double kernels = 0;
  for (const auto& op : build_workload(m, f, t, dp, Phase::decode, 1, 4096).ops) {
    kernels += static_cast<double>(op.count);
  }
  CHECK(d1.launch_s > 0);
  CHECK(d1.step_s >= kernels * 5e-6);
  CHECK(d1.step_s == Approx(d1.compute_s + d1.memory_s + d1.tp_s + d1.pp_s + d1.launch_s).epsilon(1e-12));
  const InferenceResult p8 = inference_step(m, f, sys, t, dp, par, Phase::prefill, 8, 4096);
  CHECK(p8.launch_s == 0.0);
}

namespace {

TEST_CASE("activation memory per layer is Korthikanti et al.'s s b h (34 + 5 a s / h), split by TP and SP",
          "[cost][cluster]") {
  // Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
  // (arXiv:2205.05198), §4.1, eq. 1: a GPT layer keeps s b h (34 + 5 a s / h) bytes at 16 bits
  // without parallelism; §4.2.2, eq. 4: s b h (34 / t + 5 a s / (h t)) with tensor and sequence
  // parallelism of degree t; §4.3: selective recomputation keeps 34 s b h / t. A fused attention
  // kernel keeps no s x s tensor, so its layer keeps 34 s b h / t too. One pipeline stage holding
  // every layer keeps one micro-batch; the last stage adds the FP32 logits s b V / t x 4.
  ModelShape m;
  m.name = "gpt_korthikanti";
  m.dim = 2048;
  m.n_layers = 4;
  m.n_heads = 16;
  m.n_kv_heads = 16;
  m.hidden_dim = 4 * 2048;
  m.vocab_size = 51200;
  m.tied_embeddings = true;
  m.gated_mlp = false;
  const double s = 2048, b = 2, h = 2048, a = 16, L = 4, V = 51200;
  const System sys = load_system("dgx_h100");
  for (const long long t : {1LL, 4LL}) {
    for (const bool fused : {true, false}) {
      for (const Recompute rc : {Recompute::none, Recompute::selective}) {
        TrainConfig c;
        c.par = parse_parallel("tp=" + std::to_string(t) + ",sp=" + (t > 1 ? "1" : "0"), t);
        c.seq = 2048;
        c.global_batch = 2;
        c.micro_batch = 2;
        c.recompute = rc;
        c.flash_attention = fused;
        const TrainResult r = training_step(m, bf16_formats(), sys, catalog().target(sys.device),
                                            catalog().datapath("generic_bf16"), c);
        const double td = static_cast<double>(t);
        const double attention_ss = (!fused && rc == Recompute::none) ? 5 * a * s / (h * td) : 0.0;
        const double per_layer = s * b * h * (34 / td + attention_ss);
        INFO("tp " << t << ", fused " << fused << ", recompute " << recompute_name(rc));
        CHECK(r.memory.activations == Approx(L * per_layer + s * b * V / td * 4).epsilon(1e-12));
      }
    }
  }
}

}  // namespace

namespace {

TEST_CASE("the step's breakdown names the recomputed forward passes", "[cost][cluster]") {
  // recompute_s is the part of compute_s + memory_s that recomputation adds: none without it, and
  // exactly the difference to the same step without it otherwise.
  const System sys = load_system("dgx_h100");
  TrainConfig c;
  c.par = parse_parallel("tp=8,pp=4,sp=1,zero=1", 64);
  c.seq = 4096;
  c.global_batch = 64;
  const auto run = [&](Recompute rc) {
    TrainConfig x = c;
    x.recompute = rc;
    return training_step(catalog().shape("llama3_70b"), bf16_formats(), sys, catalog().target(sys.device),
                         catalog().datapath("generic_bf16"), x);
  };
  const TrainResult none = run(Recompute::none);
  CHECK(none.time.recompute_s == 0.0);
  for (const Recompute rc : {Recompute::selective, Recompute::full}) {
    const TrainResult r = run(rc);
    INFO(recompute_name(rc));
    CHECK(r.time.recompute_s > 0);
    CHECK(r.time.recompute_s ==
          Approx((r.time.compute_s + r.time.memory_s) - (none.time.compute_s + none.time.memory_s))
              .epsilon(1e-12));
  }
}

}  // namespace
