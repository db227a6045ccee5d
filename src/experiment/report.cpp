// The summary files of a sweep: results.h5 (everything), results.csv (one row per plan × metric),
// report.md (tables a person reads), report.html (the same as one self-contained page) and SVG
// figures. Built only from plan results, in plan order, so the same plan files always give the
// same summary. report.md is written by report_md.cpp, report.html by report_html.cpp and the
// figures are drawn by report_figures.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

#include "experiment/report_detail.hpp"
#include "experiment/sweep_detail.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/io/svg_plot.hpp"

namespace lpemu::experiment {
namespace report {

std::string num(double v, int digits) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

std::vector<std::size_t> ranked(const std::vector<PlanResult>& plans) {
  std::vector<std::size_t> order(plans.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return plans[a].eval.mean_kl < plans[b].eval.mean_kl;
  });
  return order;
}

bool has_cost(const std::vector<PlanResult>& plans) {
  return std::any_of(plans.begin(), plans.end(), [](const auto& p) { return !p.cost.target.empty(); });
}

std::vector<std::size_t> area_front(const std::vector<PlanResult>& plans) {
  std::vector<double> x, y;
  for (const auto& p : plans) {
    x.push_back(p.cost.mac_area_rel_bf16);
    y.push_back(p.eval.mean_kl);
  }
  return io::pareto_front(x, y);
}

std::string short_residual_name(const std::string& residual_name) {
  if (residual_name == "final_residual") return "final";
  const auto a = residual_name.find('/');
  const auto b = residual_name.find('/', a + 1);
  if (a == std::string::npos || b == std::string::npos) return residual_name;
  return "in " + residual_name.substr(a + 1, b - a - 1);
}

std::vector<Column> ranked_columns(const std::vector<PlanResult>& plans) {
  auto text = [](std::string h, std::string PlanResult::*field) {
    return Column{std::move(h), false, [field](const PlanResult& p, std::size_t, bool) { return p.*field; },
                  nullptr};
  };
  auto number = [](std::string h, std::function<double(const PlanResult&)> f, int digits, double scale = 1,
                   std::string unit = "") {
    return Column{std::move(h), true,
                  [f, digits, scale, unit](const PlanResult& p, std::size_t, bool) {
                    return num(scale * f(p), digits) + unit;
                  },
                  [f](const PlanResult& p, std::size_t) { return f(p); }};
  };
  std::vector<Column> c;
  c.push_back({"rank", true, [](const PlanResult&, std::size_t r, bool) { return std::to_string(r); },
               [](const PlanResult&, std::size_t r) { return static_cast<double>(r); }});
  c.push_back(text("plan", &PlanResult::label));
  c.push_back(text("weights", &PlanResult::weight_format));
  c.push_back(number(
      "bits/weight", [](const PlanResult& p) { return p.weight_bits; }, 4));
  c.push_back(text("GEMM", &PlanResult::gemm));
  c.push_back(number(
      "perplexity", [](const PlanResult& p) { return p.eval.perplexity; }, 6));
  c.push_back(number(
      "Δ perplexity", [](const PlanResult& p) { return p.eval.perplexity - p.eval.ref_perplexity; }, 4));
  c.push_back(number(
      "mean KL", [](const PlanResult& p) { return p.eval.mean_kl; }, 4));
  c.push_back(number(
      "max KL", [](const PlanResult& p) { return p.eval.max_kl; }, 4));
  c.push_back(number(
      "top-1 agree", [](const PlanResult& p) { return p.eval.top1_agreement; }, 4, 100, "%"));
  c.push_back(number(
      "logits SQNR (dB)", [](const PlanResult& p) { return p.eval.logits.sqnr_db; }, 4));
  if (has_cost(plans)) {
    c.push_back(number(
        "tokens/s", [](const PlanResult& p) { return p.cost.tokens_per_s; }, 5));
    c.push_back(number(
        "J/token", [](const PlanResult& p) { return p.cost.joules_per_token; }, 4));
    c.push_back(number(
        "MAC area vs bf16", [](const PlanResult& p) { return p.cost.mac_area_rel_bf16; }, 3));
    c.push_back({"Pareto", false,
                 [](const PlanResult&, std::size_t, bool on) { return std::string(on ? "★" : ""); },
                 nullptr});
  }
  if (std::any_of(plans.begin(), plans.end(), [](const auto& p) { return !p.cost.core.empty(); })) {
    c.push_back(number(
        "core cycles", [](const PlanResult& p) { return p.cost.core_cycles; }, 5));
    c.push_back(number(
        "core util", [](const PlanResult& p) { return p.cost.core_utilization; }, 3, 100, "%"));
    c.push_back(number(
        "core energy J", [](const PlanResult& p) { return p.cost.core_energy_j; }, 4));
  }
  const bool cluster =
      std::any_of(plans.begin(), plans.end(), [](const auto& p) { return !p.cost.cluster_system.empty(); });
  if (cluster) {
    c.push_back({"cluster parallel", false,
                 [](const PlanResult& p, std::size_t, bool) { return p.cost.cluster_parallel; }, nullptr});
    c.push_back(number(
        "cluster step s", [](const PlanResult& p) { return p.cost.cluster_step_s; }, 4));
    c.push_back(number(
        "cluster tokens/s", [](const PlanResult& p) { return p.cost.cluster_tokens_per_s; }, 5));
    c.push_back(number(
        "MFU", [](const PlanResult& p) { return p.cost.cluster_mfu; }, 3, 100, "%"));
    c.push_back(number(
        "GB/device", [](const PlanResult& p) { return p.cost.cluster_memory_gb; }, 4));
  }
  return c;
}

}  // namespace report

namespace {

namespace fs = std::filesystem;
using report::num;

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (const char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

}  // namespace

std::vector<std::pair<std::string, double>> plan_metrics(const PlanResult& r) {
  const auto& e = r.eval;
  std::vector<std::pair<std::string, double>> m = {
      {"perplexity", e.perplexity},
      {"ref_perplexity", e.ref_perplexity},
      {"delta_perplexity", e.perplexity - e.ref_perplexity},
      {"mean_nll", e.mean_nll},
      {"delta_nll", e.mean_nll - e.ref_mean_nll},
      {"mean_kl", e.mean_kl},
      {"max_kl", e.max_kl},
      {"top1_agreement", e.top1_agreement},
      {"logits_sqnr_db", e.logits.sqnr_db},
      {"weight_bits", r.weight_bits},
  };
  if (!r.cost.target.empty()) {
    m.emplace_back("cost_tokens_per_s", r.cost.tokens_per_s);
    m.emplace_back("cost_joules_per_token", r.cost.joules_per_token);
    m.emplace_back("cost_mac_area_rel_bf16", r.cost.mac_area_rel_bf16);
    m.emplace_back("cost_mac_energy_pj", r.cost.mac_energy_pj);
  }
  if (!r.cost.core.empty()) {
    m.emplace_back("core_cycles", r.cost.core_cycles);
    m.emplace_back("core_seconds", r.cost.core_seconds);
    m.emplace_back("core_utilization", r.cost.core_utilization);
    m.emplace_back("core_energy_j", r.cost.core_energy_j);
  }
  if (!r.cost.cluster_system.empty()) {
    m.emplace_back("cluster_step_s", r.cost.cluster_step_s);
    m.emplace_back("cluster_tokens_per_s", r.cost.cluster_tokens_per_s);
    m.emplace_back("cluster_mfu", r.cost.cluster_mfu);
    m.emplace_back("cluster_memory_gb", r.cost.cluster_memory_gb);
  }
  for (const auto& [name, s] : e.residual) m.emplace_back("residual_sqnr_db/" + name, s.sqnr_db);
  for (const auto& row : r.replay) {
    m.emplace_back("replay_output_sqnr_db/" +
                       (row.layer < 0 ? std::string("head") : "layers/" + std::to_string(row.layer)) + "/" +
                       row.tensor,
                   row.output_error.sqnr_db);
  }
  for (const auto& a : r.attribution) {
    m.emplace_back("attribution_mean_kl/" + a.role, a.mean_kl);
    m.emplace_back("attribution_delta_nll/" + a.role, a.delta_nll);
  }
  for (const auto& a : r.layer_attribution) {
    const std::string where = a.layer < 0 ? "head" : std::to_string(a.layer);
    m.emplace_back("layer_attribution_mean_kl/" + a.role + "/" + where, a.mean_kl);
  }
  return m;
}

namespace {

// results.h5: the experiment's attributes and every plan under /plans/NNNN.
void write_results_h5(const fs::path& file, const std::string& name, const std::string& model,
                      const std::string& fingerprint, const std::vector<PlanResult>& plans) {
  io::write_h5_atomic(file, io::OutputPolicy{true, {}}, false, [&](io::H5File& f) {
    f.set_attr("/", "experiment", name);
    f.set_attr("/", "model", model);
    f.set_attr("/", "fingerprint", fingerprint);
    f.set_attr("/", "n_plans", static_cast<std::int64_t>(plans.size()));
    for (const auto& p : plans) {
      char g[32];
      std::snprintf(g, sizeof g, "/plans/%04zu", p.index);
      write_plan_into(f, g, p, fingerprint);
    }
  });
}

// results.csv: one row per plan × metric.
void write_results_csv(const fs::path& file, const std::vector<PlanResult>& plans) {
  std::ostringstream out;
  out << "plan_index,plan,metric,value\n";
  for (const auto& p : plans) {
    for (const auto& [metric, value] : plan_metrics(p)) {
      out << p.index << ',' << csv_field(p.label) << ',' << metric << ',' << num(value, 9) << '\n';
    }
  }
  io::write_file_atomic(file, out.str(), io::OutputPolicy{true, {}});
}

// Every figure as an SVG file in `dir`; returns their paths in order.
std::vector<fs::path> write_figures(const fs::path& dir, const std::vector<report::NamedFigure>& figures) {
  std::vector<fs::path> paths;
  for (const auto& f : figures) {
    paths.push_back(dir / f.file);
    io::write_svg(paths.back(), f.figure);
  }
  return paths;
}

}  // namespace

SweepFiles write_report_files(const fs::path& dir, const std::string& name, const std::string& model,
                              const std::string& fingerprint, const std::vector<PlanResult>& plans) {
  SweepFiles files;
  files.dir = dir;
  files.results_h5 = dir / "results.h5";
  files.results_csv = dir / "results.csv";
  files.report_md = dir / "report.md";
  files.report_html = dir / "report.html";
  write_results_h5(files.results_h5, name, model, fingerprint, plans);
  write_results_csv(files.results_csv, plans);
  const auto figures = report::sweep_figures(plans);
  files.plots = write_figures(dir, figures);
  report::write_markdown(files.report_md, name, model, fingerprint, plans, figures);
  report::write_html(files.report_html, name, model, fingerprint, plans, figures);
  return files;
}

}  // namespace lpemu::experiment
