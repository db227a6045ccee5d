// The summary files of a sweep: results.h5 (everything), results.csv (one row per plan × metric),
// report.md (tables a person reads) and SVG plots. Built only from plan results, in plan order,
// so the same plan files always give the same summary.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>

#include "experiment/sweep_detail.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/io/svg_plot.hpp"

namespace lpemu::experiment {
namespace {

namespace fs = std::filesystem;

std::string num(double v, int digits = 6) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

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
  for (const auto& [name, s] : e.residual) m.emplace_back("residual_sqnr_db/" + name, s.sqnr_db);
  for (const auto& row : r.replay) {
    m.emplace_back("replay_output_sqnr_db/" + (row.layer < 0 ? std::string("head") : "layers/" + std::to_string(row.layer)) +
                       "/" + row.tensor,
                   row.output_error.sqnr_db);
  }
  for (const auto& a : r.attribution) {
    m.emplace_back("attribution_mean_kl/" + a.role, a.mean_kl);
    m.emplace_back("attribution_delta_nll/" + a.role, a.delta_nll);
  }
  return m;
}

std::vector<std::size_t> ranked(const std::vector<PlanResult>& plans) {
  std::vector<std::size_t> order(plans.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return plans[a].eval.mean_kl < plans[b].eval.mean_kl;
  });
  return order;
}

std::string short_name(const std::string& residual_name) {
  // "layers/3/residual_input" -> "after block 2"; "final_residual" -> "final"
  if (residual_name == "final_residual") return "final";
  const auto a = residual_name.find('/');
  const auto b = residual_name.find('/', a + 1);
  if (a == std::string::npos || b == std::string::npos) return residual_name;
  return "in " + residual_name.substr(a + 1, b - a - 1);
}

// Indices of the plans no other plan beats on both cost (x) and loss (y): sorted by cost, each
// has a lower loss than every cheaper one. Plans with a NaN are left out.
std::vector<std::size_t> pareto_front(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<std::size_t> idx;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isfinite(x[i]) && !std::isnan(y[i])) idx.push_back(i);
  }
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
    return x[a] < x[b] || (x[a] == x[b] && y[a] < y[b]);
  });
  std::vector<std::size_t> front;
  double best = std::numeric_limits<double>::infinity();
  for (const auto i : idx) {
    if (y[i] < best) {
      front.push_back(i);
      best = y[i];
    }
  }
  return front;
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

  // Plots.
  {
    io::Plot pl;
    pl.title = "Residual-stream SQNR per layer";
    pl.x_label = "residual stream position";
    pl.y_label = "SQNR vs reference (dB)";
    for (const auto& p : plans) {
      if (p.eval.residual.empty()) continue;
      io::Series s;
      s.label = p.label;
      for (std::size_t i = 0; i < p.eval.residual.size(); ++i) {
        s.x.push_back(static_cast<double>(i));
        s.y.push_back(p.eval.residual[i].second.sqnr_db);
        if (&p == &plans.front() || pl.x_tick_labels.size() < p.eval.residual.size()) {
          if (pl.x_tick_labels.size() <= i) pl.x_tick_labels.push_back(short_name(p.eval.residual[i].first));
        }
      }
      if (std::any_of(s.y.begin(), s.y.end(), [](double v) { return std::isfinite(v); })) pl.series.push_back(s);
    }
    files.plots.push_back(dir / "residual_sqnr.svg");
    io::write_svg(files.plots.back(), pl);
  }
  {
    io::Plot pl;
    pl.title = "Accuracy loss vs bits per weight";
    pl.x_label = "bits per weight element (scale overhead included)";
    pl.y_label = "mean KL(reference || plan) (nats)";
    pl.log_y = true;
    io::Series s;
    s.label = "plans";
    s.lines = false;
    for (const auto& p : plans) {
      s.x.push_back(p.weight_bits);
      s.y.push_back(p.eval.mean_kl > 0 ? p.eval.mean_kl : 1e-12);
      s.point_labels.push_back(p.label);
    }
    pl.series.push_back(s);
    files.plots.push_back(dir / "kl_vs_bits.svg");
    io::write_svg(files.plots.back(), pl);
  }
  const bool has_cost = std::any_of(plans.begin(), plans.end(), [](const auto& p) { return !p.cost.target.empty(); });
  std::vector<std::size_t> front;
  if (has_cost) {
    std::vector<double> x, y;
    for (const auto& p : plans) {
      x.push_back(p.cost.mac_area_rel_bf16);
      y.push_back(p.eval.mean_kl);
    }
    front = pareto_front(x, y);
    io::Plot pl;
    pl.title = "Accuracy loss vs MAC cost (" + plans.front().cost.target + ")";
    pl.x_label = "MAC lane area relative to a bf16 MAC on the same datapath";
    pl.y_label = "mean KL(reference || plan) (nats)";
    pl.log_y = true;
    io::Series all;
    all.label = "plans";
    all.lines = false;
    for (std::size_t i = 0; i < plans.size(); ++i) {
      all.x.push_back(x[i]);
      all.y.push_back(std::max(y[i], 1e-12));
      all.point_labels.push_back(plans[i].label);
    }
    io::Series pf;
    pf.label = "Pareto front";
    for (const auto i : front) {
      pf.x.push_back(x[i]);
      pf.y.push_back(std::max(y[i], 1e-12));
    }
    pl.series = {all, pf};
    files.plots.push_back(dir / "kl_vs_cost.svg");
    io::write_svg(files.plots.back(), pl);
  }

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
  md << "| rank | plan | weights | bits/weight | GEMM | perplexity | Δ perplexity | mean KL | max KL | top-1 agree | logits SQNR (dB) |"
     << (has_cost ? " tokens/s | J/token | MAC area vs bf16 | Pareto |" : "") << "\n";
  md << "|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|" << (has_cost ? "---:|---:|---:|:---:|" : "") << "\n";
  const auto order = ranked(plans);
  for (std::size_t k = 0; k < order.size(); ++k) {
    const auto& p = plans[order[k]];
    const auto& e = p.eval;
    md << "| " << k + 1 << " | " << p.label << " | " << p.weight_format << " | " << num(p.weight_bits, 4) << " | "
       << p.gemm << " | " << num(e.perplexity, 6) << " | " << num(e.perplexity - e.ref_perplexity, 4) << " | "
       << num(e.mean_kl, 4) << " | " << num(e.max_kl, 4) << " | " << pct(e.top1_agreement) << " | "
       << num(e.logits.sqnr_db, 4) << " |";
    if (has_cost) {
      const bool on_front = std::find(front.begin(), front.end(), order[k]) != front.end();
      md << ' ' << num(p.cost.tokens_per_s, 5) << " | " << num(p.cost.joules_per_token, 4) << " | "
         << num(p.cost.mac_area_rel_bf16, 3) << " | " << (on_front ? "★" : "") << " |";
    }
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
  }
  if (!plans.empty() && !plans.front().eval.residual.empty()) {
    md << "\n## Residual-stream SQNR per layer (dB)\n\n| plan |";
    for (const auto& [n, s] : plans.front().eval.residual) md << ' ' << short_name(n) << " |";
    md << "\n|---|";
    for (std::size_t i = 0; i < plans.front().eval.residual.size(); ++i) md << "---:|";
    md << "\n";
    for (const auto i : order) {
      md << "| " << plans[i].label << " |";
      for (const auto& [n, s] : plans[i].eval.residual) md << ' ' << num(s.sqnr_db, 4) << " |";
      md << "\n";
    }
  }
  const bool any_attr = std::any_of(plans.begin(), plans.end(), [](const auto& p) { return !p.attribution.empty(); });
  if (any_attr) {
    md << "\n## Most damaging quantisation points (one point quantised at a time)\n\n";
    md << "| plan | point | format | mean KL alone | Δ NLL alone | share of the plan's KL |\n|---|---|---|---:|---:|---:|\n";
    for (const auto i : order) {
      auto a = plans[i].attribution;
      std::stable_sort(a.begin(), a.end(), [](const auto& x, const auto& y) { return x.mean_kl > y.mean_kl; });
      for (std::size_t k = 0; k < a.size() && k < 3; ++k) {
        const double share = plans[i].eval.mean_kl > 0 ? a[k].mean_kl / plans[i].eval.mean_kl : 0.0;
        md << "| " << plans[i].label << " | " << a[k].role << " | " << a[k].format << " | " << num(a[k].mean_kl, 4)
           << " | " << num(a[k].delta_nll, 4) << " | " << pct(share) << " |\n";
      }
    }
  }
  const bool any_replay = std::any_of(plans.begin(), plans.end(), [](const auto& p) { return !p.replay.empty(); });
  if (any_replay) {
    struct Worst {
      std::string plan, where;
      double sqnr;
    };
    std::vector<Worst> worst;
    for (const auto& p : plans) {
      for (const auto& r : p.replay) {
        if (std::isfinite(r.output_error.sqnr_db)) {
          worst.push_back({p.label, (r.layer < 0 ? std::string("head") : "layer " + std::to_string(r.layer)) + " " + r.tensor,
                           r.output_error.sqnr_db});
        }
      }
    }
    std::stable_sort(worst.begin(), worst.end(), [](const auto& a, const auto& b) { return a.sqnr < b.sqnr; });
    md << "\n## Linear layers with the lowest output SQNR on recorded activations\n\n";
    md << "| plan | layer | output SQNR (dB) |\n|---|---|---:|\n";
    for (std::size_t k = 0; k < worst.size() && k < 10; ++k) {
      md << "| " << worst[k].plan << " | " << worst[k].where << " | " << num(worst[k].sqnr, 4) << " |\n";
    }
  }
  md << "\n## Files\n\n- `results.h5`: everything (per-token NLL and KL, per-layer errors, replay, attribution)\n"
        "- `results.csv`: one row per plan × metric\n- `residual_sqnr.svg`: error per layer per plan\n"
        "- `kl_vs_bits.svg`: accuracy loss vs bits per weight\n"
        "- `kl_vs_cost.svg`: accuracy loss vs MAC cost, Pareto front marked (experiments with [cost])\n- `plans/NNNN.h5`: one file per plan (resume, merge)\n";
  md << "\n![residual SQNR](residual_sqnr.svg)\n\n![KL vs bits](kl_vs_bits.svg)\n";
  if (has_cost) md << "\n![KL vs cost](kl_vs_cost.svg)\n";
  io::write_file_atomic(files.report_md, md.str(), io::OutputPolicy{true, {}});
  return files;
}

}  // namespace lpemu::experiment
