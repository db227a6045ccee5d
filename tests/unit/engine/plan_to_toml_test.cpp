// Precision plans write themselves: every plan under experiments/plans/ and the built-in plans
// round-trip through to_toml; the named plan changes edit the typed plan; the role, layer-kind
// and compute name tables parse what they print.
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

void round_trip(const PrecisionPlan& p) {
  const std::string text = to_toml(p);
  INFO(text);
  const PrecisionPlan back = read(text);
  CHECK(back == p);
  CHECK(to_toml(back) == text);
}

}  // namespace

TEST_CASE("every plan file and built-in plan round-trips through to_toml", "[engine][records][unit]") {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(test::source_path("experiments/plans"))) {
    if (e.path().extension() != ".toml") continue;
    INFO(e.path().string());
    round_trip(load_plan(e.path().string(), quantizers(), gemms()));
    ++n;
  }
  CHECK(n >= 14);
  round_trip(builtin_plan("fp32"));
  round_trip(builtin_plan("fp64"));
}

TEST_CASE("to_toml writes specs with options, gemm tables and override selectors",
          "[engine][records][unit]") {
  const PrecisionPlan p = read(R"(name = "mixed"
description = "every kind of entry"
compute = "fp64"
[defaults]
overflow = "saturate"
[roles]
weights = { format = "fp8_e4m3", rounding = "toward_zero", sr_bits = 12, seed = 7, ftz = true, daz = true }
linear_input = "bf16"
scores = "none"
gemm = { datapath = "h100_e4m3_fp32", convert = true }
attention_gemm = "fp32"
[[override]]
layers = ["first", -2, 3]
kind = "mlp"
weights = "bf16"
gemm = "none"
[[override]]
kind = "head"
lm_head = "none"
)");
  round_trip(p);
  CHECK(p.overrides.at(0).layers == std::vector<int>{0, -2, 3});
  CHECK(to_toml(p).find("layers = [0, -2, 3]") != std::string::npos);
  // Origins are where a plan was written, not what it does: they are not compared.
  PrecisionPlan moved = p;
  moved.origin = "elsewhere";
  moved.roles.at(0).spec->origin = "elsewhere:1";
  CHECK(moved == p);
}

TEST_CASE("named plan changes edit the typed plan", "[engine][records][unit]") {
  const PrecisionPlan base = load_plan("nvfp4_b200", quantizers(), gemms(), {test::source_path("")});

  const PrecisionPlan w = with_role_format(base, Role::weights, "bf16", {}, "command line");
  CHECK(w.resolve(Role::weights, 0, LayerKind::mlp, 4)->format == "bf16");
  CHECK(w.resolve(Role::weights, 0, LayerKind::mlp, 4)->origin == "command line");
  round_trip(w);
  const PrecisionPlan none = with_role_format(base, Role::linear_input, "none");
  CHECK_FALSE(none.resolve(Role::linear_input, 0, LayerKind::mlp, 4));
  round_trip(none);

  const PrecisionPlan g = with_gemm(base, "h100_e4m3_fp32");
  CHECK(g.resolve_gemm(1, LayerKind::attention, 4) == "h100_e4m3_fp32");
  CHECK(g.resolve_gemm(-1, LayerKind::head, 4) == "h100_e4m3_fp32");  // the head's override lost its gemm
  round_trip(g);

  const PrecisionPlan b = with_block_gemm(builtin_plan("fp32"), "h100_e4m3_fp32");
  CHECK(b.resolve_gemm(0, LayerKind::mlp, 4) == "h100_e4m3_fp32");
  CHECK(b.resolve_gemm(-1, LayerKind::head, 4) == "eigen");
  round_trip(b);

  const PrecisionPlan kept = with_layers(with_role_format(builtin_plan("fp32"), Role::weights, "fp8_e4m3"),
                                         {0, -1}, {Role::weights}, "bf16", std::string("eigen"));
  CHECK(kept.resolve(Role::weights, 0, LayerKind::mlp, 4)->format == "bf16");
  CHECK(kept.resolve(Role::weights, 1, LayerKind::mlp, 4)->format == "fp8_e4m3");
  CHECK(kept.resolve(Role::weights, 3, LayerKind::mlp, 4)->format == "bf16");
  round_trip(kept);

  const PrecisionPlan bare = without_gemms(base);
  CHECK(bare.resolve_gemm(0, LayerKind::mlp, 4) == "eigen");
  CHECK(bare.resolve(Role::weights, 0, LayerKind::mlp, 4)->format == "nvfp4");
  const PrecisionPlan only = only_role(base, Role::weights);
  CHECK_FALSE(only.resolve(Role::linear_input, 0, LayerKind::mlp, 4));
  CHECK(only.resolve(Role::weights, 0, LayerKind::mlp, 4)->format == "nvfp4");
  const auto at = only_role_at(base, Role::weights, 2, 4);
  REQUIRE(at);
  CHECK(at->resolve(Role::weights, 2, LayerKind::attention, 4)->format == "nvfp4");
  CHECK_FALSE(at->resolve(Role::weights, 1, LayerKind::attention, 4));
  CHECK_FALSE(only_role_at(base, Role::lm_head, 2, 4));
}

TEST_CASE("role, layer kind, layer and compute names parse what they print", "[engine][records][unit]") {
  for (const Role r : kAllRoles) CHECK(parse_role(to_string(r)) == r);
  CHECK(role_names().size() == std::size(kAllRoles));
  CHECK_THROWS_WITH(parse_role("weight"),
                    Catch::Contains("role 'weight': expected one of weights, linear_input") &&
                        Catch::Contains("closest known names: ") &&
                        Catch::Contains("closest known names: weights, grad_weights, weight_update"));
  for (const LayerKind k : {LayerKind::attention, LayerKind::mlp, LayerKind::head})
    CHECK(parse_layer_kind(to_string(k)) == k);
  CHECK_THROWS_WITH(parse_layer_kind("ffn"), Catch::Contains("expected one of attention, mlp, head"));
  CHECK(parse_layer("first") == 0);
  CHECK(parse_layer("last") == -1);
  CHECK(parse_layer("-3") == -3);
  CHECK_THROWS_AS(parse_layer("middle"), SpecError);
  CHECK(to_string(Compute::fp64) == "fp64");
}
