#include <string>

#include <catch2/catch.hpp>

#include "lpemu/engine/plan.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/registry.hpp"
#include "support/test_support.hpp"

namespace {

using namespace lpemu::engine;

const QuantizerFactory& factory() {
  static const QuantizerFactory f =
      QuantizerFactory::with_element_formats(lpemu::format::Registry::builtin());
  return f;
}

PrecisionPlan parse(const std::string& text) {
  return parse_plan_toml(text, "test.toml", factory(), GemmFactory::builtin());
}

std::string error_of(const std::string& text) {
  try {
    (void)parse(text);
  } catch (const lpemu::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_CASE("plan roles resolve through per-layer and per-kind overrides in file order", "[engine][plan]") {
  const PrecisionPlan p = parse(R"(
name = "mixed"
[defaults]
overflow = "saturate"
[roles]
weights = "fp8_e4m3"
linear_input = { format = "fp8_e5m2", rounding = "stochastic", seed = 9 }
logits = "bf16"
[[override]]
layers = ["first", -1]
weights = "bf16"
[[override]]
layers = [2]
kind = "mlp"
weights = "none"
gemm = "eigen"
)");
  CHECK(p.name == "mixed");
  const int n = 5;
  CHECK(p.resolve(Role::weights, 0, LayerKind::attention, n)->format == "bf16");
  CHECK(p.resolve(Role::weights, 4, LayerKind::mlp, n)->format == "bf16");
  CHECK(p.resolve(Role::weights, 1, LayerKind::mlp, n)->format == "fp8_e4m3");
  CHECK(p.resolve(Role::weights, 2, LayerKind::attention, n)->format == "fp8_e4m3");
  CHECK_FALSE(p.resolve(Role::weights, 2, LayerKind::mlp, n).has_value());
  const auto li = p.resolve(Role::linear_input, 3, LayerKind::attention, n);
  REQUIRE(li.has_value());
  CHECK(li->options.rounding == lpemu::format::RoundingMode::stochastic);
  CHECK(li->options.seed == 9);
  CHECK(li->options.overflow == lpemu::format::Overflow::saturate);
  CHECK_FALSE(p.resolve(Role::q, 3, LayerKind::attention, n).has_value());
  CHECK(p.resolve(Role::logits, -1, LayerKind::head, n)->format == "bf16");
  CHECK(p.resolve_gemm(2, LayerKind::mlp, n) == "eigen");
  CHECK_FALSE(p.is_reference());
  CHECK(builtin_plan("fp32").is_reference());
  CHECK(builtin_plan("fp64").compute == Compute::fp64);
}

TEST_CASE("mixture-of-experts roles fall back to their general roles unless an entry names them",
          "[engine][plan]") {
  const PrecisionPlan p = parse(R"(
[roles]
weights = "fp8_e4m3"
linear_input = "bf16"
expert_hidden = "fp8_e5m2"
[[override]]
layers = [1]
expert_weights = "fp4_e2m1"
router_weights = "none"
)");
  const auto fmt = [&](Role r, int layer) {
    const auto s = p.resolve(r, layer, LayerKind::mlp, 2);
    return s ? s->format : std::string("none");
  };
  CHECK(fmt(Role::expert_weights, 0) == "fp8_e4m3");  // falls back to weights
  CHECK(fmt(Role::router_weights, 0) == "fp8_e4m3");
  CHECK(fmt(Role::expert_input, 0) == "bf16");  // falls back to linear_input
  CHECK(fmt(Role::router_input, 0) == "bf16");
  CHECK(fmt(Role::expert_hidden, 0) == "fp8_e5m2");  // named itself
  CHECK(fmt(Role::mlp_hidden, 0) == "none");
  CHECK(fmt(Role::router_logits, 0) == "none");       // no fallback
  CHECK(fmt(Role::expert_weights, 1) == "fp4_e2m1");  // the override names it
  CHECK(fmt(Role::router_weights, 1) == "none");      // "none" is an entry: no fallback
  CHECK(fmt(Role::weights, 1) == "fp8_e4m3");
  CHECK(fallback_role(Role::expert_input) == Role::linear_input);
  CHECK(fallback_role(Role::q) == Role::q);
  CHECK(p.resolve_gemm_site(0, LayerKind::mlp, "expert_w2", 2).datapath == "eigen");
  CHECK(p.resolve_gemm_site(0, LayerKind::mlp, "router", 2).datapath == "eigen");
  const std::string e = error_of("[roles]\nexpert_weight = \"bf16\"\n");
  CHECK_THAT(
      e, Catch::Contains("test.toml:2") &&
             Catch::Contains("field 'roles.expert_weight' = \"bf16\": expected a known role (weights, ") &&
             Catch::Contains("; closest known names: expert_weights") && Catch::Contains("router_logits"));
}

TEST_CASE("bad plans name file, line, key and what was expected", "[engine][plan]") {
  const std::string role = error_of("[roles]\nweights = \"fp8_e4m3\"\nweigths = \"bf16\"\n");
  CHECK_THAT(role, Catch::Contains("test.toml:3") && Catch::Contains("weigths") &&
                       Catch::Contains("expected a known role") && Catch::Contains("weights"));
  const std::string fmt = error_of("[roles]\n\nweights = \"fp8_e4m4\"\n");
  CHECK_THAT(fmt, Catch::Contains("test.toml:3") && Catch::Contains("fp8_e4m4") &&
                      Catch::Contains("expected a known format") && Catch::Contains("fp8_e4m3"));
  CHECK_THROWS_AS(parse("[roles]\nweights = \"fp8_e4m4\"\n"), lpemu::UnknownNameError);
  const std::string key = error_of("name = \"x\"\nprecision = 3\n");
  CHECK_THAT(key, Catch::Contains("test.toml:2") && Catch::Contains("precision"));
  const std::string rnd = error_of("[roles]\nq = { format = \"bf16\", rounding = \"nearest\" }\n");
  CHECK_THAT(rnd, Catch::Contains("test.toml:2") && Catch::Contains("rounding"));
  const std::string sub = error_of("[roles]\nq = { format = \"bf16\", sead = 3 }\n");
  CHECK_THAT(sub, Catch::Contains("test.toml:2") && Catch::Contains("q.sead"));
  const std::string kind = error_of("[[override]]\nkind = \"ffn\"\nweights = \"bf16\"\n");
  CHECK_THAT(kind, Catch::Contains("test.toml:2") && Catch::Contains("attention"));
  const std::string gemm = error_of("[roles]\ngemm = \"h100_e4m3\"\n");
  CHECK_THAT(gemm, Catch::Contains("test.toml:2") &&
                       Catch::Contains("field 'roles.gemm' = \"h100_e4m3\": expected a known GEMM datapath"));
  const std::string syntax = error_of("[roles\n");
  CHECK_THAT(syntax, Catch::Contains("test.toml:1"));
}

TEST_CASE("shipped element-format plans load and block-format plans name the missing formats",
          "[engine][plan]") {
  const auto gemms = GemmFactory::builtin();
  for (const char* name : {"fp32", "fp64", "bf16", "fp8_e4m3", "fp8_e4m3_stochastic", "fp4_e2m1"}) {
    INFO(name);
    const PrecisionPlan p = load_plan(name, factory(), gemms, {lpemu::test::source_path("")});
    CHECK(p.name == name);
    CHECK(p.origin.find(std::string(name) + ".toml") != std::string::npos);
  }
  const PrecisionPlan e4m3 = load_plan("fp8_e4m3", factory(), gemms, {lpemu::test::source_path("")});
  CHECK(e4m3.resolve(Role::weights, 0, LayerKind::mlp, 5)->format == "bf16");
  CHECK(e4m3.resolve(Role::weights, 1, LayerKind::mlp, 5)->format == "fp8_e4m3");
  CHECK(e4m3.resolve(Role::weights, 4, LayerKind::attention, 5)->format == "bf16");
  if (!factory().knows("mxfp4")) {
    CHECK_THROWS_WITH(load_plan("mxfp4", factory(), gemms, {lpemu::test::source_path("")}),
                      Catch::Contains("mxfp4.toml:") && Catch::Contains("mxfp4"));
  }
  CHECK_THROWS_AS(load_plan("no_such_plan", factory(), gemms, {}), lpemu::IoError);
  CHECK(load_plan("fp64", factory(), gemms, {}).compute == Compute::fp64);
}

}  // namespace
