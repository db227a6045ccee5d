// Loss scaling: the plan's [loss_scale] table parses, round-trips and is checked; the dynamic
// scaler follows torch.amp.GradScaler's update rule (aten's _amp_update_scale_, transcribed below
// as a slow reference) on scripted sequences of steps with and without Inf/NaN gradients; the
// loss gradient is multiplied by the scale and unscaling restores the unscaled gradients.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/engine/plan.hpp"
#include "lpemu/error.hpp"
#include "lpemu/train/backward.hpp"
#include "lpemu/train/linear_plan.hpp"
#include "lpemu/train/loss_scale.hpp"
#include "support/tiny_model.hpp"

using namespace lpemu;
using namespace lpemu::train;
using Kind = engine::LossScale::Kind;

namespace {

engine::PrecisionPlan read(const std::string& text) { return test::read_plan(text, "loss_scale.toml"); }

// GradScaler.update as PyTorch documents and implements it (torch/cuda/amp/grad_scaler.py,
// aten/src/ATen/native/cuda/AmpKernels.cu _amp_update_scale_cuda_kernel): on Inf/NaN the scale is
// multiplied by backoff and the tracker reset; else the tracker counts up and at growth_interval
// the scale is multiplied by growth (if the product is finite) and the tracker reset.
struct Reference {
  float scale;
  int tracker = 0;
  double growth, backoff;
  int interval;
  void update(bool found_inf) {
    if (found_inf) {
      scale = static_cast<float>(static_cast<double>(scale) * backoff);
      tracker = 0;
      return;
    }
    if (tracker + 1 == interval) {
      const auto s = static_cast<float>(static_cast<double>(scale) * growth);
      if (std::isfinite(s)) scale = s;
      tracker = 0;
    } else {
      ++tracker;
    }
  }
};

}  // namespace

TEST_CASE("[loss_scale] parses with torch's defaults, round-trips and names bad keys", "[train][unit]") {
  const auto none = read("[roles]\ngrad_output = \"fp16\"\n");
  CHECK(none.loss_scale.kind == Kind::none);
  const auto d = read("[loss_scale]\nkind = \"dynamic\"\n");
  CHECK(d.loss_scale.kind == Kind::dynamic);
  CHECK(d.loss_scale.init_scale == 65536.0);
  CHECK(d.loss_scale.growth_factor == 2.0);
  CHECK(d.loss_scale.backoff_factor == 0.5);
  CHECK(d.loss_scale.growth_interval == 2000);
  CHECK_FALSE(d.is_reference());
  const auto s = read("[loss_scale]\nkind = \"static\"\ninit_scale = 1024.0\n");
  CHECK(s.loss_scale.kind == Kind::fixed);
  CHECK(s.loss_scale.init_scale == 1024.0);
  const auto custom = read(
      "[loss_scale]\nkind = \"dynamic\"\ninit_scale = 8.0\ngrowth_factor = 4.0\nbackoff_factor = 0.25\n"
      "growth_interval = 3\n");
  for (const auto* p : {&d, &s, &custom}) {
    CHECK(engine::parse_plan_toml(engine::to_toml(*p), "again.toml", test::builtin_quantizers(),
                                  test::builtin_gemms()) == *p);
  }
  CHECK_FALSE(custom == d);
  CHECK_THROWS_WITH(read("[loss_scale]\ninit_scale = 8.0\n"),
                    Catch::Contains("loss_scale.kind") && Catch::Contains("dynamic"));
  CHECK_THROWS_WITH(read("[loss_scale]\nkind = \"adaptive\"\n"), Catch::Contains("loss_scale.kind"));
  CHECK_THROWS_WITH(read("[loss_scale]\nkind = \"dynamic\"\nbackoff_factor = 2.0\n"),
                    Catch::Contains("loss_scale.backoff_factor"));
  CHECK_THROWS_WITH(read("[loss_scale]\nkind = \"dynamic\"\ngrowth_interval = 0\n"),
                    Catch::Contains("loss_scale.growth_interval"));
  CHECK_THROWS_WITH(read("[loss_scale]\nkind = \"dynamic\"\ninterval = 5\n"),
                    Catch::Contains("loss_scale.interval") && Catch::Contains("growth_interval"));
}

TEST_CASE("the dynamic scaler follows GradScaler's update rule on scripted steps", "[train][unit]") {
  std::mt19937 g(3);
  for (const auto& [interval, growth, backoff] : {std::tuple{2, 2.0, 0.5}, std::tuple{3, 4.0, 0.125},
                                                  std::tuple{1, 2.0, 0.5}, std::tuple{5, 1.5, 0.3}}) {
    engine::LossScale o;
    o.kind = Kind::dynamic;
    o.init_scale = 65536.0;
    o.growth_factor = growth;
    o.backoff_factor = backoff;
    o.growth_interval = interval;
    LossScaler s(o);
    Reference ref{65536.0F, 0, growth, backoff, interval};
    std::bernoulli_distribution inf(0.3);
    for (int step = 0; step < 200; ++step) {
      const bool found = inf(g);
      CHECK(s.scale() == ref.scale);
      CHECK(s.update(found) == found);  // a step with Inf/NaN gradients is skipped
      ref.update(found);
      CHECK(s.growth_tracker() == ref.tracker);
    }
  }
  // Growth stops where the product would overflow FP32.
  engine::LossScale o;
  o.kind = Kind::dynamic;
  o.init_scale = 0x1p127;
  o.growth_interval = 1;
  LossScaler big(o);
  big.update(false);
  CHECK(big.scale() == 0x1p127F);
  // Static scaling never changes and never skips; no scaling is 1.
  o.kind = Kind::fixed;
  o.init_scale = 1024.0;
  LossScaler fixed(o);
  CHECK_FALSE(fixed.update(true));
  CHECK(fixed.scale() == 1024.0F);
  CHECK(LossScaler(engine::LossScale{}).scale() == 1.0F);
  CHECK_THROWS_AS(fixed.restore(-1.0F, 0), SpecError);
}

TEST_CASE("the loss gradient is scaled and unscaling restores the gradients", "[train][unit]") {
  const engine::Model m = test::tiny_model("llama", "fp32", false);
  const auto p = params_from_model<float>(m);
  const std::vector<int> tokens = {1, 5, 9, 3, 7, 2, 4, 8, 6, 1};
  LinearPlan lp(read("[loss_scale]\nkind = \"dynamic\"\n"), test::builtin_quantizers(), test::builtin_gemms(),
                m.config);
  Params<float> plain, scaled;
  const double l0 = loss_and_gradients(m.config, p, tokens, 2, 4, plain, &lp);
  lp.set_loss_scale(1024.0);
  const double l1 = loss_and_gradients(m.config, p, tokens, 2, 4, scaled, &lp);
  CHECK(l0 == l1);  // the loss is reported unscaled
  // Scaling by a power of two is exact in every GEMM and sum of this unquantised plan.
  std::vector<float> a, b;
  plain.for_each(
      [&a](const std::string&, const auto& t) { a.insert(a.end(), t.data(), t.data() + t.size()); });
  scaled.for_each(
      [&b](const std::string&, const auto& t) { b.insert(b.end(), t.data(), t.data() + t.size()); });
  REQUIRE(a.size() == b.size());
  std::size_t exact = 0;
  for (std::size_t i = 0; i < a.size(); ++i) exact += b[i] == a[i] * 1024.0F ? 1 : 0;
  CHECK(exact == a.size());
  CHECK_FALSE(unscale_gradients(scaled, 1024.0F));
  std::vector<float> c;
  scaled.for_each(
      [&c](const std::string&, const auto& t) { c.insert(c.end(), t.data(), t.data() + t.size()); });
  CHECK(c == a);
  scaled.norm(0) = std::numeric_limits<float>::infinity();
  CHECK(unscale_gradients(scaled, 1024.0F));
}
