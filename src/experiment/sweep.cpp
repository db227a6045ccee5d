#include "lpemu/experiment/sweep.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "experiment/proposal_detail.hpp"
#include "experiment/sweep_detail.hpp"
#include "lpemu/core/core.hpp"
#include "lpemu/cost/mac_model.hpp"
#include "lpemu/cost/system.hpp"
#include "lpemu/cost/workload.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/detail/named_registry.hpp"
#include "lpemu/engine/model.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/pricing.hpp"
#include "lpemu/io/hdf5.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/io/output_transaction.hpp"
#include "lpemu/io/sha256.hpp"

namespace lpemu::experiment {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kManifest = "EXPERIMENT";

std::string plan_file_name(std::size_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04zu.h5", index);
  return buf;
}

// The small record beside the plan files: fingerprint, experiment name, plan count and labels.
struct Manifest {
  std::string fingerprint;
  std::string name;
  std::string model;
  std::vector<std::string> labels;
};

// A results folder this run creates: removed again if the run fails before any plan result is in
// it (a later failure keeps the folder with its results, which a rerun resumes from).
class NewFolderGuard {
 public:
  explicit NewFolderGuard(fs::path dir) : dir_(std::move(dir)) {
    std::error_code ec;
    armed_ = !fs::exists(dir_, ec);
  }
  NewFolderGuard(const NewFolderGuard&) = delete;
  NewFolderGuard& operator=(const NewFolderGuard&) = delete;
  ~NewFolderGuard() {
    if (!armed_) return;
    std::error_code ec;
    for (fs::directory_iterator it(dir_ / "plans", ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() == ".h5") return;
    }
    fs::remove_all(dir_, ec);
  }
  /// The run succeeded: keep the folder.
  void release() { armed_ = false; }

 private:
  fs::path dir_;
  bool armed_ = false;
};

void write_manifest(const fs::path& dir, const Manifest& m) {
  std::ostringstream out;
  out << "fingerprint " << m.fingerprint << "\nname " << m.name << "\nmodel " << m.model << "\n";
  for (const auto& l : m.labels) out << "plan " << l << "\n";
  io::write_file_atomic(dir / kManifest, out.str(), io::OutputPolicy{true, {}});
}

Manifest read_manifest(const fs::path& dir) {
  std::ifstream in(dir / kManifest);
  if (!in) throw IoError(dir.string() + ": not a sweep output directory (no " + kManifest + " file)");
  Manifest m;
  std::string line;
  while (std::getline(in, line)) {
    const auto sp = line.find(' ');
    const std::string key = line.substr(0, sp);
    const std::string val = sp == std::string::npos ? "" : line.substr(sp + 1);
    if (key == "fingerprint")
      m.fingerprint = val;
    else if (key == "name")
      m.name = val;
    else if (key == "model")
      m.model = val;
    else if (key == "plan")
      m.labels.push_back(val);
  }
  if (m.fingerprint.empty()) throw IoError((dir / kManifest).string() + ": malformed (no fingerprint)");
  return m;
}

engine::PrecisionPlan build_plan(const PlanSpec& spec, const Toolbox& tools, const fs::path& origin) {
  if (!spec.inline_toml.empty()) {
    return engine::parse_plan_toml(spec.inline_toml, origin.string() + " [plan '" + spec.label + "']",
                                   *tools.quantizers, *tools.gemms);
  }
  return engine::load_plan(spec.plan, *tools.quantizers, *tools.gemms, tools.search_dirs);
}

// The plan as a file of its own, so that `lpemu cost --plan DIR/plans/NNNN.toml` (or eval, run)
// can take exactly the plan a sweep computed.
std::string plan_text(const PlanSpec& spec, const engine::PrecisionPlan& plan) {
  if (!spec.inline_toml.empty()) return spec.inline_toml;  // carries name = label
  if (plan.origin.rfind("builtin:", 0) == 0) return engine::to_toml(plan);
  return lpemu::detail::read_spec_file(plan.origin, "plan");
}

// True when the model has quantisation points of `role`: the mixture-of-experts roles exist only
// in models with experts (elsewhere they would repeat their fallback role's points).
bool role_in_model(engine::Role role, const engine::Config& config) {
  using engine::Role;
  if (engine::is_training_role(role)) return false;  // inference never reads them
  const bool moe = role == Role::expert_weights || role == Role::expert_input ||
                   role == Role::expert_hidden || role == Role::router_weights ||
                   role == Role::router_input || role == Role::router_logits;
  return config.n_experts > 0 || !moe;
}

bool role_used(const engine::PrecisionPlan& plan, engine::Role role, int n_layers) {
  for (int l = -1; l < n_layers; ++l) {
    for (const auto kind : {engine::LayerKind::attention, engine::LayerKind::mlp, engine::LayerKind::head}) {
      if (plan.resolve(role, l, kind, n_layers)) return true;
    }
  }
  return false;
}

// The value most entries of `v` have (the first of equals), or `fallback` for an empty `v`.
std::string most_common(const std::vector<std::string>& v, const std::string& fallback) {
  std::string best = fallback;
  std::ptrdiff_t best_n = 0;
  for (const auto& x : v) {
    const std::ptrdiff_t n = std::count(v.begin(), v.end(), x);
    if (n > best_n) best = x, best_n = n;
  }
  return best;
}

// The accuracy model's own shape, for bits per weight when the experiment prices nothing.
cost::ModelShape shape_of(const engine::Config& c) {
  cost::ModelShape s;
  s.name = c.name;
  s.dim = c.dim;
  s.n_layers = c.n_layers;
  s.n_heads = c.n_heads;
  s.n_kv_heads = c.n_kv_heads;
  s.hidden_dim = c.hidden_dim;
  s.vocab_size = c.vocab_size;
  s.tied_embeddings = c.tied_embeddings;
  return s;
}

// Prices a plan on the experiment's [cost] target through experiment::price_plan, the function
// behind `lpemu cost --plan`: every block, the LM head and the KV cache in their own formats, each
// GEMM on the datapath that runs it.
SweepCost price_for_sweep(const engine::PrecisionPlan& plan, const Experiment& exp, const Toolbox& tools) {
  SweepCost c;
  if ((exp.cost.target.empty() && exp.cost.cluster.system.empty()) || tools.costs == nullptr) return c;
  static std::mutex mu;  // the catalog parses lazily
  std::lock_guard lock(mu);
  cost::Catalog& cat = *tools.costs;
  std::optional<cost::System> sys;
  if (!exp.cost.cluster.system.empty()) sys = cost::load_system(exp.cost.cluster.system, cat.user_dirs());
  c.target = exp.cost.target.empty() ? sys->device : exp.cost.target;
  if (sys) {
    c.cluster_system = sys->name;
    try {
      cost::System on = *sys;
      on.device = c.target;  // a [cost] target replaces the system's device, as `lpemu cost --target` does
      const ClusterPricing cp =
          price_plan_cluster(plan, cat.shape(exp.cost.shape), on, cat, exp.cost.cluster);
      c.cluster_parallel = cp.parallel;
      c.cluster_step_s = cp.step_s;
      c.cluster_tokens_per_s = cp.tokens_per_s;
      c.cluster_mfu = cp.mfu;
      c.cluster_memory_gb = cp.memory_gb;
      if (!cp.fits) c.cluster_note = "does not fit: " + cp.why;
    } catch (const Error& e) {
      c.cluster_note = e.what();
    }
  }
  try {
    // Single device: the phase priced (training: the forward pass of one micro-batch, as a prefill).
    const cost::JobPhase job = cost::parse_job_phase(exp.cost.cluster.phase);
    // With a [cost] core, the GEMMs are timed on it (as `lpemu cost --core` does) and their cycles,
    // utilisation and energy on it are columns of their own.
    std::optional<core::Core> on_core;
    const datapath::DatapathRegistry& records =
        tools.datapaths != nullptr ? *tools.datapaths : datapath::DatapathRegistry::builtin();
    if (!exp.cost.core.empty()) {
      c.core = exp.cost.core;
      on_core = core::load_core(exp.cost.core, cat.user_dirs());
      c.core = on_core->name;
    }
    const Pricing p = experiment::price_plan(
        plan, cat.shape(exp.cost.shape), cat.target(c.target), cat, cost::device_phase(job),
        job == cost::JobPhase::train ? exp.cost.cluster.micro_batch : exp.cost.cluster.batch,
        exp.cost.cluster.context, on_core ? core_gemm_timer(*on_core, records) : cost::GemmTimer{});
    if (on_core) {
      const CoreTotals t = core_totals(*on_core, records, p.workload);
      c.core_cycles = t.cycles;
      c.core_seconds = t.seconds;
      c.core_utilization = t.utilization;
      c.core_energy_j = t.energy_j;
    }
    c.datapath = p.datapath;
    c.computed = p.computed;
    c.bits_per_weight = p.workload.bits_per_weight;
    c.tokens_per_s = p.roofline.tokens_per_s();
    c.joules_per_token = p.roofline.energy_per_token();
    c.mac_area_rel_bf16 = p.mac_area_rel_bf16;
    c.mac_energy_pj = p.mac_energy_pj;
    c.ops = p.workload.ops;
  } catch (const Error& e) {
    c.note = e.what();  // e.g. a format the target has no rate for: the plan keeps NaN costs
  }
  return c;
}

PlanResult evaluate_plan(std::size_t index, const PlanSpec& spec, const Experiment& exp, const Toolbox& tools,
                         const engine::Model& model, const engine::PrecisionPlan& reference,
                         const std::vector<int>& tokens) {
  const auto t0 = Clock::now();
  PlanResult r;
  r.index = index;
  r.label = spec.label;
  const engine::PrecisionPlan plan = build_plan(spec, tools, exp.origin);
  r.plan_name = plan.name;
  const int n_layers = model.config.n_layers;
  // The weight format and GEMM of most blocks (first/last blocks are often kept wider).
  const std::string raw = plan.compute == engine::Compute::fp64 ? "fp64" : "fp32";
  std::vector<std::string> formats, gemms;
  for (int l = 0; l < n_layers; ++l) {
    const auto w = plan.resolve(engine::Role::weights, l, engine::LayerKind::attention, n_layers);
    formats.push_back(w ? w->format : raw);
    gemms.push_back(plan.resolve_gemm(l, engine::LayerKind::attention, n_layers));
  }
  r.weight_format = most_common(formats, raw);
  r.gemm = most_common(gemms, "eigen");
  r.cost = price_for_sweep(plan, exp, tools);
  if (!std::isnan(r.cost.bits_per_weight)) {
    r.weight_bits = r.cost.bits_per_weight;  // over the priced shape's layers, as `lpemu cost` reports it
  } else if (tools.costs != nullptr) {
    static std::mutex mu;  // the catalog parses lazily
    std::lock_guard lock(mu);
    r.weight_bits =
        cost::bits_per_weight(shape_of(model.config), layerwise_plan(plan, n_layers), *tools.costs);
  }
  r.eval = evaluate(model, plan, reference, tokens, *tools.quantizers, *tools.gemms);
  if (!exp.activations.empty()) {
    r.replay = is_linear_activations(exp.activations)
                   ? replay_linear(exp.activations, plan, *tools.quantizers, *tools.gemms)
                   : replay(exp.activations, model, plan, *tools.quantizers, *tools.gemms);
  }
  const auto ta = Clock::now();
  if (exp.attribution && !plan.is_reference()) {
    for (const auto role : engine::kAllRoles) {
      if (!role_in_model(role, model.config) || !role_used(plan, role, n_layers)) continue;
      const auto only = engine::only_role(plan, role);
      const auto e = evaluate(model, only, reference, tokens, *tools.quantizers, *tools.gemms);
      const auto spec0 = plan.resolve(role, 0, engine::LayerKind::attention, n_layers);
      r.attribution.push_back({std::string(engine::to_string(role)), spec0 ? spec0->format : "(per layer)",
                               e.mean_kl, e.mean_nll - e.ref_mean_nll});
    }
    if (r.gemm != "eigen") {
      // The accumulation's own share: the plan against the same plan on fp32 accumulation (the
      // operands are rounded the same way in both), so it never mixes in operand rounding.
      const auto e =
          evaluate(model, engine::without_gemms(plan), reference, tokens, *tools.quantizers, *tools.gemms);
      r.attribution.push_back({"gemm", r.gemm, r.eval.mean_kl - e.mean_kl, r.eval.mean_nll - e.mean_nll});
    }
  }
  const bool by_layer = exp.layer_attribution_all ||
                        std::find(exp.layer_attribution.begin(), exp.layer_attribution.end(), spec.label) !=
                            exp.layer_attribution.end();
  if (by_layer && !plan.is_reference()) {
    for (const auto role : engine::kAllRoles) {
      if (!role_in_model(role, model.config)) continue;
      for (int l = 0; l <= n_layers; ++l) {
        const int layer = l == n_layers ? -1 : l;  // the blocks, then the LM head
        const auto only = engine::only_role_at(plan, role, layer, n_layers);
        if (!only) continue;
        const auto e = evaluate(model, *only, reference, tokens, *tools.quantizers, *tools.gemms);
        r.layer_attribution.push_back(
            {std::string(engine::to_string(role)), layer, e.mean_kl, e.mean_nll - e.ref_mean_nll});
      }
    }
  }
  r.attribution_s = std::chrono::duration<double>(Clock::now() - ta).count();
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

// ---- plan result files ------------------------------------------------------------------------

void write_stats(io::H5File& f, const std::string& prefix, const std::vector<std::string>& names,
                 const std::vector<metrics::ErrorStats>& s) {
  if (names.empty()) return;
  std::vector<double> sq, ms, mx;
  for (const auto& e : s) {
    sq.push_back(e.sqnr_db);
    ms.push_back(e.mse);
    mx.push_back(e.max_abs);
  }
  f.write_strings(prefix + "/names", names);
  f.write_doubles(prefix + "/sqnr_db", {sq.size()}, sq.data());
  f.write_doubles(prefix + "/mse", {ms.size()}, ms.data());
  f.write_doubles(prefix + "/max_abs", {mx.size()}, mx.data());
}

std::vector<metrics::ErrorStats> read_stats(const io::H5File& f, const std::string& prefix,
                                            std::vector<std::string>& names) {
  std::vector<metrics::ErrorStats> out;
  if (!f.exists(prefix + "/names")) return out;
  names = f.read_strings(prefix + "/names");
  const auto sq = f.read_doubles(prefix + "/sqnr_db");
  const auto ms = f.read_doubles(prefix + "/mse");
  const auto mx = f.read_doubles(prefix + "/max_abs");
  for (std::size_t i = 0; i < names.size(); ++i) {
    metrics::ErrorStats e;
    e.sqnr_db = sq.at(i);
    e.mse = ms.at(i);
    e.max_abs = mx.at(i);
    out.push_back(e);
  }
  return out;
}

/// Writes one column of a record table: `field(row)` of every row, as strings, int64 (integers
/// and booleans as 0/1) or doubles.
template <class Rows, class Field>
void write_column(io::H5File& f, const std::string& path, const Rows& rows, Field field) {
  using V = std::decay_t<decltype(field(*rows.begin()))>;
  if constexpr (std::is_same_v<V, std::string>) {
    std::vector<std::string> v;
    for (const auto& r : rows) v.push_back(field(r));
    f.write_strings(path, v);
  } else if constexpr (std::is_integral_v<V>) {
    std::vector<std::int64_t> v;
    for (const auto& r : rows) v.push_back(static_cast<std::int64_t>(field(r)));
    f.write_ints(path, {v.size()}, v.data());
  } else {
    std::vector<double> v;
    for (const auto& r : rows) v.push_back(static_cast<double>(field(r)));
    f.write_doubles(path, {v.size()}, v.data());
  }
}

}  // namespace

void write_plan_into(io::H5File& f, const std::string& prefix, const PlanResult& r,
                     const std::string& fingerprint) {
  const std::string g = prefix.empty() ? "/" : prefix;
  if (!prefix.empty()) f.ensure_group(prefix);
  {
    f.set_attr(g, "fingerprint", fingerprint);
    f.set_attr(g, "label", r.label);
    f.set_attr(g, "plan_name", r.plan_name);
    f.set_attr(g, "weight_format", r.weight_format);
    f.set_attr(g, "gemm", r.gemm);
    f.set_attr(g, "weight_bits", r.weight_bits);
    f.set_attr(g, "index", static_cast<std::int64_t>(r.index));
    f.set_attr(g, "cost_target", r.cost.target);
    f.set_attr(g, "cost_datapath", r.cost.datapath);
    f.set_attr(g, "cost_computed", r.cost.computed);
    f.set_attr(g, "cost_bits_per_weight", r.cost.bits_per_weight);
    f.set_attr(g, "cost_note", r.cost.note);
    f.set_attr(g, "cost_tokens_per_s", r.cost.tokens_per_s);
    f.set_attr(g, "cost_joules_per_token", r.cost.joules_per_token);
    f.set_attr(g, "cost_mac_area_rel_bf16", r.cost.mac_area_rel_bf16);
    f.set_attr(g, "cost_mac_energy_pj", r.cost.mac_energy_pj);
    if (!r.cost.core.empty()) {
      f.set_attr(g, "core", r.cost.core);
      f.set_attr(g, "core_cycles", r.cost.core_cycles);
      f.set_attr(g, "core_seconds", r.cost.core_seconds);
      f.set_attr(g, "core_utilization", r.cost.core_utilization);
      f.set_attr(g, "core_energy_j", r.cost.core_energy_j);
    }
    if (!r.cost.cluster_system.empty()) {
      f.set_attr(g, "cluster_system", r.cost.cluster_system);
      f.set_attr(g, "cluster_parallel", r.cost.cluster_parallel);
      f.set_attr(g, "cluster_step_s", r.cost.cluster_step_s);
      f.set_attr(g, "cluster_tokens_per_s", r.cost.cluster_tokens_per_s);
      f.set_attr(g, "cluster_mfu", r.cost.cluster_mfu);
      f.set_attr(g, "cluster_memory_gb", r.cost.cluster_memory_gb);
      f.set_attr(g, "cluster_note", r.cost.cluster_note);
    }
    const auto& e = r.eval;
    f.set_attr(g, "mean_nll", e.mean_nll);
    f.set_attr(g, "perplexity", e.perplexity);
    f.set_attr(g, "ref_mean_nll", e.ref_mean_nll);
    f.set_attr(g, "ref_perplexity", e.ref_perplexity);
    f.set_attr(g, "mean_kl", e.mean_kl);
    f.set_attr(g, "max_kl", e.max_kl);
    f.set_attr(g, "top1_agreement", e.top1_agreement);
    f.set_attr(g, "logits_sqnr_db", e.logits.sqnr_db);
    f.set_attr(g, "logits_mse", e.logits.mse);
    f.set_attr(g, "logits_max_abs", e.logits.max_abs);
    const std::vector<std::int64_t> toks(e.tokens.begin(), e.tokens.end());
    const std::vector<std::int64_t> top(e.top1_agree.begin(), e.top1_agree.end());
    f.write_ints(prefix + "/tokens", {toks.size()}, toks.data());
    f.write_doubles(prefix + "/nll", {e.nll.size()}, e.nll.data());
    f.write_doubles(prefix + "/ref_nll", {e.ref_nll.size()}, e.ref_nll.data());
    f.write_doubles(prefix + "/kl", {e.kl.size()}, e.kl.data());
    f.write_ints(prefix + "/top1_agree", {top.size()}, top.data());
    std::vector<std::string> names;
    std::vector<metrics::ErrorStats> stats;
    for (const auto& [n, s] : e.residual) {
      names.push_back(n);
      stats.push_back(s);
    }
    write_stats(f, prefix + "/residual", names, stats);
    if (!r.replay.empty()) {
      const auto& rows = r.replay;
      const std::string rp = prefix + "/replay/";
      write_column(f, rp + "layer", rows, [](const auto& x) { return x.layer; });
      write_column(f, rp + "input", rows, [](const auto& x) { return x.input; });
      write_column(f, rp + "input_format", rows, [](const auto& x) { return x.input_format; });
      write_column(f, rp + "weight_format", rows, [](const auto& x) { return x.weight_format; });
      write_column(f, rp + "gemm", rows, [](const auto& x) { return x.gemm; });
      std::vector<std::string> tensor;
      std::vector<metrics::ErrorStats> in_e, w_e, out_e;
      for (const auto& row : rows) {
        tensor.push_back(row.tensor);
        in_e.push_back(row.input_error);
        w_e.push_back(row.weight_error);
        out_e.push_back(row.output_error);
      }
      write_stats(f, rp + "input_error", tensor, in_e);
      write_stats(f, rp + "weight_error", tensor, w_e);
      write_stats(f, rp + "output_error", tensor, out_e);
    }
    if (!r.attribution.empty()) {
      const std::string ap = prefix + "/attribution/";
      write_column(f, ap + "role", r.attribution, [](const auto& a) { return a.role; });
      write_column(f, ap + "format", r.attribution, [](const auto& a) { return a.format; });
      write_column(f, ap + "mean_kl", r.attribution, [](const auto& a) { return a.mean_kl; });
      write_column(f, ap + "delta_nll", r.attribution, [](const auto& a) { return a.delta_nll; });
    }
    if (!r.layer_attribution.empty()) {
      const std::string lp = prefix + "/layer_attribution/";
      write_column(f, lp + "role", r.layer_attribution, [](const auto& a) { return a.role; });
      write_column(f, lp + "layer", r.layer_attribution, [](const auto& a) { return a.layer; });
      write_column(f, lp + "mean_kl", r.layer_attribution, [](const auto& a) { return a.mean_kl; });
      write_column(f, lp + "delta_nll", r.layer_attribution, [](const auto& a) { return a.delta_nll; });
    }
    if (!r.cost.ops.empty()) {
      const auto& ops = r.cost.ops;
      const std::string cp = prefix + "/cost_ops/";
      write_column(f, cp + "name", ops, [](const auto& op) { return op.name; });
      write_column(f, cp + "kind", ops, [](const auto& op) { return op.kind; });
      write_column(f, cp + "weight_format", ops, [](const auto& op) { return op.b_format; });
      write_column(f, cp + "count", ops, [](const auto& op) { return op.count; });
      write_column(f, cp + "compute_bound", ops, [](const auto& op) { return op.compute_bound; });
      write_column(f, cp + "time_s", ops, [](const auto& op) { return op.time_s; });
      write_column(f, cp + "bytes", ops, [](const auto& op) { return op.bytes; });
      write_column(f, cp + "energy_j", ops, [](const auto& op) { return op.energy_j; });
    }
  }
}

void save_plan_result(const fs::path& file, const PlanResult& r, const std::string& fingerprint) {
  // Atomic: a crash or full disk never leaves a half-written result that resume would trust.
  io::write_h5_atomic(file, io::OutputPolicy{true, {}}, false, [&](io::H5File& f) {
    write_plan_into(f, "", r, fingerprint);
    // Timing: in the plan file only, not in the summary.
    f.set_attr("/", "seconds", r.seconds);
    f.set_attr("/", "attribution_s", r.attribution_s);
    const EvalTiming& t = r.eval.timing;
    for (const auto& [name, v] : {std::pair<const char*, double>{"plan_prepare_s", t.plan_prepare_s},
                                  {"plan_forward_s", t.plan_forward_s},
                                  {"reference_prepare_s", t.reference_prepare_s},
                                  {"reference_forward_s", t.reference_forward_s},
                                  {"hooks_s", t.hooks_s}}) {
      f.set_attr("/", name, v);
    }
  });
}

PlanResult load_plan_result(const fs::path& file, std::string* fingerprint) {
  const io::H5File f = io::H5File::open(file);
  PlanResult r;
  if (fingerprint != nullptr) *fingerprint = f.attr_string("/", "fingerprint");
  r.label = f.attr_string("/", "label");
  r.plan_name = f.attr_string("/", "plan_name");
  r.weight_format = f.attr_string("/", "weight_format");
  r.gemm = f.attr_string("/", "gemm");
  r.weight_bits = f.attr_double("/", "weight_bits");
  r.index = static_cast<std::size_t>(f.attr_int("/", "index"));
  r.seconds = f.attr_double("/", "seconds");
  // Files written before the timing breakdown existed have only "seconds".
  const auto timing = [&](const char* name) {
    return f.has_attr("/", name) ? f.attr_double("/", name) : 0.0;
  };
  r.attribution_s = timing("attribution_s");
  r.eval.timing = {timing("plan_prepare_s"), timing("plan_forward_s"), timing("reference_prepare_s"),
                   timing("reference_forward_s"), timing("hooks_s")};
  r.cost.target = f.attr_string("/", "cost_target");
  r.cost.datapath = f.attr_string("/", "cost_datapath");
  r.cost.computed = f.attr_string("/", "cost_computed");
  r.cost.bits_per_weight = f.attr_double("/", "cost_bits_per_weight");
  r.cost.note = f.attr_string("/", "cost_note");
  r.cost.tokens_per_s = f.attr_double("/", "cost_tokens_per_s");
  r.cost.joules_per_token = f.attr_double("/", "cost_joules_per_token");
  r.cost.mac_area_rel_bf16 = f.attr_double("/", "cost_mac_area_rel_bf16");
  r.cost.mac_energy_pj = f.attr_double("/", "cost_mac_energy_pj");
  if (f.has_attr("/", "core")) {
    r.cost.core = f.attr_string("/", "core");
    r.cost.core_cycles = f.attr_double("/", "core_cycles");
    r.cost.core_seconds = f.attr_double("/", "core_seconds");
    r.cost.core_utilization = f.attr_double("/", "core_utilization");
    r.cost.core_energy_j = f.attr_double("/", "core_energy_j");
  }
  if (f.has_attr("/", "cluster_system")) {
    r.cost.cluster_system = f.attr_string("/", "cluster_system");
    r.cost.cluster_parallel = f.attr_string("/", "cluster_parallel");
    r.cost.cluster_step_s = f.attr_double("/", "cluster_step_s");
    r.cost.cluster_tokens_per_s = f.attr_double("/", "cluster_tokens_per_s");
    r.cost.cluster_mfu = f.attr_double("/", "cluster_mfu");
    r.cost.cluster_memory_gb = f.attr_double("/", "cluster_memory_gb");
    r.cost.cluster_note = f.attr_string("/", "cluster_note");
  }
  auto& e = r.eval;
  e.mean_nll = f.attr_double("/", "mean_nll");
  e.perplexity = f.attr_double("/", "perplexity");
  e.ref_mean_nll = f.attr_double("/", "ref_mean_nll");
  e.ref_perplexity = f.attr_double("/", "ref_perplexity");
  e.mean_kl = f.attr_double("/", "mean_kl");
  e.max_kl = f.attr_double("/", "max_kl");
  e.top1_agreement = f.attr_double("/", "top1_agreement");
  e.logits.sqnr_db = f.attr_double("/", "logits_sqnr_db");
  e.logits.mse = f.attr_double("/", "logits_mse");
  e.logits.max_abs = f.attr_double("/", "logits_max_abs");
  for (const auto t : f.read_ints("/tokens")) e.tokens.push_back(static_cast<int>(t));
  e.nll = f.read_doubles("/nll");
  e.ref_nll = f.read_doubles("/ref_nll");
  e.kl = f.read_doubles("/kl");
  for (const auto t : f.read_ints("/top1_agree")) e.top1_agree.push_back(static_cast<int>(t));
  std::vector<std::string> names;
  const auto stats = read_stats(f, "/residual", names);
  for (std::size_t i = 0; i < stats.size(); ++i) e.residual.emplace_back(names[i], stats[i]);
  if (f.exists("/replay/layer")) {
    const auto layer = f.read_ints("/replay/layer");
    const auto input = f.read_strings("/replay/input");
    const auto ifmt = f.read_strings("/replay/input_format");
    const auto wfmt = f.read_strings("/replay/weight_format");
    const auto gemm = f.read_strings("/replay/gemm");
    std::vector<std::string> tensor;
    const auto in_e = read_stats(f, "/replay/input_error", tensor);
    const auto w_e = read_stats(f, "/replay/weight_error", tensor);
    const auto out_e = read_stats(f, "/replay/output_error", tensor);
    for (std::size_t i = 0; i < layer.size(); ++i) {
      ReplayRow row;
      row.layer = static_cast<int>(layer[i]);
      row.tensor = tensor.at(i);
      row.input = input.at(i);
      row.input_format = ifmt.at(i);
      row.weight_format = wfmt.at(i);
      row.gemm = gemm.at(i);
      row.input_error = in_e.at(i);
      row.weight_error = w_e.at(i);
      row.output_error = out_e.at(i);
      r.replay.push_back(row);
    }
  }
  if (f.exists("/attribution/role")) {
    const auto role = f.read_strings("/attribution/role");
    const auto fmt = f.read_strings("/attribution/format");
    const auto kl = f.read_doubles("/attribution/mean_kl");
    const auto dn = f.read_doubles("/attribution/delta_nll");
    for (std::size_t i = 0; i < role.size(); ++i)
      r.attribution.push_back({role[i], fmt.at(i), kl.at(i), dn.at(i)});
  }
  if (f.exists("/layer_attribution/role")) {
    const auto role = f.read_strings("/layer_attribution/role");
    const auto layer = f.read_ints("/layer_attribution/layer");
    const auto kl = f.read_doubles("/layer_attribution/mean_kl");
    const auto dn = f.read_doubles("/layer_attribution/delta_nll");
    for (std::size_t i = 0; i < role.size(); ++i) {
      r.layer_attribution.push_back({role[i], static_cast<int>(layer.at(i)), kl.at(i), dn.at(i)});
    }
  }
  if (f.exists("/cost_ops/name")) {
    const auto name = f.read_strings("/cost_ops/name");
    const auto kind = f.read_strings("/cost_ops/kind");
    const auto fmt = f.read_strings("/cost_ops/weight_format");
    const auto count = f.read_ints("/cost_ops/count");
    const auto bound = f.read_ints("/cost_ops/compute_bound");
    const auto t = f.read_doubles("/cost_ops/time_s");
    const auto b = f.read_doubles("/cost_ops/bytes");
    const auto en = f.read_doubles("/cost_ops/energy_j");
    for (std::size_t i = 0; i < name.size(); ++i) {
      cost::Op op;
      op.name = name[i];
      op.kind = kind.at(i);
      op.b_format = fmt.at(i);
      op.count = count.at(i);
      op.compute_bound = bound.at(i) != 0;
      op.time_s = t.at(i);
      op.bytes = b.at(i);
      op.energy_j = en.at(i);
      r.cost.ops.push_back(std::move(op));
    }
  }
  return r;
}

void check_cost_setup(const Experiment& exp, cost::Catalog& catalog) {
  if (exp.cost.target.empty()) return;
  const auto check = [&](const char* field, const std::string& value, const auto& lookup) {
    try {
      lookup();
    } catch (const Error& e) {
      throw SpecError(exp.origin.string() + ": cost." + field + " = \"" + value + "\": " + e.what());
    }
  };
  check("target", exp.cost.target, [&] { catalog.target(exp.cost.target); });
  check("shape", exp.cost.shape, [&] { catalog.shape(exp.cost.shape); });
}

SweepFiles run_sweep(const Experiment& exp, const Toolbox& tools, const SweepOptions& opt) {
  if (tools.quantizers == nullptr || tools.gemms == nullptr)
    throw Error("run_sweep: toolbox has no factories");
  // A [cost] name the catalog does not know fails here, before any plan runs (not as NaN costs).
  if (tools.costs != nullptr) check_cost_setup(exp, *tools.costs);
  if (opt.shards < 1 || opt.shard < 0 || opt.shard >= opt.shards) {
    throw SpecError("--shard " + std::to_string(opt.shard) + "/" + std::to_string(opt.shards) +
                    ": expected I/N with 0 <= I < N");
  }
  // The whole experiment is checked before any plan runs or any file is written: every plan
  // (its formats, datapaths and layers; a grid's generated datapaths) and the reference plan.
  for (const auto& p : exp.plans) build_plan(p, tools, exp.origin);
  engine::load_plan(exp.reference, *tools.quantizers, *tools.gemms, tools.search_dirs);
  const fs::path out = opt.out.empty() ? exp.out_dir : opt.out;
  // The manifest and the plan results are checkpoints a rerun resumes from: kept when the run fails
  // later (the summary files below are undone with the run).
  std::optional<io::OutputTransaction::Pause> checkpoints(std::in_place);
  io::check_output_dir(out, kManifest);
  NewFolderGuard fresh(out);
  fs::create_directories(out / "plans");
  if (!opt.datapath_files.empty()) fs::create_directories(out / "datapath");
  for (const auto& [name, text] : opt.datapath_files)
    detail::write_text(out / "datapath" / (name + ".toml"), text);
  Manifest m{exp.fingerprint(), exp.name, exp.model, {}};
  for (const auto& p : exp.plans) m.labels.push_back(p.label);
  if (fs::exists(out / kManifest)) {
    const Manifest old = read_manifest(out);
    if (old.fingerprint != m.fingerprint && !opt.force) {
      throw IoError(out.string() +
                    ": holds results of a different experiment (or of an edited one); use another "
                    "--out, or --force to discard them");
    }
    if (old.fingerprint != m.fingerprint) {
      for (const auto& e : fs::directory_iterator(out / "plans")) fs::remove(e.path());
    }
  }
  write_manifest(out, m);

  std::vector<fs::path> dirs(tools.search_dirs.begin(), tools.search_dirs.end());
  const auto load0 = Clock::now();
  const engine::Model model = engine::load_model(engine::resolve_model_path(exp.model, dirs));
  const double load_s = std::chrono::duration<double>(Clock::now() - load0).count();
  if (model.tokenizer.empty() && exp.tokens.empty()) {
    throw IoError(model.path.string() +
                  ": model has no tokenizer to read the text with (give source.tokens)");
  }
  std::vector<int> tokens = !exp.tokens.empty()
                                ? engine::load_token_ids(exp.tokens, model.config.vocab_size)
                                : model.tokenizer.encode(lpemu::detail::read_spec_file(exp.text, "text"));
  if (exp.max_tokens > model.config.seq_len) {
    throw SpecError(exp.origin.string() + ": max_tokens = " + std::to_string(exp.max_tokens) + ": model '" +
                    exp.model + "' has seq_len = " + std::to_string(model.config.seq_len) +
                    "; expected at most that");
  }
  const auto limit = static_cast<std::size_t>(exp.max_tokens > 0 ? exp.max_tokens : model.config.seq_len);
  if (tokens.size() > limit) tokens.resize(limit);
  const engine::PrecisionPlan reference =
      engine::load_plan(exp.reference, *tools.quantizers, *tools.gemms, tools.search_dirs);

  std::vector<std::size_t> mine;
  for (std::size_t i = 0; i < exp.plans.size(); ++i) {
    if (static_cast<int>(i % static_cast<std::size_t>(opt.shards)) == opt.shard) mine.push_back(i);
  }
  const auto t0 = Clock::now();
  std::mutex mu;
  std::size_t done = 0;
  double computed_s = 0;
  std::size_t computed = 0;
  const auto one = [&](std::size_t k) {
    const std::size_t i = mine[k];
    const fs::path file = out / "plans" / plan_file_name(i);
    bool resumed = false;
    if (fs::exists(file) && !opt.force) {
      std::string fp;
      const PlanResult old = load_plan_result(file, &fp);
      resumed = fp == m.fingerprint && old.label == exp.plans[i].label;
    }
    double secs = 0;
    if (!resumed || !fs::exists(fs::path(file).replace_extension(".toml"))) {
      detail::write_text(fs::path(file).replace_extension(".toml"),
                         plan_text(exp.plans[i], build_plan(exp.plans[i], tools, exp.origin)));
    }
    if (!resumed) {
      const PlanResult r = evaluate_plan(i, exp.plans[i], exp, tools, model, reference, tokens);
      save_plan_result(file, r, m.fingerprint);
      secs = r.seconds;
    }
    std::lock_guard lock(mu);
    ++done;
    if (!resumed) {
      computed_s += secs;
      ++computed;
    }
    if (opt.on_progress) {
      Progress p;
      p.done = done;
      p.total = mine.size();
      p.label = exp.plans[i].label;
      p.resumed = resumed;
      p.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
      const double per = computed > 0 ? computed_s / static_cast<double>(computed) : 0.0;
      p.remaining_s = per * static_cast<double>(mine.size() - done) / std::max(1, opt.jobs);
      opt.on_progress(p);
    }
  };
  if (opt.jobs <= 1) {
    for (std::size_t k = 0; k < mine.size(); ++k) one(k);
  } else {
    tbb::task_arena arena(opt.jobs);
    arena.execute([&] { tbb::parallel_for(std::size_t{0}, mine.size(), [&](std::size_t k) { one(k); }); });
  }
  checkpoints.reset();
  for (std::size_t i = 0; i < exp.plans.size(); ++i) {
    if (!fs::exists(out / "plans" / plan_file_name(i))) {
      SweepFiles partial;
      partial.dir = out;
      partial.load_s = load_s;
      fresh.release();
      return partial;  // a shard: the summary comes from `lpemu sweep merge`
    }
  }
  SweepFiles files = write_summary(out);
  files.load_s = load_s;
  fresh.release();
  return files;
}

SweepFiles merge_sweeps(const std::vector<fs::path>& dirs, const fs::path& out) {
  if (dirs.empty()) throw Error("sweep merge: no input directories");
  const Manifest m = read_manifest(dirs.front());
  for (const auto& d : dirs) {
    if (read_manifest(d).fingerprint != m.fingerprint) {
      throw IoError(d.string() + ": comes from a different experiment than " + dirs.front().string());
    }
  }
  io::check_output_dir(out, kManifest);
  std::error_code ec;
  if (fs::exists(out / kManifest, ec) && read_manifest(out).fingerprint != m.fingerprint) {
    throw IoError(out.string() + ": holds results of a different experiment");
  }
  // Every plan found and read before anything is written: a missing, corrupt or foreign plan
  // leaves --out as it was.
  std::vector<fs::path> sources(m.labels.size());
  for (std::size_t i = 0; i < m.labels.size(); ++i) {
    const std::string name = plan_file_name(i);
    if (fs::exists(out / "plans" / name, ec)) sources[i] = out / "plans" / name;
    for (const auto& d : dirs) {
      if (sources[i].empty() && fs::exists(d / "plans" / name, ec)) sources[i] = d / "plans" / name;
    }
    if (sources[i].empty()) {
      throw IoError("sweep merge: plan " + std::to_string(i) + " ('" + m.labels[i] +
                    "') is in none of the directories");
    }
    std::string fp;
    const PlanResult r = load_plan_result(sources[i], &fp);
    if (fp != m.fingerprint || r.label != m.labels[i]) {
      throw IoError(sources[i].string() + ": made by a different experiment (or another plan) than " +
                    dirs.front().string());
    }
  }
  // One unit: a write that fails (a full disk) removes what this merge wrote and restores what it
  // replaced.
  io::OutputTransaction outputs;
  io::create_output_dir(out / "plans");
  write_manifest(out, m);
  for (std::size_t i = 0; i < m.labels.size(); ++i) {
    const fs::path target = out / "plans" / plan_file_name(i);
    if (!fs::exists(target, ec)) io::write_file_atomic(target, io::read_input(sources[i]), {});
  }
  SweepFiles files = write_summary(out);
  outputs.commit();
  return files;
}

SweepFiles write_summary(const fs::path& dir) {
  const Manifest m = read_manifest(dir);
  std::vector<PlanResult> plans;
  std::vector<fs::path> plan_files;
  for (std::size_t i = 0; i < m.labels.size(); ++i) {
    const fs::path file = dir / "plans" / plan_file_name(i);
    if (!fs::exists(file)) throw IoError(file.string() + ": missing result of plan '" + m.labels[i] + "'");
    std::string fp;
    plans.push_back(load_plan_result(file, &fp));
    if (fp != m.fingerprint) throw IoError(file.string() + ": made by a different experiment");
    plan_files.push_back(file);
  }
  SweepFiles files = write_report_files(dir, m.name, m.model, m.fingerprint, plans);
  files.plan_files = std::move(plan_files);
  files.plans = std::move(plans);
  return files;
}

}  // namespace lpemu::experiment
