// Workload and roofline: parameter counts, op shapes and bytes against hand arithmetic; the
// memory-bandwidth floor of batch-1 decode; rate-class choice per target.
#include <catch2/catch.hpp>

#include "lpemu/cost/catalog.hpp"
#include "lpemu/cost/workload.hpp"
#include "lpemu/error.hpp"

namespace {

using lpemu::cost::Catalog;
using lpemu::cost::Phase;

Catalog& catalog() {
  static Catalog c(lpemu::format::Registry::builtin());
  return c;
}

// Uniform plans by hand: weights, activations, KV cache.
lpemu::cost::LayerwisePlan uniform(const std::string& plan, long long n_layers) {
  struct P {
    const char *name, *w, *a, *kv;
  };
  static const P kPlans[] = {{"bf16", "bf16", "bf16", "bf16"},
                             {"fp8", "fp8_e4m3", "fp8_e4m3", "fp8_e4m3"},
                             {"mxfp8", "mxfp8_e4m3", "mxfp8_e4m3", "mxfp8_e4m3"},
                             {"nvfp4", "nvfp4", "nvfp4", "fp8_e4m3"},
                             {"mxfp6", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e4m3"},
                             {"w4a16", "mxfp4", "bf16", "bf16"}};
  for (const auto& p : kPlans) {
    if (plan == p.name) return lpemu::cost::LayerwisePlan::uniform(p.name, p.w, p.a, p.kv, n_layers);
  }
  FAIL("no plan " << plan);
  return {};
}

lpemu::cost::Workload make(const char* shape, const char* plan, const char* target, Phase ph, long long b,
                           long long s) {
  Catalog& c = catalog();
  return lpemu::cost::build_workload(c.shape(shape), uniform(plan, c.shape(shape).n_layers), c.target(target),
                                     c, ph, b, s);
}

const lpemu::cost::Op& op(const lpemu::cost::Workload& w, const std::string& name) {
  for (const auto& o : w.ops) {
    if (o.name == name) return o;
  }
  FAIL("no op " << name);
  return w.ops.front();
}

TEST_CASE("parameter counts of the shipped shapes, by hand", "[cost]") {
  // Per layer 2d^2 + 2 d kv + 3 d hidden, plus embeddings (x2 when the LM head is untied).
  CHECK(catalog().shape("llama2_70b").parameters() ==
        68'975'329'280LL);                                              // 80 x 855,638,016 + 2 x 32000 x 8192
  CHECK(catalog().shape("llama2_7b").parameters() == 6'738'149'376LL);  // 32 x 202,375,168 + 2 x 32000 x 4096
  CHECK(catalog().shape("stories260K").parameters() == 259'328);        // 5 x 45,312 + 512 x 64 (tied)
  CHECK(catalog().shape("llama3_8b").parameters() ==
        8'029'995'008LL);  // 32 x 218,103,808 + 2 x 128256 x 4096
  CHECK(catalog().shape("llama3_70b").parameters() ==
        70'552'387'584LL);  // 80 x 855,638,016 + 2 x 128256 x 8192
}

TEST_CASE("decode ops: GEMM flops and bytes by hand", "[cost]") {
  const auto w = make("llama2_7b", "bf16", "h100_sxm", Phase::decode, 1, 4096);
  const auto& q = op(w, "attn.q_proj");
  CHECK(q.count == 32);
  CHECK(q.flops == 2.0 * 4096 * 4096);
  CHECK(q.bytes == 4096.0 * 4096 * 2 + 4096 * 2 + 4096 * 2);  // weights + x + y in bf16
  const auto& a = op(w, "attn.sdpa");
  CHECK(a.flops == 2.0 * 2 * 32 * 128 * 4097);               // QK and PV over 4096 + 1 positions
  CHECK(a.bytes == 2.0 * 4096 * 2 + 2.0 * 4097 * 4096 * 2);  // q, o + K and V of the cache
  CHECK(w.tokens == 1);
  CHECK(w.kv_cache_bytes == 2.0 * 32 * 4096 * 4096 * 2);
}

TEST_CASE("batch-1 decode of a 70B model is never faster than weight bytes / bandwidth", "[cost]") {
  struct Plan {
    const char* name;
    double bits;  // weight bits per element, by hand: bf16 16, fp8 8, MXFP8 8 + 8/32, NVFP4 4 + 8/16
  };
  const Plan plans[] = {{"bf16", 16}, {"fp8", 8}, {"mxfp8", 8.25}, {"nvfp4", 4.5}, {"w4a16", 4.25}};
  // Weights one decode step must read: every matrix incl. the LM head, but of the (untied) token
  // embedding only the looked-up row: 68,975,329,280 - 32000 x 8192 + 8192 = 68,713,193,472.
  const double params = 68'713'193'472.0;
  for (const auto& name : catalog().target_names()) {
    const auto& t = catalog().target(name);
    for (const auto& p : plans) {
      INFO(name << " " << p.name);
      auto w = make("llama2_70b", p.name, name.c_str(), Phase::decode, 1, 1);
      const auto r = lpemu::cost::roofline(w, t);
      const double floor_s = params * p.bits / 8.0 / (t.bandwidth_gb_s * 1e9);
      CHECK(r.time_s >= floor_s);
      CHECK(r.time_per_token() >= floor_s);
    }
  }
  // H100 SXM, bf16: 137,426,386,944 B / 3.35e12 B/s = 41.02 ms.
  auto w = make("llama2_70b", "bf16", "h100_sxm", Phase::decode, 1, 1);
  const auto r = lpemu::cost::roofline(w, catalog().target("h100_sxm"));
  CHECK(r.time_s >= 137'426'386'944.0 / 3.35e12);
  CHECK(r.time_s < 1.01 * 137'426'386'944.0 / 3.35e12);  // and within 1% of it (activations are tiny)
  CHECK(r.compute_bound_time_s == 0);
}

TEST_CASE("prefill MLP is compute-bound, decode GEMMs memory-bound (H100, Llama-2-70B)", "[cost]") {
  auto pre = make("llama2_70b", "bf16", "h100_sxm", Phase::prefill, 1, 2048);
  lpemu::cost::roofline(pre, catalog().target("h100_sxm"));
  const auto& g = op(pre, "mlp.gate");
  // 2 x 2048 x 8192 x 28672 flops / 989.4e12 = 0.972 ms > 620.8 MB / 3.35 TB/s = 0.185 ms
  CHECK(g.compute_bound);
  CHECK(g.compute_s == Approx(2.0 * 2048 * 8192 * 28672 / 989.4e12));
  CHECK(pre.tokens == 2048);
  auto dec = make("llama2_70b", "bf16", "h100_sxm", Phase::decode, 1, 2048);
  lpemu::cost::roofline(dec, catalog().target("h100_sxm"));
  CHECK_FALSE(op(dec, "mlp.gate").compute_bound);
}

TEST_CASE("each GEMM runs on the narrowest rate class both inputs fit that the target has", "[cost]") {
  CHECK(op(make("llama2_7b", "fp8", "a100", Phase::decode, 1, 1), "mlp.up").rate_class == "fp16");
  CHECK(op(make("llama2_7b", "fp8", "h100_sxm", Phase::decode, 1, 1), "mlp.up").rate_class == "fp8");
  CHECK(op(make("llama2_7b", "nvfp4", "b200", Phase::decode, 1, 1), "mlp.up").rate_class == "fp4");
  CHECK(op(make("llama2_7b", "nvfp4", "h100_sxm", Phase::decode, 1, 1), "mlp.up").rate_class == "fp8");
  CHECK(op(make("llama2_7b", "mxfp6", "mi355x", Phase::decode, 1, 1), "mlp.up").rate_class == "fp8");
  CHECK(op(make("llama2_7b", "w4a16", "h100_sxm", Phase::decode, 1, 1), "mlp.up").rate_class == "bf16");
  CHECK(op(make("llama2_7b", "fp8", "tpu_v5e", Phase::decode, 1, 1), "mlp.up").rate_class == "bf16");
}

TEST_CASE("capacity: Llama-2-70B in bf16 does not fit one H100 but fits one MI300X", "[cost]") {
  auto w = make("llama2_70b", "bf16", "h100_sxm", Phase::decode, 1, 1);
  CHECK_FALSE(lpemu::cost::roofline(w, catalog().target("h100_sxm")).fits_in_memory);  // 138 GB > 80 GB
  auto m = make("llama2_70b", "bf16", "mi300x", Phase::decode, 1, 1);
  CHECK(lpemu::cost::roofline(m, catalog().target("mi300x")).fits_in_memory);  // 138 GB < 192 GB
}

TEST_CASE("each block is priced in its own formats and on its own datapath", "[cost]") {
  Catalog& c = catalog();
  const auto& shape = c.shape("llama3_8b");  // 32 blocks, d 4096, kv 1024, hidden 14336, vocab 128256
  auto plan = uniform("mxfp8", shape.n_layers);
  // First and last blocks in bf16 with a bf16 KV cache; the LM head unquantised.
  for (const std::size_t l : {std::size_t{0}, std::size_t{31}}) {
    auto& b = plan.layers[l];
    for (auto* g : {&b.q_proj, &b.k_proj, &b.v_proj, &b.o_proj, &b.gate, &b.up, &b.down})
      *g = {"bf16", "bf16", ""};
    b.q = b.probs = b.kv_cache = "bf16";
  }
  plan.lm_head = {"fp32", "fp32", ""};  // unquantised
  // MX blocks on the B200's block-scaled datapath, named by the plan.
  for (std::size_t l = 1; l < 31; ++l) plan.layers[l].gate.datapath = "b200_mxfp8_fp32";
  const auto& t = c.target("b200");
  // The unquantised LM head runs fp32 x fp32 on B200's datasheet FP32 rate, natively.
  const auto w32 = lpemu::cost::build_workload(shape, plan, t, c, Phase::decode, 8, 4096);
  CHECK(w32.ops.back().name == "lm_head");
  CHECK(w32.ops.back().rate_class == "fp32");
  CHECK(w32.ops.back().passes == 1);
  CHECK(w32.notes.empty());
  CHECK(lpemu::cost::bits_per_weight(shape, plan, c) == Approx((2 * 16.0 + 30 * 8.25) / 32));
  plan.lm_head = {"bf16", "bf16", ""};
  auto w = lpemu::cost::build_workload(shape, plan, t, c, Phase::decode, 8, 4096);
  // Identical ops of different blocks are one op with a count: gate is bf16 x2, mxfp8 on
  // b200_mxfp8_fp32 x30.
  std::vector<const lpemu::cost::Op*> gates;
  for (const auto& o : w.ops) {
    if (o.name == "mlp.gate") gates.push_back(&o);
  }
  REQUIRE(gates.size() == 2);
  CHECK(gates[0]->b_format == "bf16");
  CHECK(gates[0]->count == 2);
  CHECK(gates[0]->datapath == "b200_bf16_fp32");  // the target's datapath for the bf16 class
  CHECK(gates[1]->b_format == "mxfp8_e4m3");
  CHECK(gates[1]->count == 30);
  CHECK(gates[1]->datapath == "b200_mxfp8_fp32");
  CHECK(gates[1]->rate_class == "fp8");
  CHECK(op(w, "attn.q_proj").datapath == "b200_bf16_fp32");
  // Bits per weight: parameter-weighted over the quantised weights: 32 equal blocks (2 in bf16,
  // 30 in MXFP8 at 8.25 bits) of 218,103,808 weights and the bf16 head of 525,336,576.
  const double blk = 218'103'808.0, head = 4096.0 * 128256;
  CHECK(w.bits_per_weight == Approx((2 * 16.0 * blk + 30 * 8.25 * blk + 16.0 * head) / (32 * blk + head)));
  // The KV cache in each block's own format: 2 blocks bf16 (2 bytes), 30 MXFP8 (8.25 bits).
  CHECK(w.kv_cache_bytes == Approx(2.0 * 8 * 4096 * 1024 * (2 * 2.0 + 30 * 8.25 / 8)));
}

TEST_CASE("a plan with no quantised weight reports the unquantised width", "[cost]") {
  auto p = lpemu::cost::LayerwisePlan::uniform("ref", "fp32", "fp32", "fp32", 5);
  CHECK(lpemu::cost::bits_per_weight(catalog().shape("stories260K"), p, catalog()) == 32);
}

TEST_CASE("bad workload arguments get clear errors", "[cost]") {
  REQUIRE_THROWS_WITH(make("llama2_7b", "bf16", "h100_sxm", Phase::decode, 0, 1),
                      "batch = 0: expected a positive integer");
  REQUIRE_THROWS_WITH(
      catalog().shape("llama2-7b"),
      Catch::Matchers::StartsWith("unknown model shape 'llama2-7b'; closest known names: llama2_7b"));
}

}  // namespace
