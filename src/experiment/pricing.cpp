#include "lpemu/experiment/pricing.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "lpemu/error.hpp"

namespace lpemu::experiment {
namespace {

using engine::LayerKind;
using engine::Role;

bool is_default_gemm(const std::string& g) {
  return g.empty() || g == "eigen" || g == "fp32" || g == "native";
}

}  // namespace

cost::CostPlan cost_plan(const engine::PrecisionPlan& plan, long long n_layers) {
  const int n = static_cast<int>(n_layers);
  const std::string raw = plan.compute == engine::Compute::fp64 ? "fp64" : "fp32";
  // The format of the last of `roles` that quantises the tensor at (layer, kind), else unquantised.
  const auto fmt = [&](std::initializer_list<Role> roles, int layer, LayerKind kind) {
    for (const Role r : roles) {
      if (const auto spec = plan.resolve(r, layer, kind, n)) return spec->format;
    }
    return std::string(raw);
  };
  // The datapath record that runs a GEMM site ("" = none: fp32 accumulation in the engine).
  const auto dp = [&](int layer, LayerKind kind, std::string_view site) {
    const std::string g = plan.resolve_gemm_site(layer, kind, site, n).datapath;
    return is_default_gemm(g) || g == "none" ? std::string() : g;
  };
  cost::CostPlan c;
  c.name = plan.name;
  c.description = plan.description;
  c.origin = plan.origin;
  c.embedding = raw;  // the engine never quantises the embedding table
  for (int l = 0; l < n; ++l) {
    const LayerKind at = LayerKind::attention, mlp = LayerKind::mlp;
    cost::LayerPlan lp;
    const std::string wa = fmt({Role::weights}, l, at), wm = fmt({Role::weights}, l, mlp);
    const std::string qkv_in = fmt({Role::linear_input}, l, at);
    const std::string wo_in = fmt({Role::linear_input, Role::attn_output}, l, at);
    const std::string w13_in = fmt({Role::linear_input}, l, mlp);
    const std::string w2_in = fmt({Role::linear_input, Role::mlp_hidden}, l, mlp);
    lp.q_proj = cost::GemmPlan{wa, qkv_in, dp(l, at, "wq")};
    lp.k_proj = cost::GemmPlan{wa, qkv_in, dp(l, at, "wk")};
    lp.v_proj = cost::GemmPlan{wa, qkv_in, dp(l, at, "wv")};
    lp.o_proj = cost::GemmPlan{wa, wo_in, dp(l, at, "wo")};
    lp.gate = cost::GemmPlan{wm, w13_in, dp(l, mlp, "w1")};
    lp.up = cost::GemmPlan{wm, w13_in, dp(l, mlp, "w3")};
    lp.down = cost::GemmPlan{wm, w2_in, dp(l, mlp, "w2")};
    lp.attention_datapath = dp(l, at, "qk");
    lp.q = fmt({Role::q}, l, at);
    lp.probs = fmt({Role::probs}, l, at);
    lp.kv_cache = fmt({Role::kv_cache, Role::k}, l, at);
    c.layers.push_back(lp);
  }
  c.lm_head =
      cost::GemmPlan{fmt({Role::lm_head}, -1, LayerKind::head),
                     fmt({Role::lm_head_input}, -1, LayerKind::head), dp(-1, LayerKind::head, "output")};
  return c;
}

Pricing price_plan(const engine::PrecisionPlan& plan, const cost::ModelShape& shape,
                   const cost::Target& target, cost::Catalog& catalog, cost::Phase phase, long long batch,
                   long long context) {
  Pricing p;
  p.plan = cost_plan(plan, shape.n_layers);
  p.workload = cost::build_workload(shape, p.plan, target, catalog, phase, batch, context);
  p.roofline = cost::roofline(p.workload, target);
  // MAC shares per (A, B, datapath), in op order of first appearance.
  std::vector<std::pair<std::string, double>> shares;
  std::map<std::string, double> per_datapath;
  double macs = 0, energy = 0;
  for (const auto& op : p.workload.ops) {
    if (op.kind == "memory") continue;
    const double m = static_cast<double>(op.count) * op.flops / 2.0;
    macs += m;
    energy += m * op.energy_per_mac_pj;
    per_datapath[op.datapath] += m;
    const std::string key = op.a_format + " x " + op.b_format + " on " + op.datapath;
    auto it = std::find_if(shares.begin(), shares.end(), [&](const auto& s) { return s.first == key; });
    if (it == shares.end()) {
      shares.emplace_back(key, m);
    } else {
      it->second += m;
    }
  }
  p.mac_energy_pj = macs > 0 ? energy / macs : 0.0;
  double best = -1;
  for (const auto& [name, m] : per_datapath) {
    if (m > best) best = m, p.datapath = name;
  }
  // The MAC array a plan needs is the one that carries most of its MACs.
  const double bf16_fa = cost::mac_cost(catalog.datapath(target.datapath_for("bf16"))).total_fa;
  if (!p.datapath.empty())
    p.mac_area_rel_bf16 = cost::mac_cost(catalog.datapath(p.datapath)).total_fa / bf16_fa;
  std::stable_sort(shares.begin(), shares.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [key, m] : shares) {
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * m / macs);
    p.computed += (p.computed.empty() ? "" : "; ") + key + " (" + pct + ")";
  }
  return p;
}

ClusterFormats cluster_formats(const engine::PrecisionPlan& plan, const cost::ModelShape& shape,
                               const cost::Target& target, cost::Catalog& cat, const ClusterSetup& c) {
  const cost::CostPlan cp = cost_plan(plan, shape.n_layers);
  const cost::LayerPlan& mid = cp.layers.at(cp.layers.size() / 2);
  ClusterFormats out{{cat.format(c.weights.empty() ? mid.gate.weights : c.weights),
                      cat.format(c.activations.empty() ? mid.gate.inputs : c.activations),
                      cat.format(c.kv_cache.empty() ? mid.kv_cache : c.kv_cache)},
                     ""};
  const cost::PlanFormats& pf = out.formats;
  out.datapath =
      !c.datapath.empty() ? c.datapath
      : !mid.gate.datapath.empty()
          ? mid.gate.datapath
          : target.datapath_for(cost::gemm_rate_class(pf.weights.element, pf.activations.element, target,
                                                      pf.weights.name, pf.activations.name));
  return out;
}

cost::TrainFormats train_formats(const cost::PlanFormats& pf, cost::Catalog& cat, const ClusterSetup& c) {
  return {pf.weights,
          pf.activations,
          cat.format(c.gradients),
          cat.format(c.optimizer_states),
          cat.format(c.master_weights),
          cat.format(c.comm.empty() ? "bf16" : c.comm),
          cat.format(c.comm.empty() ? pf.activations.name : c.comm)};
}

cost::TrainConfig train_config(const ClusterSetup& c) {
  cost::TrainConfig cfg;
  cfg.seq = c.context;
  cfg.global_batch = c.global_batch;
  cfg.micro_batch = c.micro_batch;
  cfg.recompute = cost::parse_recompute(c.recompute);
  return cfg;
}

ClusterPricing price_plan_cluster(const engine::PrecisionPlan& plan, const cost::ModelShape& shape,
                                  const cost::System& sys, cost::Catalog& cat, const ClusterSetup& c) {
  const cost::Target& t = cat.target(sys.device);
  const ClusterFormats cf = cluster_formats(plan, shape, t, cat, c);
  const cost::MacDatapath& dp = cat.datapath(cf.datapath);
  ClusterPricing out;
  out.system = sys.name;
  cost::JobPhase phase{};
  try {
    phase = cost::parse_job_phase(c.phase);
  } catch (const SpecError&) {
    throw SpecError("cluster pricing: phase \"" + c.phase + "\": expected train, prefill or decode");
  }
  if (phase == cost::JobPhase::train) {
    const cost::TrainFormats f = train_formats(cf.formats, cat, c);
    cost::TrainConfig cfg = train_config(c);
    cost::TrainResult r;
    if (c.search) {
      if (c.devices < 1) throw SpecError("cluster pricing: search needs devices >= 1");
      if (!c.parallel.empty()) cfg.par = cost::parse_parallel(c.parallel);
      const auto all = cost::search_training(shape, f, sys, t, dp, c.devices, cfg);
      if (all.empty())
        throw SpecError("no consistent configuration on " + std::to_string(c.devices) + " devices");
      r = all.front();
    } else {
      cfg.par = cost::parse_parallel(c.parallel.empty() ? "tp=1" : c.parallel, c.devices);
      r = cost::training_step(shape, f, sys, t, dp, cfg);
    }
    out.parallel = r.config.par.str();
    out.step_s = r.time.step_s;
    out.tokens_per_s = r.tokens_per_s;
    out.mfu = r.mfu;
    out.memory_gb = r.memory.total / 1e9;
    out.fits = r.memory.fits;
    out.why = r.memory.why;
    return out;
  }
  const cost::Parallel par = cost::parse_parallel(c.parallel.empty() ? "tp=1" : c.parallel);
  if (c.devices > 0 && par.devices() != c.devices) {
    throw SpecError("parallel " + par.str() + " uses " + std::to_string(par.devices()) +
                    " devices; devices is " + std::to_string(c.devices));
  }
  const auto r = cost::inference_step(shape, cf.formats, sys, t, dp, par,
                                      cost::device_phase(phase),
                                      c.batch, c.context);
  out.parallel = par.str();
  out.step_s = r.step_s;
  out.tokens_per_s = r.tokens_per_s;
  out.memory_gb = (r.weight_bytes + r.kv_bytes) / 1e9;
  out.fits = r.fits;
  out.why = r.why;
  return out;
}

}  // namespace lpemu::experiment
