#include "lpemu/app/sweep.hpp"

#include <algorithm>

#include "lpemu/app/evaluate.hpp"
#include "lpemu/app/train_sweep.hpp"
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
  if (exp.train) {  // a training experiment: every plan trained (train_sweep.hpp)
    if (a.shards != 1) throw SpecError("sweep: a [train] experiment runs in one shard");
    if (a.on_start) a.on_start(exp.name, exp.plans.size() + exp.train->seeds.size() - 1);
    const TrainSweepReport t = train_sweep(ctx, exp, a.out);
    SweepReport out{exp.name, 0, 1, t.dir, {}};
    out.files.dir = t.dir;
    out.files.results_csv = t.results_csv;
    out.files.report_md = t.report_md;
    out.files.plots = {t.loss_svg};
    return out;
  }
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

SweepReport sweep_merge(const MergeRequest& a) {
  if (a.dirs.empty() || a.out.empty())
    throw SpecError("sweep merge: shard directories and an output directory are required");
  SweepReport r;
  r.dir = a.out;
  r.files = experiment::merge_sweeps(a.dirs, a.out);
  return r;
}

MergeRequest merge_request(const Fields& f) {
  MergeRequest r;
  FieldReader in(f, "sweep merge");
  in.read("dirs", r.dirs);
  in.read("out", r.out);
  in.finish();
  return r;
}

std::vector<experiment::PlanResult> read_sweep(const std::filesystem::path& dir) {
  const auto plans = dir / "plans";
  if (!std::filesystem::is_directory(plans))
    throw IoError(dir.string() + ": no plans/ folder (not a sweep output)");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(plans)) {
    if (e.path().extension() == ".h5") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<experiment::PlanResult> out;
  for (const auto& f : files) out.push_back(experiment::load_plan_result(f));
  return out;
}

Fields fields(const experiment::PlanResult& p) {
  const experiment::SweepCost& c = p.cost;
  const experiment::EvalResult& e = p.eval;
  Fields f = {{"index", p.index},    {"label", p.label},
              {"plan", p.plan_name}, {"weight_format", p.weight_format},
              {"gemm", p.gemm},      {"tokens", e.tokens.size()}};
  Fields metrics = Fields::object();
  for (const auto& [name, value] : experiment::plan_metrics(p)) metrics[name] = value;
  f["metrics"] = metrics;
  if (!c.target.empty()) {
    f["cost"] = {{"target", c.target}, {"datapath", c.datapath}, {"computed", c.computed}, {"note", c.note}};
  }
  if (!c.cluster_system.empty()) {
    f["cluster"] = {{"system", c.cluster_system}, {"parallel", c.cluster_parallel}, {"note", c.cluster_note}};
  }
  f["per_token"] = {{"nll", e.nll}, {"ref_nll", e.ref_nll}, {"kl", e.kl}, {"top1_agree", e.top1_agree}};
  f["seconds"] = p.seconds;
  Fields timing = fields(p.eval.timing);
  timing["attribution_s"] = p.attribution_s;
  timing["total_s"] = p.seconds;
  f["timing"] = timing;
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
  f["timing"] = {{"load_s", x.load_s}};
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
