// The training roles and backward GEMM keys of a precision plan: they parse, resolve, round-trip
// through to_toml and default to "unchanged" / Eigen, and every inference plan resolves them so.
#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "lpemu/engine/plan.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/registry.hpp"
#include "support/test_support.hpp"

using namespace lpemu;
using namespace lpemu::engine;

namespace {

const QuantizerFactory& quantizers() {
  static const QuantizerFactory q = QuantizerFactory::standard(format::Registry::builtin());
  return q;
}

const GemmFactory& gemms() {
  static const GemmFactory g = GemmFactory::builtin();
  return g;
}

PrecisionPlan read(const std::string& text) {
  return parse_plan_toml(text, "plan.toml", quantizers(), gemms());
}

}  // namespace

TEST_CASE("training roles and backward GEMM keys parse, resolve and round-trip", "[engine][train][unit]") {
  const PrecisionPlan p = read(R"(name = "fp8_train"
[roles]
weights = "fp8_e4m3"
linear_input = "fp8_e4m3"
grad_output = { format = "fp8_e5m2", rounding = "stochastic", seed = 7 }
grad_activation = "bf16"
grad_weights = "bf16"
master_weights = "fp32"
optimizer_state = "bf16"
weight_update = "bf16"
gemm = "h100_e4m3_fp32"
dgrad_gemm = "a100_bf16_fp32"
[[override]]
layers = [-1]
kind = "mlp"
grad_output = "none"
wgrad_gemm = "a100_bf16_fp32"
)");
  const auto go = p.resolve(Role::grad_output, 0, LayerKind::attention, 2);
  REQUIRE(go);
  CHECK(go->format == "fp8_e5m2");
  CHECK(go->options.rounding == format::RoundingMode::stochastic);
  CHECK(go->options.seed == 7);
  CHECK_FALSE(p.resolve(Role::grad_output, 1, LayerKind::mlp, 2));
  CHECK(p.resolve(Role::grad_output, 1, LayerKind::attention, 2)->format == "fp8_e5m2");
  CHECK(p.resolve(Role::optimizer_state, -1, LayerKind::head, 2)->format == "bf16");
  CHECK(p.resolve_gemm_site(0, LayerKind::mlp, "w1", 2, GemmPass::forward).datapath == "h100_e4m3_fp32");
  CHECK(p.resolve_gemm_site(0, LayerKind::mlp, "w1", 2, GemmPass::dgrad).datapath == "a100_bf16_fp32");
  CHECK(p.resolve_gemm_site(0, LayerKind::mlp, "w1", 2, GemmPass::wgrad).datapath == "eigen");
  CHECK(p.resolve_gemm_site(1, LayerKind::mlp, "w2", 2, GemmPass::wgrad).datapath == "a100_bf16_fp32");
  CHECK(p.resolve_gemm_site(1, LayerKind::attention, "wq", 2, GemmPass::wgrad).datapath == "eigen");
  CHECK_THROWS_AS(p.resolve_gemm_site(0, LayerKind::mlp, "w9", 2, GemmPass::dgrad), SpecError);
  CHECK_FALSE(p.is_reference());
  const std::string text = to_toml(p);
  INFO(text);
  CHECK(text.find("dgrad_gemm = \"a100_bf16_fp32\"") != std::string::npos);
  CHECK(text.find("wgrad_gemm = \"a100_bf16_fp32\"") != std::string::npos);
  const PrecisionPlan back = read(text);
  CHECK(back == p);
  CHECK(to_toml(back) == text);
  CHECK_FALSE(back == without_gemms(p));
  CHECK_FALSE(read("[roles]\nwgrad_gemm = \"a100_bf16_fp32\"\n").is_reference());
}

TEST_CASE("inference plans leave every training role unchanged and backward GEMMs on Eigen",
          "[engine][train][unit]") {
  const std::filesystem::path dir = std::filesystem::path(LPEMU_SOURCE_DIR) / "experiments" / "plans";
  int n = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.path().extension() != ".toml") continue;
    INFO(f.path());
    const PrecisionPlan p = load_plan(f.path().string(), quantizers(), gemms());
    ++n;
    for (const Role r : kAllRoles) {
      if (!is_training_role(r)) continue;
      for (int l = -1; l < 3; ++l) {
        const LayerKind k = l < 0 ? LayerKind::head : LayerKind::mlp;
        CHECK_FALSE(p.resolve(r, l, k, 3));
        for (const GemmPass pass : {GemmPass::dgrad, GemmPass::wgrad}) {
          CHECK(p.resolve_gemm_site(l, k, l < 0 ? "output" : "w2", 3, pass).datapath == "eigen");
        }
      }
    }
  }
  CHECK(n > 5);
  CHECK(is_training_role(Role::grad_output));
  CHECK(is_training_role(Role::weight_update));
  CHECK_FALSE(is_training_role(Role::router_logits));
  CHECK(parse_role("grad_activation") == Role::grad_activation);
}

TEST_CASE("an unknown plan key names the backward GEMM keys among the expected ones",
          "[engine][train][unit]") {
  CHECK_THROWS_WITH(read("[roles]\ndgrad_gem = \"none\"\n"), Catch::Contains("dgrad_gemm") &&
                                                                 Catch::Contains("wgrad_gemm") &&
                                                                 Catch::Contains("grad_output"));
}
