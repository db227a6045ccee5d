// Runs an experiment's plans with the lpemu library and prints what each plan costs in accuracy
// (docs/cpp.md; built against an installed lpemu by the package test).
#include <cstdio>

#include "lpemu/error.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/experiment/sweep.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s EXPERIMENT.toml [DATA_DIR]\n", argv[0]);
    return 2;
  }
  lpemu::experiment::Context ctx;  // built-in formats, block formats, datapaths, cost data
  if (argc > 2) ctx.data_dirs.insert(ctx.data_dirs.begin(), argv[2]);  // where data/models/NAME lives
  try {
    const auto exp = lpemu::experiment::load_experiment(argv[1]);
    const auto files = lpemu::experiment::run_sweep(exp, ctx.toolbox(), {});
    for (const auto& p : files.plans) {
      std::printf("%-10s mean NLL %.6f  KL %.3g  top-1 %.1f %%\n", p.label.c_str(), p.eval.mean_nll,
                  p.eval.mean_kl, 100 * p.eval.top1_agreement);
    }
    std::printf("report: %s\n", files.report_md.c_str());
  } catch (const lpemu::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
