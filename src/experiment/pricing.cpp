#include "lpemu/experiment/pricing.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "lpemu/core/model.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::experiment {
namespace {

using engine::LayerKind;
using engine::Role;

bool is_default_gemm(const std::string& g) { return g.empty() || datapath::names_float_gemm(g); }

}  // namespace

cost::LayerwisePlan layerwise_plan(const engine::PrecisionPlan& plan, long long n_layers) {
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
  cost::LayerwisePlan c;
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
                   long long context, const cost::GemmTimer& gemm_time) {
  Pricing p;
  p.plan = layerwise_plan(plan, shape.n_layers);
  p.workload = cost::build_workload(shape, p.plan, target, catalog, phase, batch, context);
  p.roofline = cost::roofline(p.workload, target, gemm_time);
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

void apply_overrides(engine::PrecisionPlan& plan, const ClusterSetup& a, const std::string& origin) {
  const auto set = [&](engine::Role role, const std::string& format) {
    if (!format.empty()) plan = engine::with_role_format(std::move(plan), role, format, {}, origin);
  };
  set(engine::Role::weights, a.weights);
  set(engine::Role::lm_head, a.weights);
  set(engine::Role::linear_input, a.activations);
  set(engine::Role::lm_head_input, a.activations);
  set(engine::Role::q, a.activations);
  set(engine::Role::probs, a.activations);
  set(engine::Role::kv_cache, a.kv_cache);
  if (!a.datapath.empty()) plan = engine::with_gemm(std::move(plan), a.datapath, origin);
}

ClusterFormats cluster_formats(const engine::PrecisionPlan& plan, const cost::ModelShape& shape,
                               const cost::Target& target, cost::Catalog& cat, const ClusterSetup& c) {
  const cost::LayerwisePlan cp = layerwise_plan(plan, shape.n_layers);
  const std::size_t mid_index = cp.layers.size() / 2;
  const cost::LayerPlan& mid = cp.layers.at(mid_index);
  ClusterFormats out{{cat.format(c.weights.empty() ? mid.gate.weights : c.weights),
                      cat.format(c.activations.empty() ? mid.gate.inputs : c.activations),
                      cat.format(c.kv_cache.empty() ? mid.kv_cache : c.kv_cache)},
                     "",
                     {}};
  const cost::PlanFormats& pf = out.formats;
  // The cluster models run every GEMM on weights x activations and attention on activations x KV
  // cache: each pair's rate class (or the emulation that stands in for a missing one) is reported.
  const std::string where = "layer " + std::to_string(mid_index) + " ";
  const auto choose = [&](const cost::CostFormat& a, const cost::CostFormat& b, const std::string& op) {
    try {
      cost::RateChoice rc = cost::choose_rate_class(a.element, b.element, target, a.name, b.name);
      if (!rc.note.empty() && std::find(out.notes.begin(), out.notes.end(), rc.note) == out.notes.end())
        out.notes.push_back(rc.note);
      return rc;
    } catch (const SpecError& e) {
      throw SpecError(where + op + " (" + a.name + " x " + b.name + "): " + e.what());
    }
  };
  const cost::RateChoice gemm = choose(pf.activations, pf.weights, "mlp.gate");
  choose(pf.activations, pf.kv_cache, "attn.sdpa");
  out.datapath = !c.datapath.empty()          ? c.datapath
                 : !mid.gate.datapath.empty() ? mid.gate.datapath
                                              : target.datapath_for(gemm.rate_class);
  return out;
}

cost::TrainFormats train_formats(const cost::PlanFormats& pf, cost::Catalog& cat, const ClusterSetup& c) {
  return {pf.weights,
          pf.activations,
          cat.format(c.gradients),
          cat.format(c.optimizer_states),
          cat.format(c.master_weights),
          cat.format(!c.grad_comm.empty() ? c.grad_comm
                     : c.comm.empty()     ? "bf16"
                                          : c.comm),
          cat.format(!c.act_comm.empty() ? c.act_comm
                     : c.comm.empty()    ? pf.activations.name
                                         : c.comm)};
}

cost::TrainConfig train_config(const ClusterSetup& c) {
  cost::TrainConfig cfg;
  cfg.seq = c.context;
  cfg.global_batch = c.global_batch;
  cfg.micro_batch = c.micro_batch;
  cfg.recompute = cost::parse_recompute(c.recompute);
  cfg.flash_attention = c.flash_attention;
  cfg.overlap_dp = c.overlap_dp;
  return cfg;
}

ClusterReport price_cluster(const engine::PrecisionPlan& plan, const cost::ModelShape& shape,
                            const cost::System& sys, cost::Catalog& cat, const ClusterSetup& c) {
  ClusterReport out;
  out.system = sys;
  out.target = cat.target(c.target.empty() ? sys.device : c.target);
  const cost::Target& t = out.target;
  out.formats = cluster_formats(plan, shape, t, cat, c);
  const cost::MacDatapath& dp = cat.datapath(out.formats.datapath);
  if (c.phase == "train") {
    out.train_formats = train_formats(out.formats.formats, cat, c);
    const cost::TrainFormats& f = out.train_formats;
    cost::TrainConfig cfg = train_config(c);
    if (!c.search) {
      cfg.par = cost::parse_parallel(c.parallel.empty() ? "tp=1" : c.parallel, c.devices);
      out.train.push_back(cost::training_step(shape, f, sys, t, dp, cfg));
      return out;
    }
    if (c.devices < 1 && c.step_time <= 0) throw SpecError("search: devices or a step time is required");
    if (!c.parallel.empty()) cfg.par = cost::parse_parallel(c.parallel);
    if (c.devices > 0) {
      out.train = cost::search_training(shape, f, sys, t, dp, c.devices, cfg);
      if (out.train.empty())
        throw SpecError("search: no consistent configuration on " + std::to_string(c.devices) + " devices");
      return out;
    }
    constexpr long long kMaxDevices = 1LL << 17;
    out.train = cost::fewest_devices_for_step(shape, f, sys, t, dp, cfg, c.step_time, kMaxDevices);
    if (out.train.empty()) {
      throw SpecError(
          "step time " + io::format_number(c.step_time, io::NumberStyle::fixed, 3) +
          ": no device count up to " +
          std::to_string(sys.max_devices > 0 ? std::min(sys.max_devices, kMaxDevices) : kMaxDevices) +
          " meets it on system '" + sys.name + "'");
    }
    out.fewest_devices = out.train.front().config.par.devices();
    return out;
  }
  if (c.phase != "prefill" && c.phase != "decode" && c.phase != "both") {
    throw SpecError("cluster pricing: phase \"" + c.phase + "\": expected train, prefill, decode or both");
  }
  out.parallel = cost::parse_parallel(c.parallel.empty() ? "tp=1" : c.parallel);
  const cost::Parallel& par = out.parallel;
  if (c.devices > 0 && par.devices() != c.devices) {
    throw SpecError("parallel " + par.str() + " uses " + std::to_string(par.devices()) +
                    " devices; devices is " + std::to_string(c.devices));
  }
  const cost::PlanFormats& pf = out.formats.formats;
  out.max_batch = cost::max_batch_for_kv(shape, pf, t, par, c.context);
  const std::vector<long long> batches = c.batches.empty() ? std::vector<long long>{c.batch} : c.batches;
  for (const auto phase : {cost::Phase::prefill, cost::Phase::decode}) {
    if (c.phase != "both" && c.phase != (phase == cost::Phase::prefill ? "prefill" : "decode")) continue;
    for (const long long b : batches)
      out.inference.push_back(cost::inference_step(shape, pf, sys, t, dp, par, phase, b, c.context));
  }
  return out;
}

ClusterPricing price_plan_cluster(const engine::PrecisionPlan& plan, const cost::ModelShape& shape,
                                  const cost::System& sys, cost::Catalog& cat, const ClusterSetup& c) {
  if (c.phase != "train" && c.phase != "prefill" && c.phase != "decode") {
    throw SpecError("cluster pricing: phase \"" + c.phase + "\": expected train, prefill or decode");
  }
  if (c.phase == "train" && c.search && c.devices < 1)
    throw SpecError("cluster pricing: search needs devices >= 1");
  ClusterSetup one = c;
  one.batches.clear();
  one.step_time = 0;
  const ClusterReport p = price_cluster(plan, shape, sys, cat, one);
  ClusterPricing out;
  out.system = sys.name;
  if (!p.train.empty()) {
    const cost::TrainResult& r = p.train.front();
    out.parallel = r.config.par.str();
    out.step_s = r.time.step_s;
    out.tokens_per_s = r.tokens_per_s;
    out.mfu = r.mfu;
    out.memory_gb = r.memory.total / 1e9;
    out.fits = r.memory.fits;
    out.why = r.memory.why;
    return out;
  }
  const cost::InferenceResult& r = p.inference.front();
  out.parallel = p.parallel.str();
  out.step_s = r.step_s;
  out.tokens_per_s = r.tokens_per_s;
  out.memory_gb = (r.weight_bytes + r.kv_bytes) / 1e9;
  out.fits = r.fits;
  out.why = r.why;
  return out;
}

cost::KernelEstimate core_gemm_kernel(const core::Core& c, const datapath::Datapath& lane, long long m,
                                      long long k, long long n) {
  const core::GemmCycles r = core::simulate_gemm(c, lane, {"gemm", m, n, k, 1});
  cost::KernelEstimate e;
  e.tile_m = c.rows;
  e.tile_n = c.cols;
  e.tiles = r.row_folds * r.col_folds;
  e.waves = e.tiles;  // one array: every fold is a wave of its own
  e.padding_efficiency = r.mapping_efficiency;
  e.achievable_fraction = r.utilization;
  const double hz = c.clock_ghz * 1e9;
  e.compute_s = static_cast<double>(r.compute_cycles + r.sram_stall_cycles) / hz;
  e.memory_s = r.dram_bytes / c.dram_bytes_per_cycle / hz;
  e.time_s = r.seconds;
  e.compute_bound = r.compute_bound;
  return e;
}

CoreTotals core_totals(const core::Core& c, const datapath::DatapathRegistry& datapaths,
                       const cost::Workload& workload) {
  CoreTotals t;
  t.core = c.name;
  double peak_cycles = 0;  // sum of count x peak MACs per cycle x busy cycles
  for (const cost::Op& op : workload.ops) {
    if (op.kind != "gemm") continue;
    if (op.datapath.empty()) {
      throw SpecError("core '" + c.name + "': GEMM op '" + op.name +
                      "' names no datapath record for the lane");
    }
    const auto dim = [](double v) { return static_cast<long long>(std::llround(v)); };
    const datapath::Datapath& lane = datapaths.get(op.datapath);
    const core::GemmCycles r = core::simulate_gemm(c, lane, {op.name, dim(op.m), dim(op.n), dim(op.k), 1});
    const auto n = static_cast<double>(op.count);
    t.cycles += static_cast<double>(r.total_cycles) * n;
    t.seconds += r.seconds * n;
    t.macs += r.macs * n;
    t.energy_j += r.energy_pj * 1e-12 * n;
    t.dram_bytes += r.dram_bytes * n;
    peak_cycles += core::peak_macs_per_cycle(c, core::lane_of(c, lane)) *
                   static_cast<double>(r.total_cycles - r.latency_cycles) * n;
  }
  t.utilization = peak_cycles > 0 ? t.macs / peak_cycles : 0;
  return t;
}

cost::GemmTimer core_gemm_timer(const core::Core& c, const datapath::DatapathRegistry& datapaths) {
  return [c, &datapaths](cost::Op& op) {
    if (op.datapath.empty()) {
      throw SpecError("core '" + c.name + "': GEMM op '" + op.name +
                      "' names no datapath record for the lane");
    }
    const auto dim = [](double v) { return static_cast<long long>(std::llround(v)); };
    const cost::KernelEstimate e =
        core_gemm_kernel(c, datapaths.get(op.datapath), dim(op.m), dim(op.k), dim(op.n));
    op.compute_s = e.compute_s;
    op.memory_s = e.memory_s;
    op.time_s = e.time_s;
    op.compute_bound = e.compute_bound;
  };
}

}  // namespace lpemu::experiment
