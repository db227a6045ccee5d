// report.md: the sweep's tables a person reads, one function per section, in the order shown.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "experiment/report_detail.hpp"
#include "lpemu/io/output.hpp"

namespace lpemu::experiment::report {
namespace {

std::string pct(double v) { return num(100.0 * v, 4) + "%"; }

// Title, what was scored, and the plans ranked by mean KL (★ on the area front when priced).
void ranked_section(std::ostream& md, const std::string& name, const std::string& model,
                    const std::string& fingerprint, const std::vector<PlanResult>& plans,
                    const std::vector<std::size_t>& order, const std::vector<std::size_t>& front) {
  md << "# Sweep report: " << name << "\n\n";
  md << "Model `" << model << "`, " << plans.size() << " plans";
  if (!plans.empty()) {
    md << ", " << plans.front().eval.tokens.size() << " tokens scored; reference perplexity "
       << num(plans.front().eval.ref_perplexity, 6);
  }
  md << ". Experiment fingerprint `" << fingerprint.substr(0, 16) << "`.\n\n";
  md << "## Plans ranked by mean KL divergence from the reference\n\n";
  const auto columns = ranked_columns(plans);
  md << "|";
  for (const auto& c : columns) md << ' ' << c.header << " |";
  md << "\n|";
  for (const auto& c : columns) md << (c.numeric ? "---:|" : "---|");
  md << "\n";
  for (std::size_t k = 0; k < order.size(); ++k) {
    const bool on_front = std::find(front.begin(), front.end(), order[k]) != front.end();
    md << "|";
    for (const auto& c : columns) md << ' ' << c.cell(plans[order[k]], k + 1, on_front) << " |";
    md << "\n";
  }
}

// How the cost columns were priced, and what each plan computes on which datapath.
void cost_section(std::ostream& md, const std::vector<PlanResult>& plans) {
  const auto& c = plans.front().cost;
  md << "\nCost columns: lpemu's cost model (docs/cost-and-systems.md) on target `" << c.target
     << "`; tokens/s and J/token from the roofline of the priced workload, MAC area from the MAC model "
        "(45 nm Horowitz constants: compare plans, not absolute values). ★ marks the Pareto front of "
        "mean KL against MAC area.\n";
  for (const auto& p : plans) {
    if (!p.cost.note.empty()) md << "- " << p.label << ": not priced: " << p.cost.note << "\n";
  }
  if (!c.cluster_system.empty()) {
    md << "\nCluster columns: each plan priced on system `" << c.cluster_system
       << "` by the cluster-level model (docs/cost-and-systems.md), as `lpemu cost --system` prices the "
          "plan file "
          "`plans/NNNN.toml`: step time, tokens/s of the whole job, MFU (training) and memory per "
          "device.\n";
    for (const auto& p : plans) {
      if (!p.cost.cluster_note.empty()) md << "- " << p.label << ": cluster: " << p.cost.cluster_note << "\n";
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
    md << "| " << p.label << " | " << (p.cost.computed.empty() ? "(not priced)" : p.cost.computed) << " |\n";
  }
}

// Residual-stream SQNR per layer, plans in ranked order.
void residual_section(std::ostream& md, const std::vector<PlanResult>& plans,
                      const std::vector<std::size_t>& order) {
  md << "\n## Residual-stream SQNR per layer (dB)\n\n| plan |";
  for (const auto& [n, s] : plans.front().eval.residual) md << ' ' << short_residual_name(n) << " |";
  md << "\n|---|";
  for (std::size_t i = 0; i < plans.front().eval.residual.size(); ++i) md << "---:|";
  md << "\n";
  for (const auto i : order) {
    md << "| " << plans[i].label << " |";
    for (const auto& [n, s] : plans[i].eval.residual) md << ' ' << num(s.sqnr_db, 4) << " |";
    md << "\n";
  }
}

// The three quantisation points of each plan that cost the most KL alone.
void attribution_section(std::ostream& md, const std::vector<PlanResult>& plans,
                         const std::vector<std::size_t>& order) {
  md << "\n## Most damaging quantisation points (one point quantised at a time)\n\n";
  md << "| plan | point | format | mean KL alone | Δ NLL alone | share of the plan's KL "
        "|\n|---|---|---|---:|---:|---:|\n";
  for (const auto i : order) {
    auto a = plans[i].attribution;
    std::stable_sort(a.begin(), a.end(), [](const auto& x, const auto& y) { return x.mean_kl > y.mean_kl; });
    for (std::size_t k = 0; k < a.size() && k < 3; ++k) {
      const double share = plans[i].eval.mean_kl > 0 ? a[k].mean_kl / plans[i].eval.mean_kl : 0.0;
      md << "| " << plans[i].label << " | " << a[k].role << " | " << a[k].format << " | "
         << num(a[k].mean_kl, 4) << " | " << num(a[k].delta_nll, 4) << " | " << pct(share) << " |\n";
    }
  }
}

// The ten replayed linear layers with the lowest finite output SQNR over all plans.
void replay_section(std::ostream& md, const std::vector<PlanResult>& plans) {
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
  std::stable_sort(worst.begin(), worst.end(), [](const auto& a, const auto& b) { return a.sqnr < b.sqnr; });
  md << "\n## Linear layers with the lowest output SQNR on recorded activations\n\n";
  md << "| plan | layer | output SQNR (dB) |\n|---|---|---:|\n";
  for (std::size_t k = 0; k < worst.size() && k < 10; ++k) {
    md << "| " << worst[k].plan << " | " << worst[k].where << " | " << num(worst[k].sqnr, 4) << " |\n";
  }
}

// The main figures inline, then each per-plan group as a list of links.
void figures_section(std::ostream& md, const std::vector<NamedFigure>& figures) {
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
}

}  // namespace

void write_markdown(const std::filesystem::path& file, const std::string& name, const std::string& model,
                    const std::string& fingerprint, const std::vector<PlanResult>& plans,
                    const std::vector<NamedFigure>& figures) {
  const bool priced = has_cost(plans);
  const auto front = priced ? area_front(plans) : std::vector<std::size_t>{};
  const auto order = ranked(plans);
  std::ostringstream md;
  ranked_section(md, name, model, fingerprint, plans, order, front);
  if (priced) cost_section(md, plans);
  if (!plans.empty() && !plans.front().eval.residual.empty()) residual_section(md, plans, order);
  if (std::any_of(plans.begin(), plans.end(), [](const auto& p) { return !p.attribution.empty(); }))
    attribution_section(md, plans, order);
  if (std::any_of(plans.begin(), plans.end(), [](const auto& p) { return !p.replay.empty(); }))
    replay_section(md, plans);
  figures_section(md, figures);
  md << "## Files\n\n- `report.html`: this report as one self-contained page (sortable table, every figure)\n"
        "- `results.h5`: everything (per-token NLL and KL, per-layer errors, replay, attribution)\n"
        "- `results.csv`: one row per plan × metric\n- `*.svg`: the figures above\n"
        "- `plans/NNNN.h5`: one file per plan (resume, merge)\n";
  io::write_file_atomic(file, md.str(), io::OutputPolicy{true, {}});
}

}  // namespace lpemu::experiment::report
