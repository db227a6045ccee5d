// `lpemu sweep EXPERIMENT.toml [--out DIR] [--jobs N] [--shard I/N] [--force]` and
// `lpemu sweep merge DIR... --out DIR`.
#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli/commands.hpp"
#include "lpemu/app/sweep.hpp"
#include "lpemu/error.hpp"

namespace lpemu::cli {
namespace {

namespace fs = std::filesystem;

struct SweepArgs {
  std::string experiment;
  std::string out;
  int jobs = 1;
  std::pair<int, int> shard{0, 1};  ///< --shard I/N
  bool force = false, json = false, verbose = false;
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
  // A training experiment writes no HTML page and no HDF5 summary: only the files it has are named.
  const auto line = [](const char* what, const fs::path& p) {
    if (!p.empty()) std::cout << what << fs::absolute(p).string() << "\n";
  };
  line("  report:  ", f.report_md);
  line("  html:    ", f.report_html);
  line("  csv:     ", f.results_csv);
  line("  hdf5:    ", f.results_h5);
  for (const auto& p : f.plots) line("  plot:    ", p);
}

void run(Context& ctx, const SweepArgs& a) {
  ctx.apply_threads();
  app::SweepRequest req;
  req.experiment = a.experiment;
  req.out = a.out;
  req.jobs = a.jobs;
  req.force = a.force;
  req.shard = a.shard.first;
  req.shards = a.shard.second;
  const std::string shard = std::to_string(req.shard) + "/" + std::to_string(req.shards);
  req.progress = [](const experiment::Progress& p) {
    std::cerr << "[" << p.done << "/" << p.total << "] " << p.label
              << (p.resumed ? " (kept from an earlier run)" : "") << "  elapsed " << duration(p.elapsed_s)
              << ", remaining ~" << duration(p.remaining_s) << "\n";
  };
  req.on_start = [&](const std::string& name, std::size_t plans) {
    std::cerr << "lpemu: sweep '" << name << "': " << plans << " plans"
              << (req.shards > 1 ? ", shard " + shard : std::string()) << "\n";
  };
  const app::SweepReport r = app::sweep(ctx, req);
  if (a.verbose) {
    const app::Fields f = app::fields(r);
    print_timing("sweep", f["timing"]);
    for (const auto& p : f["plans"]) print_timing("plan " + p["label"].get<std::string>(), p["timing"]);
  }
  if (a.json) {
    print_json(app::fields(r));
    return;
  }
  if (r.files.report_md.empty()) {
    std::cout << "lpemu: shard " << shard << " done; plan results in " << fs::absolute(r.dir).string()
              << "/plans. Join the shards with `lpemu sweep merge DIR... --out DIR`.\n";
    return;
  }
  print_files(r.files);
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
  sub->add_flag("--json", args.json, "print what was written and measured as JSON");
  sub->add_flag("--verbose", args.verbose, "print where the time went (model load, each plan's stages)");
  auto* merge = sub->add_subcommand("merge", "join shard output directories into one result set");
  merge->add_option("DIRS", args.merge_dirs, "shard output directories")->required();
  merge->add_option("--out", args.merge_out, "merged output directory")->required();
  merge->add_flag("--json", args.json, "print what was written as JSON");
  merge->callback([] {
    std::vector<fs::path> dirs(args.merge_dirs.begin(), args.merge_dirs.end());
    const app::SweepReport r = app::sweep_merge(app::MergeRequest{dirs, args.merge_out});
    if (args.json) {
      print_json(app::fields(r));
    } else {
      print_files(r.files);
    }
  });
  sub->callback([&ctx, sub, merge] {
    if (sub->got_subcommand(merge)) return;
    if (args.experiment.empty()) throw Error("sweep: give an EXPERIMENT.toml file (or use `sweep merge`)");
    run(ctx, args);
  });
}

}  // namespace lpemu::cli
