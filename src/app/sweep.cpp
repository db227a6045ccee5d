#include "lpemu/app/sweep.hpp"

#include "lpemu/app/evaluate.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/experiment.hpp"
#include "lpemu/experiment/study.hpp"

namespace lpemu::app {

SweepReport sweep(experiment::Context& ctx, const SweepRequest& a) {
  if (a.experiment.empty()) throw SpecError("sweep: an experiment file is required");
  if (a.jobs < 1) throw SpecError("sweep: jobs = " + std::to_string(a.jobs) + ": expected >= 1");
  if (a.shards < 1 || a.shard < 0 || a.shard >= a.shards) {
    throw SpecError("sweep: shard " + std::to_string(a.shard) + "/" + std::to_string(a.shards) +
                    ": expected 0 <= shard < shards");
  }
  const experiment::Experiment exp = experiment::load_experiment(a.experiment);
  experiment::SweepOptions opt;
  opt.out = a.out;
  opt.jobs = a.jobs;
  opt.force = a.force;
  opt.shard = a.shard;
  opt.shards = a.shards;
  opt.on_progress = a.progress;
  // An accumulator study's generated datapaths join the context's datapaths before the plans that
  // name them are built; the sweep writes them beside its results.
  for (auto& g : experiment::study_datapaths(exp, ctx.datapaths(), ctx.formats())) {
    opt.datapath_files.emplace_back(g.datapath.name, g.toml);
    ctx.add_datapath(std::move(g.datapath), exp.study->origin);
  }
  if (a.on_start) a.on_start(exp.name, exp.plans.size());
  SweepReport out{exp.name, a.shard, a.shards, opt.out.empty() ? exp.out_dir : opt.out, {}};
  out.files = experiment::run_sweep(exp, ctx.toolbox(), opt);
  return out;
}

SweepReport sweep_merge(const std::vector<std::filesystem::path>& dirs, const std::filesystem::path& out) {
  SweepReport r;
  r.dir = out;
  r.files = experiment::merge_sweeps(dirs, out);
  return r;
}

Fields fields(const experiment::PlanResult& p) {
  const experiment::PlanCost& c = p.cost;
  const experiment::EvalResult& e = p.eval;
  Fields f = {{"index", p.index},         {"label", p.label}, {"plan", p.plan_name},
              {"weight_format", p.weight_format}, {"gemm", p.gemm}, {"weight_bits", p.weight_bits}};
  f["eval"] = {{"tokens", e.tokens.size()},     {"mean_nll", e.mean_nll},   {"perplexity", e.perplexity},
               {"ref_mean_nll", e.ref_mean_nll}, {"ref_perplexity", e.ref_perplexity},
               {"mean_kl", e.mean_kl},           {"max_kl", e.max_kl},       {"top1_agreement", e.top1_agreement},
               {"logits", fields(e.logits)}, {"nll", e.nll}, {"ref_nll", e.ref_nll}, {"kl", e.kl},
               {"top1_agree", e.top1_agree}};
  f["cost"] = {{"target", c.target},
               {"datapath", c.datapath},
               {"note", c.note},
               {"bits_per_weight", c.bits_per_weight},
               {"tokens_per_s", c.tokens_per_s},
               {"joules_per_token", c.joules_per_token},
               {"mac_area_rel_bf16", c.mac_area_rel_bf16},
               {"mac_energy_pj", c.mac_energy_pj}};
  if (!c.cluster_system.empty()) {
    f["cluster"] = {{"system", c.cluster_system},       {"parallel", c.cluster_parallel},
                    {"step_s", c.cluster_step_s},       {"tokens_per_s", c.cluster_tokens_per_s},
                    {"mfu", c.cluster_mfu},             {"memory_gb", c.cluster_memory_gb},
                    {"note", c.cluster_note}};
  }
  f["seconds"] = p.seconds;
  return f;
}

Fields fields(const SweepReport& r) {
  const experiment::SweepFiles& x = r.files;
  Fields f = {{"experiment", r.name},
              {"dir", r.dir.string()},
              {"shard", r.shard},
              {"shards", r.shards},
              {"complete", !x.report_md.empty()},
              {"report_md", x.report_md.string()},
              {"report_html", x.report_html.string()},
              {"results_csv", x.results_csv.string()},
              {"results_h5", x.results_h5.string()}};
  Fields plots = Fields::array();
  for (const auto& p : x.plots) plots.push_back(p.string());
  f["plots"] = plots;
  Fields plans = Fields::array();
  for (const auto& p : x.plans) plans.push_back(fields(p));
  f["plans"] = plans;
  return f;
}

SweepRequest sweep_request(const Fields& f) {
  SweepRequest r;
  FieldReader in(f, "sweep");
  in.read("experiment", r.experiment);
  in.read("out", r.out);
  in.read("jobs", r.jobs);
  in.read("shard", r.shard);
  in.read("shards", r.shards);
  in.read("force", r.force);
  in.finish();
  return r;
}

}  // namespace lpemu::app
