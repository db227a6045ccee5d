// `lpemu cost` at cluster level: the options that select it (--system, --devices, --parallel,
// --search, --phase train) and the printing of training steps, searches and inference tables.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/common.hpp"

namespace CLI {
class App;
}

namespace lpemu::cli {

/// Options only the cluster-level model reads.
struct ClusterArgs {
  std::string system, parallel, gradients = "fp32", optimizer_states = "fp32", master_weights = "fp32", comm,
                                recompute = "selective";
  long long devices = 0, global_batch = 512, micro_batch = 1;
  double step_time = 0;
  std::vector<long long> batches;
  bool search = false;
  /// True if the cluster-level model should answer (any cluster option, or --phase train).
  bool active(const std::string& phase) const {
    return !system.empty() || devices > 0 || !parallel.empty() || search || phase == "train";
  }
};

/// Options `lpemu cost` shares with the single-device model.
struct CostCommon {
  std::vector<std::filesystem::path> cost_dirs;
  std::string target, model, plan, weights, activations, kv_cache, datapath, phase;
  long long batch = 1, context = 2048;
  int top = 8;
  bool json = false;
};

/// Adds the cluster options to `lpemu cost`.
std::shared_ptr<ClusterArgs> add_cost_cluster_options(CLI::App* cmd);

/// Runs the cluster-level model and prints its report.
void run_cost_cluster(Context& ctx, const ClusterArgs& a, const CostCommon& c);

}  // namespace lpemu::cli
