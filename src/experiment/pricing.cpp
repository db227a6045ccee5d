#include "lpemu/experiment/pricing.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

namespace lpemu::experiment {
namespace {

using engine::LayerKind;
using engine::Role;

bool is_default_gemm(const std::string& g) { return g.empty() || g == "eigen" || g == "fp32" || g == "native"; }

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
  c.lm_head = cost::GemmPlan{fmt({Role::lm_head}, -1, LayerKind::head), fmt({Role::lm_head_input}, -1, LayerKind::head),
                             dp(-1, LayerKind::head, "output")};
  return c;
}

Pricing price_plan(const engine::PrecisionPlan& plan, const cost::ModelShape& shape, const cost::Target& target,
                   cost::Catalog& catalog, cost::Phase phase, long long batch, long long context) {
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
  if (!p.datapath.empty()) p.mac_area_rel_bf16 = cost::mac_cost(catalog.datapath(p.datapath)).total_fa / bf16_fa;
  std::stable_sort(shares.begin(), shares.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [key, m] : shares) {
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * m / macs);
    p.computed += (p.computed.empty() ? "" : "; ") + key + " (" + pct + ")";
  }
  return p;
}

}  // namespace lpemu::experiment
