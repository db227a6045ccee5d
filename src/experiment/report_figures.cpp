// The figures of a sweep report and of `lpemu cost` / `lpemu datapath-error`, built from
// results only, through the one plotting module (lpemu/io/svg_plot.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>

#include "experiment/report_detail.hpp"
#include "lpemu/experiment/figures.hpp"

namespace lpemu::experiment {

io::BarChart cost_breakdown_chart(const cost::Workload& w, const std::string& title) {
  io::BarChart c;
  c.title = title;
  io::BarPanel time{"time (µs, all instances)", {}, false};
  io::BarPanel bytes{"DRAM traffic (MB)", {}, false};
  io::BarPanel energy{"energy (mJ)", {}, false};
  for (const auto& op : w.ops) {
    const auto n = static_cast<double>(op.count);
    // The same op in other formats (e.g. kept first/last blocks) is told apart by its weight format.
    const bool repeated =
        std::count_if(w.ops.begin(), w.ops.end(), [&](const cost::Op& o) { return o.name == op.name; }) > 1;
    const std::string name = repeated ? op.name + " (" + op.b_format + ")" : op.name;
    c.categories.push_back(op.count > 1 ? name + " ×" + std::to_string(op.count) : name);
    time.values.push_back(n * op.time_s * 1e6);
    bytes.values.push_back(n * op.bytes / 1e6);
    energy.values.push_back(n * op.energy_j * 1e3);
    c.classes.push_back(op.kind == "memory" ? "memory only"
                        : op.compute_bound  ? "compute-bound"
                                            : "memory-bound");
  }
  c.panels = {time, bytes, energy};
  c.notes.push_back(
      "Roofline per op: time = max(compute time at the rate class's peak, DRAM bytes / bandwidth); "
      "colour = which of the two limits it.");
  return c;
}

namespace {

// The rows (blocks in order, then the LM head) and columns (points in first-seen order) of a
// plan's layer attribution.
void layer_axes(const PlanResult& p, std::vector<int>& layers, std::vector<std::string>& points) {
  for (const auto& a : p.layer_attribution) {
    if (std::find(layers.begin(), layers.end(), a.layer) == layers.end()) layers.push_back(a.layer);
    if (std::find(points.begin(), points.end(), a.role) == points.end()) points.push_back(a.role);
  }
  std::sort(layers.begin(), layers.end(),
            [](int x, int y) { return (x < 0 ? 1 << 30 : x) < (y < 0 ? 1 << 30 : y); });
}

std::string layer_name(int layer) { return layer < 0 ? "LM head" : "block " + std::to_string(layer); }

double layer_value(const PlanResult& p, int layer, const std::string& point) {
  for (const auto& a : p.layer_attribution) {
    if (a.layer == layer && a.role == point) return a.mean_kl;
  }
  return std::nan("");
}

}  // namespace

io::HeatMap layer_attribution_heatmap(const PlanResult& plan) {
  std::vector<int> layers;
  std::vector<std::string> points;
  layer_axes(plan, layers, points);
  io::HeatMap hm;
  hm.title = "Attribution by layer: " + plan.label;
  hm.x_label = "quantisation point";
  hm.y_label = "layer";
  hm.cols = points;
  hm.value_label = "mean KL (nats/token)";
  hm.log = true;
  for (const int l : layers) {
    hm.rows.push_back(layer_name(l));
    for (const auto& pt : points) hm.values.push_back(layer_value(plan, l, pt));
  }
  hm.notes.push_back(
      "Each cell: only that point quantised, only in that layer, as the plan quantises it there; "
      "everything else and every GEMM at the reference.");
  hm.notes.push_back("The whole plan (every point in every layer, on its GEMM): mean KL " +
                     report::num(plan.eval.mean_kl, 3) + ".");
  return hm;
}

io::BarChart layer_attribution_bars(const PlanResult& plan) {
  std::vector<int> layers;
  std::vector<std::string> points;
  layer_axes(plan, layers, points);
  io::BarChart c;
  c.title = "Attribution by layer: " + plan.label;
  for (const int l : layers) c.categories.push_back(layer_name(l));
  for (const auto& pt : points) {
    io::BarPanel panel{"KL alone, " + pt + " (nats/token)", {}, false};
    for (const int l : layers) panel.values.push_back(layer_value(plan, l, pt));
    c.panels.push_back(std::move(panel));
  }
  c.notes.push_back(
      "Longer bar = more damage from that point in that layer alone; no bar: not quantised there.");
  return c;
}

io::Plot datapath_error_plot(const std::vector<std::string>& names, const std::vector<std::size_t>& ks,
                             const std::vector<std::vector<double>>& err, const std::string& dist) {
  io::Plot p;
  p.title = "Dot-product error against K (" + dist + " inputs)";
  p.x_label = "K (terms per dot product)";
  p.y_label = "mean relative error |d − exact| / |exact|";
  p.log_x = p.log_y = true;
  for (std::size_t d = 0; d < names.size() && d < err.size(); ++d) {
    io::Series s;
    s.label = names[d];
    for (std::size_t k = 0; k < ks.size() && k < err[d].size(); ++k) {
      s.x.push_back(static_cast<double>(ks[k]));
      s.y.push_back(err[d][k]);
    }
    p.series.push_back(std::move(s));
  }
  return p;
}

namespace report {
namespace {

// One scatter of mean KL against `x`, one series per GEMM datapath, points numbered by rank,
// and the Pareto front computed on the points drawn.
io::Plot kl_scatter(const std::vector<PlanResult>& plans, const std::vector<double>& x, bool x_lower_better,
                    bool log_x, const std::string& title, const std::string& x_label) {
  const auto order = ranked(plans);
  std::vector<std::size_t> rank(plans.size());
  for (std::size_t k = 0; k < order.size(); ++k) rank[order[k]] = k + 1;
  io::Plot pl;
  pl.title = title;
  pl.x_label = x_label;
  pl.y_label = "mean KL(reference ‖ plan) (nats/token)";
  pl.log_y = true;
  pl.log_x = log_x;
  std::vector<std::string> gemms;
  for (const auto& p : plans) {
    if (std::find(gemms.begin(), gemms.end(), p.gemm) == gemms.end()) gemms.push_back(p.gemm);
  }
  std::vector<double> fx, fy;
  for (const auto& g : gemms) {
    io::Series s;
    s.label = "GEMM " + g;
    s.lines = false;
    for (std::size_t i = 0; i < plans.size(); ++i) {
      if (plans[i].gemm != g) continue;
      if (!std::isfinite(x[i]) || (log_x && x[i] <= 0) || !(plans[i].eval.mean_kl > 0) ||
          !std::isfinite(plans[i].eval.mean_kl)) {
        continue;  // named in a note below
      }
      s.x.push_back(x[i]);
      s.y.push_back(plans[i].eval.mean_kl);
      s.point_labels.push_back(std::to_string(rank[i]));
      fx.push_back(x[i]);
      fy.push_back(plans[i].eval.mean_kl);
    }
    pl.series.push_back(std::move(s));
  }
  const auto front = io::pareto_front(fx, fy, x_lower_better);
  if (front.size() > 1) {
    io::Series pf;
    pf.label = "Pareto front";
    pf.markers = false;
    for (const auto k : front) {
      pf.x.push_back(fx[k]);
      pf.y.push_back(fy[k]);
    }
    pl.series.push_back(std::move(pf));
  }
  pl.notes.push_back("Numbers are the plans' ranks in the ranked table.");
  for (const auto i : order) {
    const auto& p = plans[i];
    std::string why;
    if (p.eval.mean_kl == 0) {
      why = "KL 0 (the reference itself) has no place on a log axis";
    } else if (!std::isfinite(p.eval.mean_kl)) {
      why = "KL " + num(p.eval.mean_kl);
    } else if (!std::isfinite(x[i]) || (log_x && x[i] <= 0)) {
      why = "no value on this axis" + (p.cost.note.empty() ? std::string() : " (" + p.cost.note + ")");
    }
    if (p.eval.mean_kl == 0 && !std::isfinite(x[i])) why += "; no value on this axis";
    if (!why.empty())
      pl.notes.push_back("Not drawn: rank " + std::to_string(rank[i]) + " " + p.label + ": " + why + ".");
  }
  return pl;
}

}  // namespace

std::vector<NamedFigure> sweep_figures(const std::vector<PlanResult>& plans) {
  std::vector<NamedFigure> out;
  if (plans.empty()) return out;
  const auto order = ranked(plans);
  std::vector<double> bits;
  for (const auto& p : plans) bits.push_back(p.weight_bits);
  out.push_back(
      {"kl_vs_bits.svg",
       "Accuracy loss against bits per weight.",
       "Lower is better on both axes: down and to the left. The line joins the plans no other plan beats "
       "on both (the Pareto front); a plan above it pays bits for nothing.",
       io::layout(kl_scatter(plans, bits, true, false, "Accuracy loss vs bits per weight",
                             "bits per weight element (block-scale overhead included)")),
       {}});
  if (has_cost(plans)) {
    const std::string target = plans.front().cost.target;
    std::vector<double> area, tps, jpt;
    for (const auto& p : plans) {
      area.push_back(p.cost.mac_area_rel_bf16);
      tps.push_back(p.cost.tokens_per_s);
      jpt.push_back(p.cost.joules_per_token * 1e3);
    }
    out.push_back(
        {"kl_vs_cost.svg",
         "Accuracy loss against MAC lane area.",
         "MAC area from the MAC model, relative to a bf16 MAC on the same datapath (45 nm constants: compare "
         "plans, not absolute values). Down and to the left is better; the line is the Pareto front.",
         io::layout(kl_scatter(plans, area, true, false, "Accuracy loss vs MAC area (" + target + ")",
                               "MAC lane area relative to bf16 (×)")),
         {}});
    out.push_back(
        {"kl_vs_tokens_per_s.svg",
         "Accuracy loss against decode throughput.",
         "Throughput from the roofline of the priced workload. Down and to the right is better; the line "
         "is the Pareto front (more tokens/s for less loss).",
         io::layout(kl_scatter(plans, tps, false, false, "Accuracy loss vs throughput (" + target + ")",
                               "tokens per second (roofline)")),
         {}});
    out.push_back(
        {"kl_vs_energy.svg",
         "Accuracy loss against energy per token.",
         "Energy per token from the roofline of the priced workload. Down and to the left is better.",
         io::layout(kl_scatter(plans, jpt, true, false, "Accuracy loss vs energy per token (" + target + ")",
                               "energy per token (mJ)")),
         {}});
  }
  const bool any_residual =
      std::any_of(plans.begin(), plans.end(), [](const auto& p) { return !p.eval.residual.empty(); });
  if (any_residual) {
    io::Plot pl;
    pl.title = "Residual-stream SQNR per layer";
    pl.x_label = "residual stream position (input of block l, then the final residual)";
    pl.y_label = "SQNR against the reference (dB)";
    for (const auto i : order) {
      const auto& p = plans[i];
      if (p.eval.residual.empty()) continue;
      io::Series s;
      s.label = p.label;
      for (std::size_t k = 0; k < p.eval.residual.size(); ++k) {
        s.x.push_back(static_cast<double>(k));
        s.y.push_back(p.eval.residual[k].second.sqnr_db);
        if (pl.x_tick_labels.size() <= k)
          pl.x_tick_labels.push_back(short_residual_name(p.eval.residual[k].first));
      }
      if (std::any_of(s.y.begin(), s.y.end(), [](double v) { return std::isfinite(v); })) {
        pl.series.push_back(std::move(s));
      } else {
        pl.notes.push_back(p.label + ": equal to the reference everywhere (SQNR +inf), not drawn.");
      }
    }
    out.push_back(
        {"residual_sqnr.svg",
         "Error per layer: residual-stream SQNR of each plan.",
         "Higher is better. A steady fall with depth is error accumulating; a sudden drop points at one "
         "block. Legend in rank order.",
         io::layout(pl),
         {}});
  }
  // Attribution: plan x quantisation point heat map and per-point bars.
  std::vector<std::string> points;
  for (const auto& p : plans) {
    for (const auto& a : p.attribution) {
      if (std::find(points.begin(), points.end(), a.role) == points.end()) points.push_back(a.role);
    }
  }
  if (!points.empty()) {
    io::HeatMap hm;
    hm.title = "Attribution: mean KL with one quantisation point alone";
    hm.x_label = "quantisation point (all layers)";
    hm.y_label = "plan";
    hm.cols = points;
    hm.value_label = "mean KL (nats/token)";
    hm.log = true;
    io::BarChart bars;
    bars.title = "Attribution by quantisation point";
    for (const auto& pt : points) bars.panels.push_back({"KL alone, " + pt + " (nats/token)", {}, false});
    for (const auto i : order) {
      if (plans[i].attribution.empty()) continue;
      hm.rows.push_back(plans[i].label);
      bars.categories.push_back(plans[i].label);
      for (std::size_t j = 0; j < points.size(); ++j) {
        double v = std::nan("");
        for (const auto& a : plans[i].attribution) {
          if (a.role == points[j]) v = a.mean_kl;
        }
        hm.values.push_back(v);
        bars.panels[j].values.push_back(v);
      }
    }
    hm.notes.push_back(
        "Each cell: the plan with only that point quantised (every other tensor and the GEMM at the "
        "reference), in every layer at once; layer by layer: options.layer_attribution.");
    bars.notes.push_back("Missing bar: the plan does not quantise that point.");
    out.push_back(
        {"attribution_heatmap.svg",
         "Attribution: which quantisation point costs how much, plan by plan.",
         "Brighter is worse. Compare a row's cells to see which point to keep wider; compare a column to see "
         "which format hurts that point least.",
         io::layout(hm),
         {}});
    out.push_back(
        {"attribution_bars.svg",
         "Attribution as bars, one panel per quantisation point.",
         "Longer bar = more damage from that point alone. The panels share the plan rows (rank order).",
         io::layout(bars),
         {}});
  }
  // Per plan: attribution by layer (layer x point) and where the priced cost goes, op by op.
  for (const auto i : order) {
    const auto& p = plans[i];
    char idx[16];
    std::snprintf(idx, sizeof idx, "%04zu", p.index);
    if (!p.layer_attribution.empty()) {
      out.push_back(
          {std::string("attribution_layers_") + idx + ".svg",
           "Attribution by layer × point: " + p.label + ".",
           "Brighter is worse. Each cell quantises one point in one layer alone; a bright row is a layer "
           "to keep wider, a bright column a point to keep wider everywhere.",
           io::layout(layer_attribution_heatmap(p)), "attribution by layer (heat map)"});
      out.push_back({std::string("attribution_layers_bars_") + idx + ".svg",
                     "Attribution by layer, as bars: " + p.label + ".",
                     "Longer bar = more damage from that point in that layer alone; one panel per point.",
                     io::layout(layer_attribution_bars(p)), "attribution by layer (bars)"});
    }
    if (!p.cost.ops.empty()) {
      cost::Workload w;
      w.ops = p.cost.ops;
      out.push_back(
          {std::string("cost_ops_") + idx + ".svg", "Where the cost goes, op by op: " + p.label + ".",
           "Time, DRAM traffic and MAC + DRAM energy of each op of the priced workload (all its layers), "
           "coloured by what bounds it; the same chart as `lpemu cost --plot` for this plan.",
           io::layout(cost_breakdown_chart(w, "Cost per op: " + p.label + " (" + p.cost.target + ")")),
           "per-op cost"});
    }
  }
  // Per-layer error on recorded activations: linear layer x plan.
  const bool any_replay =
      std::any_of(plans.begin(), plans.end(), [](const auto& p) { return !p.replay.empty(); });
  if (any_replay) {
    io::HeatMap hm;
    hm.title = "Linear-layer output SQNR on recorded activations";
    hm.x_label = "plan (rank in the table)";
    hm.y_label = "linear layer";
    hm.value_label = "output SQNR (dB)";
    std::map<std::string, std::size_t> row_of;
    std::vector<std::size_t> cols;
    for (const auto i : order) {
      if (plans[i].replay.empty() || plans[i].eval.mean_kl == 0) continue;  // the reference: exact to fp32
      cols.push_back(i);
      for (const auto& r : plans[i].replay) {
        const std::string key =
            (r.layer < 0 ? std::string("head") : "layer " + std::to_string(r.layer)) + " " + r.tensor;
        if (row_of.emplace(key, hm.rows.size()).second) hm.rows.push_back(key);
      }
    }
    for (std::size_t k = 0; k < cols.size(); ++k) {
      const auto it = std::find(order.begin(), order.end(), cols[k]);
      hm.cols.push_back("#" + std::to_string(it - order.begin() + 1));
    }
    hm.values.assign(hm.rows.size() * cols.size(), std::nan(""));
    for (std::size_t k = 0; k < cols.size(); ++k) {
      for (const auto& r : plans[cols[k]].replay) {
        const std::string key =
            (r.layer < 0 ? std::string("head") : "layer " + std::to_string(r.layer)) + " " + r.tensor;
        hm.values[row_of[key] * cols.size() + k] = r.output_error.sqnr_db;
      }
    }
    // Layers a plan leaves in fp32 (~130 dB) would take the whole colour scale: clip it at the
    // 90th percentile so the quantised layers' differences stay visible.
    std::vector<double> finite;
    for (const double v : hm.values) {
      if (std::isfinite(v)) finite.push_back(v);
    }
    if (!finite.empty()) {
      std::sort(finite.begin(), finite.end());
      hm.clip_hi = finite[finite.size() * 9 / 10];
    }
    hm.notes.push_back(
        "Output of each linear layer under the plan's quantisers and GEMM, fed the recorded input, "
        "against the exact product; the reference plan is left out. Grey: exact (SQNR +inf) or not run.");
    out.push_back(
        {"replay_sqnr_heatmap.svg",
         "Error per linear layer on recorded activations.",
         "Brighter is better (higher SQNR). A dark row is a layer that needs a wider format under every "
         "plan; a dark column is a plan that fails everywhere.",
         io::layout(hm),
         {}});
  }
  return out;
}

}  // namespace report
}  // namespace lpemu::experiment
