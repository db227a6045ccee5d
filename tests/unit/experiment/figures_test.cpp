// The figures `lpemu cost --plot` and `lpemu datapath-error` draw: their data are the commands'
// own numbers (summed here from the ops independently) and their layout passes the plotter's
// geometry rules (no overlapping text, nothing off the canvas).
#include <cmath>
#include <string>

#include <catch2/catch.hpp>

#include "lpemu/cost/catalog.hpp"
#include "lpemu/experiment/figures.hpp"
#include "lpemu/format/registry.hpp"

namespace {

using namespace lpemu;

void check_layout(const io::Figure& f) {
  for (const auto& b : f.texts) {
    CHECK(b.x0 >= 0);
    CHECK(b.y0 >= 0);
    CHECK(b.x1 <= f.width);
    CHECK(b.y1 <= f.height);
  }
  for (std::size_t i = 0; i < f.texts.size(); ++i) {
    for (std::size_t j = i + 1; j < f.texts.size(); ++j) CHECK_FALSE(f.texts[i].overlaps(f.texts[j]));
  }
}

TEST_CASE("the cost breakdown chart shows each op's summed time, bytes and energy, coloured by bound",
          "[experiment][plot][unit]") {
  cost::Catalog catalog(format::Registry::builtin());
  const auto plan =
      cost::LayerwisePlan::uniform("p", "fp8_e4m3", "fp8_e4m3", "bf16", catalog.shape("llama3_8b").n_layers);
  for (const auto phase : {cost::Phase::prefill, cost::Phase::decode}) {
    cost::Workload w = cost::build_workload(catalog.shape("llama3_8b"), plan, catalog.target("h100_sxm"),
                                            catalog, phase, 8, 4096);
    cost::roofline(w, catalog.target("h100_sxm"));
    const io::BarChart c = experiment::cost_breakdown_chart(w, "t");
    REQUIRE(c.categories.size() == w.ops.size());
    REQUIRE(c.panels.size() == 3);
    for (std::size_t i = 0; i < w.ops.size(); ++i) {
      const auto& op = w.ops[i];
      const auto n = static_cast<double>(op.count);
      INFO(op.name);
      CHECK(c.panels[0].values[i] == Approx(n * op.time_s * 1e6).epsilon(1e-12));
      CHECK(c.panels[1].values[i] == Approx(n * op.bytes / 1e6).epsilon(1e-12));
      CHECK(c.panels[2].values[i] == Approx(n * op.energy_j * 1e3).epsilon(1e-12));
      CHECK(c.classes[i] == (op.kind == "memory" ? "memory only"
                             : op.compute_bound  ? "compute-bound"
                                                 : "memory-bound"));
      CHECK(c.categories[i].rfind(op.name, 0) == 0);
    }
    check_layout(io::layout(c));
  }
}

TEST_CASE("the datapath error plot has one log-log series per datapath", "[experiment][plot][unit]") {
  const io::Plot p = experiment::datapath_error_plot({"a", "b"}, {16, 256, 4096},
                                                     {{1e-5, 1e-4, 1e-3}, {0, 2e-8, 3e-8}}, "normal");
  REQUIRE(p.series.size() == 2);
  CHECK(p.log_x);
  CHECK(p.log_y);
  CHECK(p.series[1].x == std::vector<double>{16, 256, 4096});
  CHECK(p.series[1].y == std::vector<double>{0, 2e-8, 3e-8});
  const io::Figure f = io::layout(p);
  check_layout(f);
  REQUIRE(f.notes.size() == 1);
  CHECK(f.notes[0].find("b at x = 16 (y = 0)") != std::string::npos);
}

TEST_CASE("the layer attribution heat map puts each value in its layer's row and point's column",
          "[experiment][plot][unit]") {
  experiment::PlanResult p;
  p.label = "mxfp4+b200_mxfp4_fp32";
  p.eval.mean_kl = 0.165;
  const std::vector<std::string> points = {"weights", "linear_input", "q", "kv_cache", "probs"};
  // Stored head first and blocks out of order: rows come out as blocks 0..4, then the LM head.
  p.layer_attribution.push_back({"lm_head", -1, 1.5e-5, 0});
  for (int l = 4; l >= 0; --l) {
    for (std::size_t j = 0; j < points.size(); ++j) {
      p.layer_attribution.push_back(
          {points[j], l, std::pow(10.0, -1.0 - static_cast<double>(j)) * (l + 1), 0});
    }
  }
  const io::HeatMap hm = experiment::layer_attribution_heatmap(p);
  REQUIRE(hm.rows ==
          std::vector<std::string>{"block 0", "block 1", "block 2", "block 3", "block 4", "LM head"});
  REQUIRE(hm.cols ==
          std::vector<std::string>{"lm_head", "weights", "linear_input", "q", "kv_cache", "probs"});
  REQUIRE(hm.values.size() == 36);
  CHECK(hm.log);
  CHECK(hm.values[2 * 6 + 3] == Approx(1e-3 * 3));  // block 2, q
  CHECK(hm.values[5 * 6 + 0] == 1.5e-5);            // LM head, lm_head
  CHECK(std::isnan(hm.values[5 * 6 + 1]));          // the head has no block weights
  CHECK(std::isnan(hm.values[0 * 6 + 0]));          // block 0 has no lm_head
  const io::Figure f = io::layout(hm);
  check_layout(f);
  // 30 coloured cells + 6 grey ones, then the colour bar; cells inside the canvas.
  REQUIRE(f.marks.size() == 37);
  for (const auto& b : f.marks) {
    CHECK(b.x0 >= 0);
    CHECK(b.x1 <= f.width);
    CHECK(b.y1 <= f.height);
  }
  // The colour scale: a log axis with decade ticks spanning the values drawn.
  CHECK(f.log_y);
  REQUIRE(f.y_ticks.size() >= 2);
  for (const double t : f.y_ticks) CHECK(std::fabs(std::log10(t) - std::round(std::log10(t))) < 1e-9);
  CHECK(f.y_ticks.front() <= 1e-5 * 1.0001);
  CHECK(f.y_ticks.back() >= 0.5 * 0.9999);
  CHECK_THAT(f.svg, Catch::Contains("mean KL (nats/token)"));

  const io::BarChart bars = experiment::layer_attribution_bars(p);
  REQUIRE(bars.categories == hm.rows);
  REQUIRE(bars.panels.size() == hm.cols.size());
  for (std::size_t j = 0; j < bars.panels.size(); ++j) {
    for (std::size_t i = 0; i < hm.rows.size(); ++i) {
      const double want = hm.values[i * hm.cols.size() + j];
      const double got = bars.panels[j].values[i];
      CHECK((got == want || (std::isnan(got) && std::isnan(want))));
    }
  }
  check_layout(io::layout(bars));
}

}  // namespace
