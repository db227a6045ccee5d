// `lpemu sweep`, `lpemu sweep merge` and `lpemu.call("sweep", ...)`: every plan of an experiment
// (a study's generated datapaths included) evaluated, priced and reported.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "lpemu/app/fields.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/experiment/sweep.hpp"

namespace lpemu::app {

/// What to run.
struct SweepRequest {
  std::filesystem::path experiment;                           ///< experiment .toml file
  std::filesystem::path out;                                  ///< output directory ("": the experiment's)
  int jobs = 1;                                               ///< plans evaluated at once
  int shard = 0, shards = 1;                                  ///< run plans i with i % shards == shard
  bool force = false;                                         ///< recompute existing plan results
  std::function<void(const experiment::Progress&)> progress;  ///< after each plan
  /// Before the plans run: the experiment's name and this shard's plan count.
  std::function<void(const std::string& name, std::size_t plans)> on_start;
};

/// What a sweep wrote and measured.
struct SweepReport {
  std::string name;  ///< the experiment's
  int shard = 0, shards = 1;
  std::filesystem::path dir;     ///< the output directory
  experiment::SweepFiles files;  ///< summary files (report_md empty for a partial shard)
};

/// Runs (or resumes) the experiment; a study's generated datapaths join `ctx` first (the context
/// must not have built its factories for other datapaths yet). Throws lpemu::Error for bad input.
SweepReport sweep(experiment::Context& ctx, const SweepRequest& request);

/// What `lpemu sweep merge` joins.
struct MergeRequest {
  std::vector<std::filesystem::path> dirs;  ///< shard output directories
  std::filesystem::path out;                ///< merged output directory
};
/// Joins shard output directories into `out`.
SweepReport sweep_merge(const MergeRequest& request);
/// A request from named fields (dirs, out).
MergeRequest merge_request(const Fields& f);

/// Every plan result of a sweep's output directory (its plans/NNNN.h5), in plan order; throws
/// IoError if `dir` has no plans/ folder.
std::vector<experiment::PlanResult> read_sweep(const std::filesystem::path& dir);

/// One plan's results as fields; "metrics" holds experiment::plan_metrics under the results.csv
/// names.
Fields fields(const experiment::PlanResult& p);
/// The report's one serialised form (`lpemu sweep --json`).
Fields fields(const SweepReport& r);

/// A request from named fields (experiment, out, jobs, shard, shards, force).
SweepRequest sweep_request(const Fields& f);

}  // namespace lpemu::app
