// The summary files of a sweep: results.h5 (everything), results.csv (one row per plan × metric),
// report.md (tables a person reads), report.html (the same as one self-contained page) and SVG
// figures. Built only from plan results, in plan order, so the same plan files always give the
// same summary.
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

std::string pct(double v) { return num(100.0 * v, 4) + "%"; }

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (const char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

// (metric, value) pairs of one plan, in a fixed order.
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

}  // namespace

SweepFiles write_report_files(const fs::path& dir, const std::string& name, const std::string& model,
                              const std::string& fingerprint, const std::vector<PlanResult>& plans) {
  SweepFiles files;
  files.dir = dir;
  files.results_h5 = dir / "results.h5";
  files.results_csv = dir / "results.csv";
  files.report_md = dir / "report.md";

  // results.h5
  io::write_h5_atomic(files.results_h5, io::OutputPolicy{true, {}}, false, [&](io::H5File& f) {
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

  // results.csv
  {
    std::ostringstream out;
    out << "plan_index,plan,metric,value\n";
    for (const auto& p : plans) {
      for (const auto& [metric, value] : plan_metrics(p)) {
        out << p.index << ',' << csv_field(p.label) << ',' << metric << ',' << num(value, 9) << '\n';
      }
    }
    io::write_file_atomic(files.results_csv, out.str(), io::OutputPolicy{true, {}});
  }

  // Figures.
  const auto figures = report::sweep_figures(plans);
  for (const auto& f : figures) {
    files.plots.push_back(dir / f.file);
    io::write_svg(files.plots.back(), f.figure);
  }
  const bool has_cost = report::has_cost(plans);
  const auto front = has_cost ? report::area_front(plans) : std::vector<std::size_t>{};

  // report.md
  std::ostringstream md;
  md << "# Sweep report: " << name << "\n\n";
  md << "Model `" << model << "`, " << plans.size() << " plans";
  if (!plans.empty()) {
    md << ", " << plans.front().eval.tokens.size() << " tokens scored; reference perplexity "
       << num(plans.front().eval.ref_perplexity, 6);
  }
  md << ". Experiment fingerprint `" << fingerprint.substr(0, 16) << "`.\n\n";
  md << "## Plans ranked by mean KL divergence from the reference\n\n";
  const auto columns = report::ranked_columns(plans);
  md << "|";
  for (const auto& c : columns) md << ' ' << c.header << " |";
  md << "\n|";
  for (const auto& c : columns) md << (c.numeric ? "---:|" : "---|");
  md << "\n";
  const auto order = report::ranked(plans);
  for (std::size_t k = 0; k < order.size(); ++k) {
    const bool on_front = std::find(front.begin(), front.end(), order[k]) != front.end();
    md << "|";
    for (const auto& c : columns) md << ' ' << c.cell(plans[order[k]], k + 1, on_front) << " |";
    md << "\n";
  }
  if (has_cost) {
    const auto& c = plans.front().cost;
    md << "\nCost columns: lpemu's cost model (README \"Cost model\") on target `" << c.target
       << "`; tokens/s and J/token from the roofline of the priced workload, MAC area from the MAC model "
          "(45 nm Horowitz constants: compare plans, not absolute values). ★ marks the Pareto front of "
          "mean KL against MAC area.\n";
    for (const auto& p : plans) {
      if (!p.cost.note.empty()) md << "- " << p.label << ": not priced: " << p.cost.note << "\n";
    }
    if (!c.cluster_system.empty()) {
      md << "\nCluster columns: each plan priced on system `" << c.cluster_system
         << "` by the cluster-level model (README \"Cluster level\"), as `lpemu cost --system` prices the "
            "plan file "
            "`plans/NNNN.toml`: step time, tokens/s of the whole job, MFU (training) and memory per "
            "device.\n";
      for (const auto& p : plans) {
        if (!p.cost.cluster_note.empty())
          md << "- " << p.label << ": cluster: " << p.cost.cluster_note << "\n";
      }
    }
    md << "\n## What each plan computes, and the datapath priced\n\n"
          "How to read this: the GEMM column is the datapath the blocks' linear layers run on in the "
          "accuracy run (`eigen` = fp32 accumulation); the cost model prices every GEMM of every layer "
          "(first/last blocks and the LM head included) on the datapath record that runs it, the plan's or "
          "else the target's for the operands' rate class. Each entry is \"A x B on datapath (share of "
          "the MACs)\"; bits/weight is the parameter-weighted mean over the quantised weights of the "
          "priced shape.\n\n| plan | operands computed (A x B on datapath, share of MACs) |\n|---|---|\n";
    for (const auto& p : plans) {
      md << "| " << p.label << " | " << (p.cost.computed.empty() ? "(not priced)" : p.cost.computed)
         << " |\n";
    }
  }
  if (!plans.empty() && !plans.front().eval.residual.empty()) {
    md << "\n## Residual-stream SQNR per layer (dB)\n\n| plan |";
    for (const auto& [n, s] : plans.front().eval.residual)
      md << ' ' << report::short_residual_name(n) << " |";
    md << "\n|---|";
    for (std::size_t i = 0; i < plans.front().eval.residual.size(); ++i) md << "---:|";
    md << "\n";
    for (const auto i : order) {
      md << "| " << plans[i].label << " |";
      for (const auto& [n, s] : plans[i].eval.residual) md << ' ' << num(s.sqnr_db, 4) << " |";
      md << "\n";
    }
  }
  const bool any_attr =
      std::any_of(plans.begin(), plans.end(), [](const auto& p) { return !p.attribution.empty(); });
  if (any_attr) {
    md << "\n## Most damaging quantisation points (one point quantised at a time)\n\n";
    md << "| plan | point | format | mean KL alone | Δ NLL alone | share of the plan's KL "
          "|\n|---|---|---|---:|---:|---:|\n";
    for (const auto i : order) {
      auto a = plans[i].attribution;
      std::stable_sort(a.begin(), a.end(),
                       [](const auto& x, const auto& y) { return x.mean_kl > y.mean_kl; });
      for (std::size_t k = 0; k < a.size() && k < 3; ++k) {
        const double share = plans[i].eval.mean_kl > 0 ? a[k].mean_kl / plans[i].eval.mean_kl : 0.0;
        md << "| " << plans[i].label << " | " << a[k].role << " | " << a[k].format << " | "
           << num(a[k].mean_kl, 4) << " | " << num(a[k].delta_nll, 4) << " | " << pct(share) << " |\n";
      }
    }
  }
  const bool any_replay =
      std::any_of(plans.begin(), plans.end(), [](const auto& p) { return !p.replay.empty(); });
  if (any_replay) {
    struct Worst {
      std::string plan, where;
      double sqnr;
    };
    std::vector<Worst> worst;
    for (const auto& p : plans) {
      for (const auto& r : p.replay) {
        if (std::isfinite(r.output_error.sqnr_db)) {
          worst.push_back(
              {p.label,
               (r.layer < 0 ? std::string("head") : "layer " + std::to_string(r.layer)) + " " + r.tensor,
               r.output_error.sqnr_db});
        }
      }
    }
    std::stable_sort(worst.begin(), worst.end(),
                     [](const auto& a, const auto& b) { return a.sqnr < b.sqnr; });
    md << "\n## Linear layers with the lowest output SQNR on recorded activations\n\n";
    md << "| plan | layer | output SQNR (dB) |\n|---|---|---:|\n";
    for (std::size_t k = 0; k < worst.size() && k < 10; ++k) {
      md << "| " << worst[k].plan << " | " << worst[k].where << " | " << num(worst[k].sqnr, 4) << " |\n";
    }
  }
  md << "\n## Figures\n\n";
  for (const auto& f : figures) {
    if (f.group.empty())
      md << "### " << f.caption << "\n\n"
         << f.how_to_read << "\n\n![" << f.caption << "](" << f.file << ")\n\n";
  }
  std::vector<std::string> groups;
  for (const auto& f : figures) {
    if (!f.group.empty() && std::find(groups.begin(), groups.end(), f.group) == groups.end())
      groups.push_back(f.group);
  }
  for (const auto& g : groups) {
    md << "### Per plan: " << g << "\n\n";
    bool first = true;
    for (const auto& f : figures) {
      if (f.group != g) continue;
      if (first) md << f.how_to_read << "\n\n";
      first = false;
      md << "- [" << f.caption << "](" << f.file << ")\n";
    }
    md << "\n";
  }
  md << "## Files\n\n- `report.html`: this report as one self-contained page (sortable table, every figure)\n"
        "- `results.h5`: everything (per-token NLL and KL, per-layer errors, replay, attribution)\n"
        "- `results.csv`: one row per plan × metric\n- `*.svg`: the figures above\n"
        "- `plans/NNNN.h5`: one file per plan (resume, merge)\n";
  io::write_file_atomic(files.report_md, md.str(), io::OutputPolicy{true, {}});
  files.report_html = dir / "report.html";
  report::write_html(files.report_html, name, model, fingerprint, plans, figures);
  return files;
}

}  // namespace lpemu::experiment
