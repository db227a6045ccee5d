// Per-tensor scaling recipes of element formats in plan specs (scaling = "current" | "delayed",
// amax_history): current scaling equals the per-tensor block format (block::quantize of
// fp8_*_per_tensor) bit for bit, in inference and training; delayed scaling takes its scale from
// the largest amax of the last amax_history steps of its quantisation point, updated after use.
#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/train/linear_plan.hpp"
#include "support/tiny_model.hpp"

using namespace lpemu;
using namespace lpemu::train;
using engine::GemmPass;
using engine::RowMatrix;

namespace {

engine::PrecisionPlan read(const std::string& text) { return test::read_plan(text, "scaling.toml"); }

RowMatrix random(std::mt19937& g, int r, int c, float scale) {
  std::normal_distribution<float> d(0.0F, 1.0F);
  RowMatrix m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = d(g) * scale;
  return m;
}

float amax(const RowMatrix& x) { return x.cwiseAbs().maxCoeff(); }

// The shipped per-tensor block format `name` applied by the block layer.
RowMatrix per_tensor(const std::string& name, const RowMatrix& x) {
  const block::BlockFormat& f = block::BlockRegistry::builtin().get(name);
  const std::size_t shape[2] = {static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols())};
  RowMatrix out(x.rows(), x.cols());
  block::quantize(f, std::span<const float>(x.data(), static_cast<std::size_t>(x.size())),
                  std::span<float>(out.data(), static_cast<std::size_t>(out.size())), shape);
  return out;
}

// Slow delayed scaling: S = fp32(a / max), each element fmt(x / S) saturated, times S.
RowMatrix delayed_reference(const RowMatrix& x, double a, const std::string& element) {
  const format::Format& e = format::Registry::builtin().get(element);
  const auto s = static_cast<double>(static_cast<float>(a / e.max_finite));
  format::ConvertOptions o;
  o.overflow = format::Overflow::saturate;
  RowMatrix out(x.rows(), x.cols());
  for (Eigen::Index i = 0; i < x.size(); ++i)
    out.data()[i] = static_cast<float>(format::quantize(e, static_cast<double>(x.data()[i]) / s, o) * s);
  return out;
}

using lpemu::test::same_bits;

}  // namespace

TEST_CASE("scaling and amax_history parse, round-trip and are checked", "[train][unit]") {
  const auto p = read(
      "[roles]\ngrad_output = { format = \"fp8_e5m2\", scaling = \"delayed\", amax_history = 4 }\n"
      "linear_input = { format = \"fp8_e4m3\", scaling = \"current\" }\nweights = \"fp8_e4m3\"\n");
  const auto go = p.resolve(engine::Role::grad_output, 0, engine::LayerKind::mlp, 2);
  REQUIRE(go);
  CHECK(go->scaling == engine::Scaling::delayed);
  CHECK(go->amax_history == 4);
  CHECK(p.resolve(engine::Role::linear_input, 0, engine::LayerKind::mlp, 2)->scaling ==
        engine::Scaling::current);
  CHECK(p.resolve(engine::Role::weights, 0, engine::LayerKind::mlp, 2)->scaling == engine::Scaling::none);
  CHECK(engine::parse_plan_toml(engine::to_toml(p), "again.toml", test::builtin_quantizers(),
                                test::builtin_gemms()) == p);
  CHECK(read("[roles]\ngrad_output = { format = \"fp8_e5m2\", scaling = \"delayed\" }\n")
            .resolve(engine::Role::grad_output, 0, engine::LayerKind::mlp, 2)
            ->amax_history == 16);
  CHECK_THROWS_WITH(read("[roles]\nweights = { format = \"nvfp4\", scaling = \"current\" }\n"),
                    Catch::Contains("weights.scaling") && Catch::Contains("its own scales"));
  CHECK_THROWS_WITH(read("[roles]\nweights = { format = \"fp8_e4m3\", amax_history = 4 }\n"),
                    Catch::Contains("amax_history") && Catch::Contains("delayed"));
  CHECK_THROWS_WITH(read("[roles]\nweights = { format = \"fp8_e4m3\", scaling = \"later\" }\n"),
                    Catch::Contains("current") && Catch::Contains("delayed"));
  CHECK_THROWS_WITH(
      read("[roles]\nweights = { format = \"fp8_e4m3\", scaling = \"delayed\", amax_history = 0 }\n"),
      Catch::Contains("amax_history"));
}

TEST_CASE("current scaling equals the per-tensor block format; delayed is refused outside training",
          "[train][unit]") {
  std::mt19937 g(5);
  for (const char* e : {"fp8_e4m3", "fp8_e5m2"}) {
    engine::QuantSpec spec;
    spec.format = e;
    spec.scaling = engine::Scaling::current;
    const auto q = test::builtin_quantizers().make(spec);
    REQUIRE(q->block_format() != nullptr);
    CHECK(q->block_format()->granularity == block::Granularity::per_tensor);
    for (const float scale : {1e-3F, 1.0F, 3e4F}) {
      RowMatrix x = random(g, 8, 40, scale);
      const RowMatrix want = per_tensor(std::string(e) + "_per_tensor", x);
      q->apply(x, engine::QuantPoint{});
      CHECK(same_bits(x, want));
    }
    spec.scaling = engine::Scaling::delayed;
    spec.origin = "plan.toml:3";
    CHECK_THROWS_WITH(test::builtin_quantizers().make(spec),
                      Catch::StartsWith("plan.toml:3: format '") && Catch::Contains("only training has"));
  }
}

TEST_CASE("delayed scaling takes the largest amax of the last amax_history steps of its point",
          "[train][unit]") {
  const engine::Config c = test::tiny_model("llama", "fp32", false).config;
  const LinearPlan lp(
      read("[roles]\ngrad_output = { format = \"fp8_e4m3\", scaling = \"delayed\", amax_history = 2 }\n"),
      test::builtin_quantizers(), test::builtin_gemms(), c);
  const LinearSite& s = lp.site(0, "w2");
  REQUIRE(s.delayed);
  std::mt19937 g(9);
  const float scales[] = {10.0F, 1.0F, 0.5F, 0.25F, 4.0F};
  std::vector<float> seen;
  for (std::uint64_t step = 0; step < 5; ++step) {
    const RowMatrix dy = random(g, 16, 32, scales[step]);
    RowMatrix a = dy;
    RowMatrix b = RowMatrix::Ones(4, 32);
    quantize_operands(s, GemmPass::dgrad, step, a, b);
    CHECK(b == RowMatrix::Ones(4, 32));  // weights are not quantised by this plan
    if (seen.empty()) {
      CHECK(same_bits(a, per_tensor("fp8_e4m3_per_tensor", dy)));  // no history yet: current scaling
    } else {
      // The largest amax of the last two earlier steps.
      const std::size_t from = seen.size() >= 2 ? seen.size() - 2 : 0;
      const double hist = *std::max_element(seen.begin() + static_cast<std::ptrdiff_t>(from), seen.end());
      CHECK(same_bits(a, delayed_reference(dy, hist, "fp8_e4m3")));
      if (step == 4) {
        // amax 4·σ-ish above the history's: the largest elements saturate at 448·S.
        CHECK(amax(a) == static_cast<float>(448.0 * static_cast<double>(static_cast<float>(hist / 448.0))));
        CHECK(amax(a) < amax(dy));
      }
    }
    // The same point quantised again at the same step (a recomputation) gives the same values.
    RowMatrix again = dy;
    quantize_operands(s, GemmPass::dgrad, step, again, b);
    CHECK(same_bits(a, again));
    seen.push_back(amax(dy));
  }
  // Each point keeps its own history: the wgrad operand of grad_output has seen nothing yet.
  const RowMatrix dyt = random(g, 32, 16, 2.0F);
  RowMatrix a = dyt;
  RowMatrix b = RowMatrix::Ones(4, 16);
  quantize_operands(s, GemmPass::wgrad, 7, a, b);
  CHECK(same_bits(a, per_tensor("fp8_e4m3_per_tensor", dyt)));
  // When the history's amax equals this tensor's, delayed equals current scaling bit for bit.
  RowMatrix twice = dyt;
  quantize_operands(s, GemmPass::wgrad, 8, twice, b);
  CHECK(same_bits(twice, per_tensor("fp8_e4m3_per_tensor", dyt)));
}

namespace {

// Transformer Engine's delayed-scaling update, transcribed from
// transformer_engine/common/recipe/delayed_scaling.cu (amax_and_scale_update): the history buffer
// of `length` entries holds at [0] the amax the latest cast recorded; the update reads the amax
// (the largest entry for "max", entry [0] for "most_recent"), then rolls the buffer by −1 and zeroes
// [0] for the next cast. The scale is fp8_max · 2^−margin / amax (applied as x · scale); lpemu
// writes it as S = fp32(amax · 2^margin / fp8_max) applied as x / S, so this returns the amax times
// 2^margin that lpemu's S is formed from.
struct TeHistory {
  std::vector<float> h;
  bool most_recent = false;
  int margin = 0;
  double update() {
    const float last = h[0];
    float m = 0;
    std::vector<float> rolled(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) {
      const float a = i + 1 < h.size() ? h[i + 1] : last;
      m = std::max(m, a);
      rolled[i] = i > 0 ? a : 0.0F;
    }
    h = rolled;
    return std::ldexp(static_cast<double>(most_recent ? last : m), margin);
  }
};

}  // namespace

TEST_CASE("delayed scaling's margin and amax_compute_algo follow Transformer Engine's update",
          "[train][unit]") {
  const engine::Config c = test::tiny_model("llama", "fp32", false).config;
  for (const bool most_recent : {false, true}) {
    for (const int margin : {0, 1, 3}) {
      CAPTURE(most_recent, margin);
      const std::string text =
          "[roles]\ngrad_output = { format = \"fp8_e4m3\", scaling = \"delayed\", "
          "amax_history = 3, margin = " +
          std::to_string(margin) + ", amax_compute_algo = \"" + (most_recent ? "most_recent" : "max") +
          "\" }\n";
      const LinearPlan lp(read(text), test::builtin_quantizers(), test::builtin_gemms(), c);
      const LinearSite& s = lp.site(1, "wq");
      TeHistory te{std::vector<float>(3, 0.0F), most_recent, margin};
      std::mt19937 g(11);
      const float scales[] = {8.0F, 1.0F, 0.5F, 2.0F, 0.25F, 3.0F, 0.1F};
      for (std::uint64_t step = 0; step < 7; ++step) {
        const RowMatrix dy = random(g, 12, 48, scales[step]);
        RowMatrix a = dy;
        RowMatrix b = RowMatrix::Ones(4, 48);
        quantize_operands(s, GemmPass::dgrad, step, a, b);
        if (step == 0) {
          CHECK(same_bits(a, per_tensor("fp8_e4m3_per_tensor", dy)));  // lpemu: current scaling first
        } else {
          CHECK(same_bits(a, delayed_reference(dy, te.update(), "fp8_e4m3")));
        }
        te.h[0] = amax(dy);  // the cast records its tensor's amax
      }
    }
  }
  // The keys parse, round-trip through the plan writer and are delayed-only.
  const engine::PrecisionPlan p = read(
      "[roles]\nweights = { format = \"fp8_e4m3\", scaling = \"delayed\", margin = 2, "
      "amax_compute_algo = \"most_recent\" }\n");
  const auto w = p.resolve(engine::Role::weights, 0, engine::LayerKind::mlp, 2);
  REQUIRE(w);
  CHECK(w->margin == 2);
  CHECK(w->amax_algo == engine::AmaxAlgo::most_recent);
  CHECK(read(engine::to_toml(p)).resolve(engine::Role::weights, 0, engine::LayerKind::mlp, 2) == w);
  CHECK_THROWS_WITH(read("[roles]\nweights = { format = \"fp8_e4m3\", scaling = \"current\", margin = 1 }\n"),
                    Catch::Contains("margin") && Catch::Contains("delayed"));
  CHECK_THROWS_WITH(read("[roles]\nweights = { format = \"fp8_e4m3\", scaling = \"delayed\", "
                         "amax_compute_algo = \"mean\" }\n"),
                    Catch::Contains("amax_compute_algo") && Catch::Contains("most_recent"));
  CHECK_THROWS_WITH(
      read("[roles]\nweights = { format = \"fp8_e4m3\", scaling = \"delayed\", margin = 40 }\n"),
      Catch::Contains("margin"));
}
