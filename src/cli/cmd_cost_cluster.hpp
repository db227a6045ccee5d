// `lpemu cost` at cluster level: the options that select it (--system, --devices, --parallel,
// --search, --phase train) and the printing of training steps, searches and inference tables.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "cli/common.hpp"
#include "lpemu/experiment/pricing.hpp"

namespace CLI {
class App;
}

namespace lpemu::cli {

/// Every option of `lpemu cost` and its subcommands; the cluster models' options are bound
/// straight into `setup`.
struct CostArgs {
  std::vector<std::filesystem::path> cost_dirs;
  std::string target, model, plan = "bf16";
  int top = 8;
  bool json = false;
  std::filesystem::path plot_dir;  ///< --plot: write cost_<phase>.svg here
  /// --system and the job, and the --weights/--activations/--kv-cache/--datapath overrides that
  /// the single-device model reads too.
  experiment::ClusterSetup setup;
  double step_time = 0;            ///< --search without --devices: the step time to meet (s)
  std::vector<long long> batches;  ///< inference at cluster level: batch sizes to tabulate
  // mac
  std::string format, format_b, iso_target, iso_class = "bf16", iso_format;

  /// True if the cluster-level model should answer (any cluster option, or --phase train).
  bool cluster() const {
    return !setup.system.empty() || setup.devices > 0 || !setup.parallel.empty() || setup.search ||
           setup.phase == "train";
  }
};

/// Adds the cluster options (--system, --devices, --parallel, --search, training and
/// --batches) to `lpemu cost`, bound into `a`.
void add_cost_cluster_options(CLI::App* cmd, CostArgs& a);

/// Runs the cluster-level model and prints its report.
void run_cost_cluster(Context& ctx, const CostArgs& a);

}  // namespace lpemu::cli
