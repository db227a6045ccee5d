// Geometry of the figures the plotting module lays out: ticks at 1-2-5 steps or decades, no two
// text boxes overlapping, a distinct (colour, marker, dash) per series, nothing outside the
// canvas, and values a log axis cannot show named in a note instead of drawn.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <tuple>

#include "lpemu/error.hpp"
#include "lpemu/io/svg_plot.hpp"

namespace {

using lpemu::io::Box;
using lpemu::io::Figure;

// m in {1, 2, 5} with v = m·10^k for an integer k.
bool is_125(double v) {
  const double a = std::fabs(v);
  const double k = std::floor(std::log10(a) + 1e-9);
  const double m = a / std::pow(10.0, k);
  for (const double want : {1.0, 2.0, 5.0, 10.0}) {
    if (std::fabs(m - want) < 1e-6) return true;
  }
  return false;
}

std::string describe(const Box& b) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "[%.1f,%.1f]x[%.1f,%.1f]", b.x0, b.x1, b.y0, b.y1);
  return buf;
}

// The checks every laid-out figure must pass.
void check_geometry(const Figure& f) {
  REQUIRE(f.width > 0);
  REQUIRE(f.height > 0);
  const std::string size = "width=\"" + std::to_string(static_cast<long>(f.width)) + "\" height=\"" +
                           std::to_string(static_cast<long>(f.height)) + "\"";
  CHECK(f.svg.find(size) != std::string::npos);
  for (const auto* boxes : {&f.texts, &f.marks}) {
    for (const auto& b : *boxes) {
      INFO(describe(b) << " on a " << f.width << " x " << f.height << " canvas");
      CHECK(b.x0 >= 0);
      CHECK(b.y0 >= 0);
      CHECK(b.x1 <= f.width);
      CHECK(b.y1 <= f.height);
    }
  }
  for (std::size_t i = 0; i < f.texts.size(); ++i) {
    for (std::size_t j = i + 1; j < f.texts.size(); ++j) {
      INFO("text " << i << " " << describe(f.texts[i]) << " and text " << j << " " << describe(f.texts[j]));
      CHECK_FALSE(f.texts[i].overlaps(f.texts[j]));
    }
  }
  std::set<std::tuple<int, int, int>> styles;
  for (const auto& s : f.styles) styles.emplace(s.color, s.marker, s.dash);
  CHECK(styles.size() == f.styles.size());
  for (const auto* ticks : {&f.x_ticks, &f.y_ticks}) {
    const bool log = ticks == &f.x_ticks ? f.log_x : f.log_y;
    for (std::size_t i = 0; i < ticks->size(); ++i) {
      const double v = (*ticks)[i];
      INFO("tick " << v << (log ? " (log axis)" : ""));
      if (log) {
        CHECK(v > 0);
        CHECK(is_125(v));
      } else if (i > 0) {
        CHECK(is_125((*ticks)[i] - (*ticks)[i - 1]));
      }
    }
  }
}

// 16 plans in one band of a log axis, the reference at KL 0: the case the old plotter drew badly.
lpemu::io::Plot crowded_scatter() {
  lpemu::io::Plot p;
  p.title = "Accuracy loss vs MAC area";
  p.x_label = "MAC lane area relative to bf16 (×)";
  p.y_label = "mean KL (nats/token)";
  p.log_y = true;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int g = 0; g < 2; ++g) {
    lpemu::io::Series s;
    s.label = g ? "GEMM h100_e4m3_fp32" : "GEMM eigen";
    s.lines = false;
    for (int i = 0; i < 8; ++i) {
      s.x.push_back(0.2 + 0.1 * u(rng));
      s.y.push_back(std::pow(10.0, -3 - u(rng)));
      s.point_labels.push_back(std::to_string(g * 8 + i + 1));
    }
    p.series.push_back(s);
  }
  p.series[0].x.push_back(1.0);
  p.series[0].y.push_back(0.0);
  p.series[0].point_labels.push_back("fp32 reference");
  return p;
}

TEST_CASE("nice_ticks gives 1-2-5 steps on linear axes and decades or 1-2-5 on log axes",
          "[io][plot][unit]") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> e(-12, 12);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 2000; ++trial) {
    const double scale = std::pow(10.0, e(rng));
    double lo = (u(rng) - 0.5) * scale;
    double hi = lo + u(rng) * scale + 1e-9 * scale;
    INFO("linear [" << lo << ", " << hi << "]");
    const auto t = lpemu::io::nice_ticks(lo, hi, false);
    REQUIRE(t.size() >= 2);
    CHECK(t.size() <= 12);
    CHECK(t.front() <= lo);
    CHECK(t.back() >= hi);
    const double step = t[1] - t[0];
    CHECK(is_125(step));
    for (std::size_t i = 0; i < t.size(); ++i) CHECK(std::fabs(t[i] / step - std::round(t[i] / step)) < 1e-6);
    lo = std::pow(10.0, e(rng));
    hi = lo * std::pow(10.0, 14 * u(rng));
    INFO("log [" << lo << ", " << hi << "]");
    const auto g = lpemu::io::nice_ticks(lo, hi, true);
    REQUIRE(g.size() >= 2);
    CHECK(g.size() <= 12);
    CHECK(g.front() <= lo * (1 + 1e-12));
    CHECK(g.back() >= hi * (1 - 1e-12));
    for (const double v : g) CHECK(is_125(v));
    if (hi / lo >= 100) {  // two decades or more: decades only, a constant number apart
      const double d = std::log10(g[1] / g[0]);
      CHECK(is_125(d));
      for (std::size_t i = 1; i < g.size(); ++i) CHECK(std::fabs(std::log10(g[i] / g[i - 1]) - d) < 1e-9);
    }
  }
  CHECK_THROWS_AS(lpemu::io::nice_ticks(0, 1, true), lpemu::Error);
  CHECK_THROWS_AS(lpemu::io::nice_ticks(2, 1, false), lpemu::Error);
}

TEST_CASE("series styles are distinct (colour, marker, dash) triples", "[io][plot][unit]") {
  std::set<std::tuple<int, int, int>> all;
  std::set<std::pair<int, int>> colour_marker;
  for (std::size_t i = 0; i < 42; ++i) {
    const auto s = lpemu::io::series_style(i);
    all.emplace(s.color, s.marker, s.dash);
    colour_marker.emplace(s.color, s.marker);
  }
  CHECK(all.size() == 42);
  CHECK(colour_marker.size() == 42);
}

TEST_CASE("a crowded log scatter keeps labels apart, inside the canvas, and names the zero it cannot draw",
          "[io][plot][unit]") {
  const auto p = crowded_scatter();
  const Figure f = lpemu::io::layout(p);
  check_geometry(f);
  CHECK(f.log_y);
  CHECK(f.y_ticks.front() > 1e-6);  // the KL of 0 does not drag the axis down
  REQUIRE_FALSE(f.notes.empty());
  CHECK(f.notes.back().find("fp32 reference (y = 0)") != std::string::npos);
  // 16 drawn markers plus two legend markers: the y = 0 point has no marker.
  CHECK(f.marks.size() == 18);
  // Every label that was placed is text; the ones that were not are named in a note.
  std::size_t placed = 0;
  for (int i = 1; i <= 16; ++i)
    placed += f.svg.find(">" + std::to_string(i) + "</text>") != std::string::npos;
  bool note = false;
  for (const auto& n : f.notes) note |= n.find("Labels left off") != std::string::npos;
  CHECK((placed == 16 || note));
  CHECK(placed >= 12);
}

TEST_CASE("sixteen series and long names: legend inside the canvas, every series distinct",
          "[io][plot][unit]") {
  lpemu::io::Plot p;
  p.title = "Residual-stream SQNR per layer";
  p.x_label = "residual stream position";
  p.y_label = "SQNR (dB)";
  p.x_tick_labels = {"in 1", "in 2", "in 3", "in 4", "final"};
  for (int s = 0; s < 16; ++s) {
    lpemu::io::Series se;
    se.label = "mxfp8_e4m3+h100_e4m3_fp32 variant " + std::to_string(s);
    for (int i = 0; i < 5; ++i) {
      se.x.push_back(i);
      se.y.push_back(52.89 - 9.61 * i - 0.7 * s);
    }
    p.series.push_back(se);
  }
  const Figure f = lpemu::io::layout(p);
  check_geometry(f);
  CHECK(f.styles.size() == 16);
  CHECK(f.x_ticks.size() == 5);
}

TEST_CASE("render_svg draws one line per series, escapes text and leaves out points a log axis cannot show",
          "[io][plot][unit]") {
  lpemu::io::Plot plot;
  plot.title = "error vs K";
  plot.log_x = plot.log_y = true;
  lpemu::io::Series a;
  a.label = "h100<e4m3>";
  a.x = {16, 256, 4096};
  a.y = {1e-5, 1e-4, 0.0};
  lpemu::io::Series b;
  b.label = "ideal";
  b.x = {16, 256};
  b.y = {1e-8, 2e-8};
  plot.series = {a, b};
  const Figure f = lpemu::io::layout(plot);
  check_geometry(f);
  const std::string& svg = f.svg;
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("h100&lt;e4m3&gt;") != std::string::npos);
  const std::regex line_path(
      "<path d=\"M[^\"]*\" fill=\"none\" stroke=\"#[0-9A-Fa-f]{6}\" stroke-width=\"1.8\"");
  const auto series_paths =
      std::distance(std::sregex_iterator(svg.begin(), svg.end(), line_path), std::sregex_iterator());
  CHECK(series_paths == 2);
  CHECK(f.marks.size() == 4 + 2);  // 4 drawable points, 2 legend markers
  CHECK(f.notes.size() == 1);
  CHECK(f.svg == lpemu::io::render_svg(plot));
}

TEST_CASE("bar charts and heat maps pass the same geometry checks", "[io][plot][unit]") {
  lpemu::io::BarChart c;
  c.title = "decode cost per op";
  c.categories = {"embedding", "wq ×32", "attention ×32", "w1 ×32", "lm_head"};
  c.classes = {"memory only", "memory-bound", "memory-bound", "compute-bound", "memory-bound"};
  c.panels = {{"time (µs)", {1.5, 120, 900, 310, 40}, false},
              {"DRAM traffic (MB)", {2, 1100, 8200, 3000, 500}, false},
              {"energy (mJ)", {0.01, 0.3, 2.5, std::numeric_limits<double>::infinity(), std::nan("")}, true}};
  const Figure fb = lpemu::io::layout(c);
  check_geometry(fb);
  CHECK(fb.styles.size() == 3);
  CHECK(fb.marks.size() == 13 + 3);  // 13 finite bars (NaN: no bar, no note), 3 legend swatches
  REQUIRE(fb.notes.size() == 1);
  CHECK(fb.notes[0].find("w1 ×32") != std::string::npos);

  lpemu::io::HeatMap h;
  h.title = "attribution";
  h.rows = {"bf16", "mxfp4", "nvfp4+h100_e4m3_fp32"};
  h.cols = {"weights", "linear_input", "gemm"};
  h.values = {1e-6, 2e-6, std::nan(""), 0.3, 0.05, 0.0, 0.2, 0.04, 1e-3};
  h.value_label = "mean KL (nats/token)";
  h.log = true;
  const Figure fh = lpemu::io::layout(h);
  check_geometry(fh);
  CHECK(fh.log_y);
  CHECK(fh.notes.back().find("Grey cells") != std::string::npos);
  h.values.pop_back();
  CHECK_THROWS_AS(lpemu::io::layout(h), lpemu::Error);
}

TEST_CASE("pareto_front keeps exactly the points no other point beats on both axes", "[io][plot][unit]") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> x, y;
    for (int i = 0; i < 12; ++i) {
      x.push_back(std::round(10 * u(rng)));
      y.push_back(trial % 5 == 0 && i == 3 ? std::nan("") : u(rng));
    }
    for (const bool lower : {true, false}) {
      const auto f = lpemu::io::pareto_front(x, y, lower);
      std::set<std::size_t> got(f.begin(), f.end());
      for (std::size_t i = 0; i < x.size(); ++i) {
        bool dominated = !std::isfinite(y[i]);
        for (std::size_t j = 0; j < x.size() && !dominated; ++j) {
          if (j == i || !std::isfinite(y[j])) continue;
          const bool bx = lower ? x[j] <= x[i] : x[j] >= x[i];
          const bool strictly = (lower ? x[j] < x[i] : x[j] > x[i]) || y[j] < y[i] || (y[j] == y[i] && j < i);
          dominated = bx && y[j] <= y[i] && strictly;
        }
        INFO("point " << i << " (" << x[i] << ", " << y[i] << ")");
        CHECK(got.count(i) == (dominated ? 0u : 1u));
      }
      for (std::size_t k = 1; k < f.size(); ++k) CHECK(x[f[k - 1]] <= x[f[k]]);
    }
  }
}

}  // namespace
