// The optimizers' schedule, clipping and plan formats (their update rules are checked against
// torch.optim in tests/python/test_train.py): warm-up then cosine learning rate, global-norm
// clipping as torch.nn.utils.clip_grad_norm_, and master weights, optimizer state and update in
// the plan's formats.
#include <cmath>
#include <numbers>
#include <string>

#include <catch2/catch.hpp>

#include "lpemu/engine/plan.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/train/optimizer.hpp"
#include "support/tiny_model.hpp"

using namespace lpemu;
using namespace lpemu::train;

TEST_CASE("learning rate: linear warm-up, then cosine to min_lr", "[train][unit]") {
  OptimizerOptions o;
  o.lr = 0.1;
  o.warmup_steps = 4;
  o.decay_steps = 10;
  o.min_lr = 0.01;
  CHECK(learning_rate(o, 0) == Approx(0.025));
  CHECK(learning_rate(o, 3) == Approx(0.1));
  CHECK(learning_rate(o, 4) == Approx(0.1));
  CHECK(learning_rate(o, 9) == Approx(0.01 + 0.045 * (1 + std::cos(std::numbers::pi * 0.5))));
  CHECK(learning_rate(o, 14) == Approx(0.01));
  CHECK(learning_rate(o, 100) == Approx(0.01));
  o.decay_steps = 0;
  CHECK(learning_rate(o, 50) == 0.1);
  CHECK(parse_optimizer("sgd") == OptimizerKind::sgd);
  CHECK_THROWS_WITH(parse_optimizer("adam"), "optimizer 'adam': expected sgd or adamw");
}

TEST_CASE("clipping scales the gradients to the global norm; plan formats round the optimizer's tensors",
          "[train][unit]") {
  const engine::Model m = test::tiny_model("llama", "fp32", false);
  Params<double> p = params_from_model<double>(m);
  Params<double> g = p;  // a gradient equal to the weights: its norm is the weights' norm
  const double norm = global_norm(g);
  OptimizerOptions o;
  o.kind = OptimizerKind::sgd;
  o.clip_norm = 0.5 * norm;
  Optimizer<double> opt(o, p);
  CHECK(opt.step(p, g, 0.0) == Approx(norm));
  CHECK(global_norm(g) == Approx(0.5 * norm).epsilon(1e-5));
  CHECK(opt.steps() == 1);

  const auto q = engine::QuantizerFactory::standard(format::Registry::builtin());
  const auto gemms = engine::GemmFactory::builtin();
  const auto plan = engine::parse_plan_toml(
      "[roles]\nmaster_weights = \"bf16\"\noptimizer_state = \"fp8_e4m3\"\nweight_update = \"bf16\"\n",
      "o.toml", q, gemms);
  Params<float> pf = params_from_model<float>(m);
  Params<float> gf = pf;
  OptimizerOptions a;
  a.lr = 1e-2;
  Optimizer<float> adam(a, pf, &plan, &q, m.config.n_layers);
  adam.step(pf, gf, a.lr);
  const auto& bf16 = format::Registry::builtin().get("bf16");
  const auto& e4m3 = format::Registry::builtin().get("fp8_e4m3");
  const auto on_grid = [](const format::Format& f, const float* x, Eigen::Index n) {
    for (Eigen::Index i = 0; i < n; ++i) {
      if (format::quantize(f, x[i]) != static_cast<double>(x[i])) return false;
    }
    return true;
  };
  pf.for_each([&](const std::string& name, const auto& t) {
    INFO(name);
    CHECK(on_grid(bf16, t.data(), t.size()));
  });
  for (auto& named : adam.state()) {
    const std::string kind = named.first;  // not a structured binding: clang 14 cannot capture one
    named.second->for_each([&](const std::string& n, const auto& t) {
      INFO(kind << "/" << n);
      CHECK(on_grid(e4m3, t.data(), t.size()));
    });
  }
}
