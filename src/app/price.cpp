#include "lpemu/app/price.hpp"

#include <algorithm>
#include <iostream>

#include "lpemu/core/core.hpp"
#include "lpemu/cost/catalog.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/figures.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/io/svg_plot.hpp"

namespace lpemu::app {
namespace {

const char* phase_name(cost::Phase p) { return p == cost::Phase::prefill ? "prefill" : "decode"; }

Fields op_fields(const cost::Op& op) {
  return {{"name", op.name},
          {"kind", op.kind},
          {"count", op.count},
          {"rate_class", op.rate_class},
          {"a_format", op.a_format},
          {"b_format", op.b_format},
          {"datapath", op.datapath},
          {"passes", op.passes},
          {"rate_note", op.rate_note},
          {"flops", op.flops},
          {"bytes", op.bytes},
          {"compute_s", op.compute_s},
          {"memory_s", op.memory_s},
          {"time_s", op.time_s},
          {"bound", op.compute_bound ? "compute" : "memory"},
          {"energy_j", op.energy_j}};
}

Fields phase_fields(const experiment::Pricing& p) {
  const cost::Workload& w = p.workload;
  const cost::Roofline& r = p.roofline;
  Fields ops = Fields::array();
  for (const auto& op : w.ops) ops.push_back(op_fields(op));
  Fields f = {{"phase", phase_name(w.phase)},
              {"batch", w.batch},
              {"context", w.context},
              {"tokens", w.tokens},
              {"time_s", r.time_s},
              {"time_per_token_s", r.time_per_token()},
              {"tokens_per_s", r.tokens_per_s()},
              {"energy_j", r.energy_j},
              {"joules_per_token", r.energy_per_token()},
              {"compute_bound_time_s", r.compute_bound_time_s},
              {"notes", w.notes},
              {"ops", ops}};
  // With --core: what the GEMM ops take on the core (experiment::core_totals).
  if (p.core) {
    f["core_gemms"] = {{"name", p.core->core},
                       {"cycles", p.core->cycles},
                       {"seconds", p.core->seconds},
                       {"macs", p.core->macs},
                       {"utilization", p.core->utilization},
                       {"energy_j", p.core->energy_j},
                       {"dram_bytes", p.core->dram_bytes}};
  }
  return f;
}

Fields train_fields(const cost::TrainResult& r) {
  const auto& s = r.time;
  const auto& m = r.memory;
  return {{"parallel", r.config.par.str()},
          {"micro_batch", r.config.micro_batch},
          {"microbatches", r.microbatches},
          {"recompute", cost::recompute_name(r.config.recompute)},
          {"rate_class", r.rate_class},
          {"step_s", s.step_s},
          {"compute_s", s.compute_s},
          {"memory_s", s.memory_s},
          {"tp_s", s.tp_s},
          {"cp_s", s.cp_s},
          {"ep_s", s.ep_s},
          {"pp_s", s.pp_s},
          {"dp_s", s.dp_s},
          {"bubble_s", s.bubble_s},
          {"optimizer_s", s.optimizer_s},
          {"recompute_s", s.recompute_s},
          {"tokens_per_s", r.tokens_per_s},
          {"tflops_per_device", r.tflops_per_device},
          {"mfu", r.mfu},
          {"memory",
           {{"weights", m.weights},
            {"gradients", m.gradients},
            {"optimizer", m.optimizer},
            {"activations", m.activations},
            {"total", m.total},
            {"capacity", m.capacity},
            {"fits", m.fits},
            {"why", m.why}}},
          {"warnings", r.warnings}};
}

Fields cluster_fields(const experiment::ClusterReport& c, int top) {
  const cost::PlanFormats& pf = c.formats.formats;
  Fields f = {{"system", c.system.name}, {"device", c.target.name}};
  f["formats"] = {{"weights", pf.weights.name},
                  {"activations", pf.activations.name},
                  {"kv_cache", pf.kv_cache.name},
                  {"datapath", c.formats.datapath}};
  f["notes"] = c.formats.notes;
  if (!c.train.empty()) {
    const cost::TrainFormats& t = c.train_formats;
    f["formats"]["gradients"] = t.gradients.name;
    f["formats"]["optimizer_states"] = t.optimizer_states.name;
    f["formats"]["master_weights"] = t.master_weights.name;
    f["formats"]["gradient_wire"] = t.grad_comm.name;
    f["formats"]["activation_wire"] = t.act_comm.name;
    Fields configs = Fields::array();
    for (std::size_t i = 0; i < c.train.size() && static_cast<int>(i) < top; ++i)
      configs.push_back(train_fields(c.train[i]));
    f["train"] = configs;
    f["configurations"] = c.train.size();
    if (c.fewest_devices > 0) f["fewest_devices"] = c.fewest_devices;
    return f;
  }
  f["parallel"] = c.parallel.str();
  f["max_batch"] = c.max_batch;
  Fields rows = Fields::array();
  for (const auto& r : c.inference) {
    rows.push_back({{"phase", phase_name(r.phase)},
                    {"batch", r.batch},
                    {"context", r.context},
                    {"step_s", r.step_s},
                    {"compute_s", r.compute_s},
                    {"memory_s", r.memory_s},
                    {"tp_s", r.tp_s},
                    {"pp_s", r.pp_s},
                    {"launch_s", r.launch_s},
                    {"tokens_per_s", r.tokens_per_s},
                    {"bytes_per_device", r.weight_bytes + r.kv_bytes},
                    {"fits", r.fits},
                    {"why", r.why},
                    {"warnings", r.warnings}});
  }
  f["inference"] = rows;
  return f;
}

}  // namespace

bool PriceRequest::cluster() const {
  return !setup.system.empty() || setup.devices > 0 || !setup.parallel.empty() || setup.search ||
         setup.phase == "train";
}

engine::PrecisionPlan priced_plan(experiment::Context& ctx, const PriceRequest& a) {
  engine::PrecisionPlan plan = ctx.load_plan(a.plan);
  experiment::apply_overrides(plan, a.setup, "command line");
  return plan;
}

cost::Catalog cost_catalog(experiment::Context& ctx, const std::vector<std::filesystem::path>& cost_dirs) {
  // One user-directory convention: --formats-dir DIRs hold hardware/, shapes/ and systems/ too;
  // cost_dirs add to them for one call.
  std::vector<std::filesystem::path> dirs = ctx.formats_dirs;
  dirs.insert(dirs.end(), cost_dirs.begin(), cost_dirs.end());
  return cost::Catalog(ctx.formats(), dirs, &ctx.blocks(), &ctx.datapaths());
}

PriceResult price(experiment::Context& ctx, const PriceRequest& a) {
  if (!a.cluster() && (a.target.empty() || a.model.empty()))
    throw SpecError("lpemu cost: --target and --model are required (see `lpemu cost --help`)");
  if (a.model.empty()) throw SpecError("lpemu cost: --model is required (see `lpemu cost --help`)");
  if (a.setup.phase != "prefill" && a.setup.phase != "decode" && a.setup.phase != "both" &&
      a.setup.phase != "train")
    throw SpecError("cost: phase \"" + a.setup.phase + "\": expected prefill, decode, both or train");
  if (a.setup.batch < 1)
    throw SpecError("cost: batch = " + std::to_string(a.setup.batch) + ": expected >= 1");
  if (a.setup.context < 1)
    throw SpecError("cost: context = " + std::to_string(a.setup.context) + ": expected >= 1");
  if (a.top < 0) throw SpecError("cost: top = " + std::to_string(a.top) + ": expected >= 0");
  cost::Catalog cat = cost_catalog(ctx, a.cost_dirs);
  PriceResult out;
  out.top = a.top;
  out.model = cat.shape(a.model);
  if (a.cluster()) {
    if (!a.core.empty())
      throw SpecError(
          "lpemu cost: --core times the GEMMs of one device; expected no --system, --devices, "
          "--parallel, --search or --phase train with it");
    if (a.setup.system.empty())
      throw SpecError(
          "lpemu cost: --system is required with --devices, --parallel, --search or --phase train");
    const cost::System sys = cost::load_system(a.setup.system, cat.user_dirs());
    const engine::PrecisionPlan plan = ctx.load_plan(a.plan);
    out.plan = plan.name;
    out.plan_origin = plan.origin;
    experiment::ClusterSetup setup = a.setup;
    if (setup.target.empty()) setup.target = a.target;
    out.cluster = experiment::price_cluster(plan, out.model, sys, cat, setup);
    out.target = out.cluster->target;
    return out;
  }
  out.target = cat.target(a.target);
  if (!a.setup.datapath.empty())
    cat.datapath(a.setup.datapath);  // an unknown name fails here, naming the closest
  const engine::PrecisionPlan plan = priced_plan(ctx, a);
  out.plan = plan.name;
  out.plan_origin = plan.origin;
  cost::GemmTimer gemm_time;
  std::optional<core::Core> on_core;
  if (!a.core.empty()) {
    on_core = core::load_core(a.core, ctx.formats_dirs);
    out.core = on_core->name;
    gemm_time = experiment::core_gemm_timer(*on_core, ctx.datapaths());
  }
  for (const auto ph : {cost::Phase::prefill, cost::Phase::decode}) {
    if (a.setup.phase != "both" && a.setup.phase != phase_name(ph)) continue;
    out.phases.push_back(experiment::price_plan(plan, out.model, out.target, cat, ph, a.setup.batch,
                                                a.setup.context, gemm_time));
    if (on_core)
      out.phases.back().core = experiment::core_totals(*on_core, ctx.datapaths(), out.phases.back().workload);
  }
  if (!a.plot_dir.empty()) {
    io::create_output_dir(a.plot_dir);
    for (const auto& p : out.phases) {
      const std::string ph = phase_name(p.workload.phase);
      const auto svg = a.plot_dir / ("cost_" + ph + ".svg");
      io::write_svg(svg, io::layout(experiment::cost_breakdown_chart(
                             p.workload, "Where " + ph + " time goes: " + out.model.name + " on " +
                                             out.target.name + ", plan " + plan.name)));
      out.plots.push_back(svg);
    }
  }
  return out;
}

Fields fields(const PriceResult& r) {
  Fields f = {{"target", r.target.name}, {"model", r.model.name}};
  f["plan"] = {{"name", r.plan}, {"origin", r.plan_origin}};
  if (r.cluster) {
    f["cluster"] = cluster_fields(*r.cluster, r.top);
    return f;
  }
  const experiment::Pricing& p0 = r.phases.front();
  const cost::Workload& w0 = p0.workload;
  f["plan"]["bits_per_weight"] = w0.bits_per_weight;
  f["plan"]["computed"] = p0.computed;
  f["plan"]["datapath"] = p0.datapath;
  f["plan"]["mac_area_rel_bf16"] = p0.mac_area_rel_bf16;
  f["plan"]["mac_energy_pj"] = p0.mac_energy_pj;
  f["core"] = r.core;
  f["bandwidth_gb_s"] = r.target.bandwidth_gb_s;
  f["capacity_gb"] = r.target.capacity_gb;
  f["weight_bytes"] = w0.weight_bytes;
  f["kv_cache_bytes"] = w0.kv_cache_bytes;
  f["fits_in_memory"] = p0.roofline.fits_in_memory;
  Fields phases = Fields::array();
  for (const auto& p : r.phases) phases.push_back(phase_fields(p));
  f["phases"] = phases;
  return f;
}

MacResult price_mac(experiment::Context& ctx, const MacRequest& a) {
  cost::Catalog cat = cost_catalog(ctx, a.cost_dirs);
  MacResult out;
  out.datapath = cat.datapath(a.datapath.empty() ? "generic_bf16" : a.datapath);
  const cost::MacDatapath& dp = out.datapath;
  const cost::CostFormat fa = a.format.empty() ? dp.a : cat.format(a.format);
  const cost::CostFormat fb = !a.format_b.empty() ? cat.format(a.format_b) : a.format.empty() ? dp.b : fa;
  out.mac = cost::mac_cost(fa, fb, dp);
  for (const char* base : {"bf16", "mxfp8_e4m3"}) {
    const cost::CostFormat b = cat.format(base);
    const cost::MacCost mb = cost::mac_cost(b, b, dp);
    out.baselines.push_back({base, mb, cost::iso_area_count(out.mac, mb, 1024)});
  }
  if (!a.iso_target.empty()) {
    const cost::Target& t = cat.target(a.iso_target);
    out.iso_target = t.name;
    out.iso_unit = t.unit_name;
    out.iso_class = a.iso_class;
    out.iso_format = a.iso_format.empty() ? a.iso_class : a.iso_format;
    out.iso = cost::iso_area_peak(t, a.iso_class, cat.format(out.iso_format), fa, dp);
    out.iso_listed_tflops = t.find_rate(a.iso_class)->tflops;
  }
  return out;
}

Fields fields(const MacResult& r) {
  const auto mac_fields = [](const cost::MacCost& m) {
    Fields parts = Fields::array();
    for (const auto& p : m.parts) parts.push_back({{"name", p.name}, {"fa", p.fa}, {"formula", p.formula}});
    return Fields{{"a_format", m.a_format},
                  {"b_format", m.b_format},
                  {"total_fa", m.total_fa},
                  {"area_um2_45nm", m.area_um2_45nm()},
                  {"energy_pj_45nm", m.energy_pj_45nm()},
                  {"parts", parts}};
  };
  const cost::MacDatapath& dp = r.datapath;
  Fields f = {{"datapath",
               {{"name", dp.name},
                {"fused_terms", dp.fused_terms},
                {"alignment_bits", dp.alignment_bits},
                {"accumulator", dp.accumulator},
                {"promote_every", dp.promote_every},
                {"source", dp.source},
                {"unverified", dp.unverified}}},
              {"mac", mac_fields(r.mac)}};
  Fields baselines = Fields::array();
  for (const auto& b : r.baselines) {
    baselines.push_back({{"format", b.format},
                         {"area_ratio", r.mac.total_fa / b.mac.total_fa},
                         {"fit_in_1024", b.fit_in_1024},
                         {"mac", mac_fields(b.mac)}});
  }
  f["baselines"] = baselines;
  if (r.iso) {
    f["iso"] = {{"target", r.iso_target},
                {"rate_class", r.iso_class},
                {"budget_format", r.iso_format},
                {"unit", r.iso_unit},
                {"budget_macs_per_clock_per_unit", r.iso->budget_macs_per_clock_per_unit},
                {"macs_per_clock_per_unit", r.iso->macs_per_clock_per_unit},
                {"tflops", r.iso->tflops},
                {"listed_tflops", r.iso_listed_tflops}};
  }
  return f;
}

MacRequest mac_request(const Fields& f) {
  MacRequest r;
  FieldReader in(f, "cost mac");
  in.read("format", r.format);
  in.read("format_b", r.format_b);
  in.read("datapath", r.datapath);
  in.read("iso_target", r.iso_target);
  in.read("iso_class", r.iso_class);
  in.read("iso_format", r.iso_format);
  in.read("cost_dirs", r.cost_dirs);
  in.finish();
  return r;
}

TargetsResult list_targets(experiment::Context& ctx, const TargetsRequest& a) {
  cost::Catalog cat = cost_catalog(ctx, a.cost_dirs);
  TargetsResult out;
  for (const auto& name : cat.target_names()) out.targets.push_back(cat.target(name));
  return out;
}

Fields fields(const TargetsResult& r) {
  Fields targets = Fields::array();
  for (const auto& t : r.targets) {
    Fields rates = Fields::array();
    for (const auto& [cls, x] : t.rates) {
      const auto rebuilt = t.rebuilt_tflops(cls);
      rates.push_back({{"rate_class", cls},
                       {"tflops", x.tflops},
                       {"rebuilt_tflops", rebuilt ? Fields(*rebuilt) : Fields(nullptr)},
                       {"datapath", t.datapath_for(cls)},
                       {"unverified", x.unverified},
                       {"source", x.derived_from.empty() ? x.source : x.derived_from}});
    }
    targets.push_back({{"name", t.name},
                       {"display_name", t.display_name},
                       {"kind", t.kind},
                       {"bandwidth_gb_s", t.bandwidth_gb_s},
                       {"capacity_gb", t.capacity_gb},
                       {"bandwidth_source", t.bandwidth_source},
                       {"units", t.units},
                       {"unit_name", t.unit_name},
                       {"clock_mhz", t.clock_mhz},
                       {"compute_unverified", t.compute_unverified},
                       {"compute_note", t.compute_note},
                       {"rates", rates}});
  }
  return {{"targets", targets}};
}

TargetsRequest targets_request(const Fields& f) {
  TargetsRequest r;
  FieldReader in(f, "cost targets");
  in.read("cost_dirs", r.cost_dirs);
  in.finish();
  return r;
}

PriceRequest price_request(const Fields& f) {
  PriceRequest r;
  FieldReader in(f, "cost");
  experiment::ClusterSetup& s = r.setup;
  in.read("target", r.target);
  in.read("model", r.model);
  in.read("plan", r.plan);
  in.read("cost_dirs", r.cost_dirs);
  in.read("phase", s.phase);
  in.read("batch", s.batch);
  in.read("context", s.context);
  in.read("weights", s.weights);
  in.read("activations", s.activations);
  in.read("kv_cache", s.kv_cache);
  in.read("datapath", s.datapath);
  in.read("system", s.system);
  in.read("devices", s.devices);
  in.read("parallel", s.parallel);
  in.read("search", s.search);
  in.read("step_time", s.step_time);
  in.read("batches", s.batches);
  in.read("global_batch", s.global_batch);
  in.read("micro_batch", s.micro_batch);
  in.read("recompute", s.recompute);
  in.read("gradients", s.gradients);
  in.read("optimizer_states", s.optimizer_states);
  in.read("master_weights", s.master_weights);
  in.read("comm", s.comm);
  in.read("grad_comm", s.grad_comm);
  in.read("act_comm", s.act_comm);
  in.read("flash_attention", s.flash_attention);
  in.read("overlap_dp", s.overlap_dp);
  in.read("core", r.core);
  in.read("top", r.top);
  in.read("plot_dir", r.plot_dir);
  in.finish();
  return r;
}

}  // namespace lpemu::app
