// `lpemu sweep EXPERIMENT.toml [--out DIR] [--jobs N] [--shard I/N] [--force]` and
// `lpemu sweep merge DIR... --out DIR`.
#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli/commands.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/study.hpp"
#include "lpemu/experiment/sweep.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::cli {
namespace {

namespace fs = std::filesystem;

struct SweepArgs {
  std::string experiment;
  std::string out;
  int jobs = 1;
  std::pair<int, int> shard{0, 1};  ///< --shard I/N
  bool force = false;
  std::vector<std::string> merge_dirs;
  std::string merge_out;
};

std::string duration(double s) {
  char buf[32];
  if (s < 90) {
    std::snprintf(buf, sizeof buf, "%.0f s", s);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f min %02.0f s", std::floor(s / 60), std::fmod(s, 60));
  }
  return buf;
}

void print_files(const experiment::SweepFiles& f) {
  std::cout << "lpemu: results in " << fs::absolute(f.dir).string() << "\n";
  std::cout << "  report:  " << fs::absolute(f.report_md).string() << "\n";
  std::cout << "  html:    " << fs::absolute(f.report_html).string() << "\n";
  std::cout << "  csv:     " << fs::absolute(f.results_csv).string() << "\n";
  std::cout << "  hdf5:    " << fs::absolute(f.results_h5).string() << "\n";
  for (const auto& p : f.plots) std::cout << "  plot:    " << fs::absolute(p).string() << "\n";
}

void run(Context& ctx, const SweepArgs& a) {
  ctx.apply_threads();
  const experiment::Experiment exp = experiment::load_experiment(a.experiment);
  experiment::SweepOptions opt;
  opt.out = a.out;
  opt.jobs = a.jobs;
  opt.force = a.force;
  const auto [i, n] = a.shard;
  const std::string shard = std::to_string(i) + "/" + std::to_string(n);
  opt.shard = i;
  opt.shards = n;
  opt.on_progress = [](const experiment::Progress& p) {
    std::cerr << "[" << p.done << "/" << p.total << "] " << p.label
              << (p.resumed ? " (kept from an earlier run)" : "") << "  elapsed " << duration(p.elapsed_s)
              << ", remaining ~" << duration(p.remaining_s) << "\n";
  };
  // An accumulator study's generated datapaths join this invocation's datapaths before the plans
  // that name them are built; the sweep writes them beside its results.
  for (auto& g : experiment::study_datapaths(exp, ctx.datapaths(), ctx.formats())) {
    opt.datapath_files.emplace_back(g.datapath.name, g.toml);
    ctx.add_datapath(std::move(g.datapath), exp.study->origin);
  }
  std::cerr << "lpemu: sweep '" << exp.name << "': " << exp.plans.size() << " plans"
            << (n > 1 ? ", shard " + shard : std::string()) << "\n";
  const auto files = experiment::run_sweep(exp, ctx.toolbox(), opt);
  if (files.report_md.empty()) {
    std::cout << "lpemu: shard " << shard << " done; plan results in "
              << fs::absolute(opt.out.empty() ? exp.out_dir : opt.out).string()
              << "/plans. Join the shards with `lpemu sweep merge DIR... --out DIR`.\n";
    return;
  }
  print_files(files);
}

}  // namespace

void register_sweep(CLI::App& app, Context& ctx) {
  static SweepArgs args;
  auto* sub = app.add_subcommand("sweep", "run every plan of an experiment file and write a report");
  sub->add_option("EXPERIMENT", args.experiment, "experiment .toml file")->check(CLI::ExistingFile);
  sub->add_option("--out", args.out, "output directory (default: the experiment's [output] dir)");
  sub->add_option("--jobs", args.jobs, "plans evaluated at once")->capture_default_str()->check(at_least(1));
  sub->add_option("--shard", args.shard,
                  "run only shard I of N (plans i with i % N == I), e.g. for a Slurm array")
      ->delimiter('/')
      ->type_name("I/N")
      ->default_str("0/1")
      ->check(at_least(0));
  sub->add_flag("--force", args.force,
                "recompute plans whose results exist (and discard a different experiment's)");
  auto* merge = sub->add_subcommand("merge", "join shard output directories into one result set");
  merge->add_option("DIRS", args.merge_dirs, "shard output directories")->required();
  merge->add_option("--out", args.merge_out, "merged output directory")->required();
  merge->callback([] {
    std::vector<fs::path> dirs(args.merge_dirs.begin(), args.merge_dirs.end());
    print_files(experiment::merge_sweeps(dirs, args.merge_out));
  });
  sub->callback([&ctx, sub, merge] {
    if (sub->got_subcommand(merge)) return;
    if (args.experiment.empty()) throw Error("sweep: give an EXPERIMENT.toml file (or use `sweep merge`)");
    run(ctx, args);
  });
}

}  // namespace lpemu::cli
