// Every shipped precision plan priced on every shipped hardware target in every phase (prefill
// and decode on one device, a training step on a DGX H100 system carrying that device), and the
// split-operand emulation that stands in for a rate class a target does not list.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/cost/catalog.hpp"
#include "lpemu/cost/system.hpp"
#include "lpemu/cost/workload.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/experiment/pricing.hpp"
#include "support/test_support.hpp"

namespace {

using namespace lpemu;

std::vector<std::string> shipped_plans() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(test::source_path("experiments/plans"))) {
    if (e.path().extension() == ".toml") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST_CASE("every shipped plan prices on every shipped target in prefill and decode", "[cost][matrix]") {
  experiment::Context ctx;
  ctx.data_dirs = {test::source_path("")};
  cost::Catalog& cat = ctx.costs();
  const cost::ModelShape shape = cat.shape("llama2_70b");
  const auto plans = shipped_plans();
  REQUIRE(plans.size() >= 14);
  const auto targets = cat.target_names();
  REQUIRE(targets.size() >= 11);
  for (const auto& plan_name : plans) {
    const engine::PrecisionPlan plan = ctx.load_plan(plan_name);
    for (const auto& target_name : targets) {
      const cost::Target target = cat.target(target_name);
      for (const auto phase : {cost::Phase::prefill, cost::Phase::decode}) {
        INFO("plan " << plan_name << " on " << target_name << ", " << cost::to_string(phase));
        if (plan_name == "fp64") {
          // No target lists an fp64 rate class: the error names the first tensor and its layer.
          CHECK_THROWS_WITH(experiment::price_plan(plan, shape, target, cat, phase, 8, 4096),
                            Catch::Matchers::StartsWith("layer 0 attn.q_proj (fp64 x fp64): target '" +
                                                        target_name + "' has no rate class"));
          continue;
        }
        const experiment::Pricing p = experiment::price_plan(plan, shape, target, cat, phase, 8, 4096);
        CHECK(std::isfinite(p.roofline.time_s));
        CHECK(p.roofline.time_s > 0);
        for (const auto& op : p.workload.ops) {
          if (op.kind == "memory") continue;
          INFO(op.name << " " << op.a_format << " x " << op.b_format << " on " << op.rate_class);
          CHECK(target.find_rate(op.rate_class) != nullptr);
          // Emulated exactly when the op's operands fit no class the target lists, and then reported.
          const bool native = op.passes == 1;
          CHECK(native == op.rate_note.empty());
          if (!native) {
            CHECK(std::find(p.workload.notes.begin(), p.workload.notes.end(), op.rate_note) !=
                  p.workload.notes.end());
          }
        }
      }
    }
  }
}

TEST_CASE("every shipped plan prices a training step on every shipped target", "[cost][matrix]") {
  experiment::Context ctx;
  ctx.data_dirs = {test::source_path("")};
  cost::Catalog& cat = ctx.costs();
  const cost::ModelShape shape = cat.shape("llama2_70b");
  const cost::System sys = cost::load_system("dgx_h100");
  for (const auto& plan_name : shipped_plans()) {
    const engine::PrecisionPlan plan = ctx.load_plan(plan_name);
    for (const auto& target_name : cat.target_names()) {
      INFO("plan " << plan_name << " on " << target_name);
      experiment::ClusterSetup setup;
      setup.system = "dgx_h100";
      setup.target = target_name;
      setup.phase = "train";
      setup.parallel = "tp=8,pp=4";
      setup.devices = 256;
      setup.context = 4096;
      setup.global_batch = 256;
      if (plan_name == "fp64") {
        CHECK_THROWS_WITH(experiment::price_cluster(plan, shape, sys, cat, setup),
                          Catch::Matchers::StartsWith("layer 40 mlp.gate (fp64 x fp64): target '" +
                                                      target_name + "' has no rate class"));
        continue;
      }
      const experiment::ClusterReport r = experiment::price_cluster(plan, shape, sys, cat, setup);
      REQUIRE(r.train.size() == 1);
      CHECK(std::isfinite(r.train.front().time.step_s));
      CHECK(r.train.front().time.step_s > 0);
    }
  }
}

TEST_CASE("fp32 operands on a target without an fp32 class run as published split-operand passes",
          "[cost][matrix]") {
  experiment::Context ctx;
  ctx.data_dirs = {test::source_path("")};
  cost::Catalog& cat = ctx.costs();
  const cost::CostFormat f32 = cat.format("fp32");
  // TPU v5e lists bf16 and int8 only: three bf16 pieces of 9 bits hold 24, 3 * 4 / 2 = 6 products
  // (bf16x6, Henry et al. ARITH 2019).
  const cost::RateChoice tpu =
      cost::choose_rate_class(f32.element, f32.element, cat.target("tpu_v5e"), "fp32", "fp32");
  CHECK(tpu.rate_class == "bf16");
  CHECK(tpu.passes == 6);
  CHECK(tpu.note ==
        "fp32 x fp32: no tpu_v5e rate class accepts both; run as 6 bf16 passes per MAC (split operands: "
        "bf16x3/x6, Henry et al. ARITH 2019)");
  // fp16 operands on TPU v5e: two bf16 pieces hold 11 bits, 3 products (bf16x3).
  const cost::CostFormat f16 = cat.format("fp16");
  CHECK(cost::choose_rate_class(f16.element, f16.element, cat.target("tpu_v5e"), "fp16", "fp16").passes == 3);
  // Without FP32, B200 takes bf16x6 (2250 / 6 = 375 TFLOP/s) over 3xTF32 (1100 / 3 = 366.7); H100
  // without FP32 ties (989.4 / 6 = 494.7 / 3) and takes the fewer passes, 3xTF32.
  cost::Target b200 = cat.target("b200");
  b200.rates.erase("fp32");
  const cost::RateChoice b = cost::choose_rate_class(f32.element, f32.element, b200, "fp32", "fp32");
  CHECK(b.rate_class == "bf16");
  CHECK(b.passes == 6);
  cost::Target h100 = cat.target("h100_sxm");
  h100.rates.erase("fp32");
  const cost::RateChoice tf = cost::choose_rate_class(f32.element, f32.element, h100, "fp32", "fp32");
  CHECK(tf.rate_class == "tf32");
  CHECK(tf.passes == 3);
  CHECK(tf.note ==
        "fp32 x fp32: no h100_sxm rate class accepts both; run as 3 tf32 passes per MAC (split operands: "
        "3xTF32, Ootomo & Yokota 2022)");
  // B200 lists FP32 (datasheet): native, no note.
  const cost::RateChoice native =
      cost::choose_rate_class(f32.element, f32.element, cat.target("b200"), "fp32", "fp32");
  CHECK(native.rate_class == "fp32");
  CHECK(native.passes == 1);
  CHECK(native.note.empty());
  // fp64 fits no class and no class holds its exponent range.
  const cost::CostFormat f64 = cat.format("fp64");
  CHECK_THROWS_WITH(cost::choose_rate_class(f64.element, f64.element, cat.target("h100_sxm"), "fp64", "fp64"),
                    Catch::Matchers::StartsWith("target 'h100_sxm' has no rate class that accepts both fp64 "
                                                "and fp64, nor one with their exponent range"));
}

TEST_CASE("an emulated op costs passes x flops at the class's peak in the roofline", "[cost][matrix]") {
  experiment::Context ctx;
  ctx.data_dirs = {test::source_path("")};
  cost::Catalog& cat = ctx.costs();
  const cost::Target tpu = cat.target("tpu_v5e");
  const experiment::Pricing p = experiment::price_plan(ctx.load_plan("nvfp4"), cat.shape("llama2_7b"), tpu,
                                                       cat, cost::Phase::prefill, 4, 2048);
  const auto sdpa = std::find_if(p.workload.ops.begin(), p.workload.ops.end(),
                                 [](const cost::Op& o) { return o.name == "attn.sdpa"; });
  REQUIRE(sdpa != p.workload.ops.end());
  CHECK(sdpa->a_format == "fp32");
  CHECK(sdpa->passes == 6);
  // Llama-2-7B: 32 heads of 128; causal prefill 2 * 2 * B * H * d * S(S+1)/2 flops, 6 bf16 passes at 197
  // TFLOP/s.
  const double flops = 2.0 * 2.0 * 4 * 32 * 128 * 2048.0 * 2049.0 / 2.0;
  CHECK(sdpa->flops == Approx(flops).epsilon(1e-12));
  CHECK(sdpa->compute_s == Approx(flops * 6 / 197e12).epsilon(1e-12));
  REQUIRE(p.workload.notes.size() >= 1);
}

}  // namespace
