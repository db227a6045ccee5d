// Running an experiment's plans (`lpemu sweep`), resuming, sharding over a batch scheduler and
// merging shards. Each plan's result is a file out/plans/NNNN.h5; the summary files (results.h5,
// results.csv, report.md, plots) are built from those files alone, in plan order, so a merged set
// of shards gives exactly the files of a single run.
#pragma once

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "lpemu/cost/catalog.hpp"
#include "lpemu/cost/workload.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/quantizer.hpp"
#include "lpemu/experiment/evaluation.hpp"
#include "lpemu/experiment/experiment.hpp"

namespace lpemu::experiment {

/// The quantisers and GEMM strategies plans may name, and the storage cost of a format.
struct Toolbox {
  const engine::QuantizerFactory* quantizers = nullptr;
  const engine::GemmFactory* gemms = nullptr;
  std::vector<std::string> search_dirs;  ///< where plan and model names are looked up
  /// The cost model's data, for experiments with a [cost] table (nullptr: no cost columns).
  cost::Catalog* costs = nullptr;
  /// The datapath records a [cost] core's lanes run (nullptr: the built-in presets).
  const datapath::DatapathRegistry* datapaths = nullptr;
};

/// What a plan costs on the experiment's target (NaN where the model cannot price it).
struct SweepCost {
  std::string target;
  std::string datapath;  ///< the datapath record priced for most of the MACs
  std::string computed;  ///< every operand pair and datapath priced, with its share of the MACs
  std::string note;
  double bits_per_weight = std::nan("");  ///< over every quantised weight of the priced shape
  double tokens_per_s = std::nan("");
  double joules_per_token = std::nan("");
  double mac_area_rel_bf16 = std::nan("");  ///< lane area of `datapath` relative to the target's bf16 MAC
  double mac_energy_pj = std::nan("");      ///< per MAC at 45 nm (Horowitz constants)
  // Core level ([cost] core): the plan's GEMMs on a configured core (experiment::core_totals).
  std::string core;                        ///< "" when no core was named
  double core_cycles = std::nan("");       ///< every GEMM of the priced phase, counts included
  double core_seconds = std::nan("");      ///< core_cycles / the core's clock
  double core_utilization = std::nan("");  ///< MACs / (peak MACs per cycle x busy cycles)
  double core_energy_j = std::nan("");     ///< MAC, scratchpad, L2 and DRAM energy of those GEMMs
  // Cluster level ([cost] system): as `lpemu cost --system` prices the plan.
  std::string cluster_system;    ///< "" when not priced at cluster level
  std::string cluster_parallel;  ///< the configuration priced (the search's best)
  double cluster_step_s = std::nan("");
  double cluster_tokens_per_s = std::nan("");  ///< for the whole job
  double cluster_mfu = std::nan("");           ///< training only
  double cluster_memory_gb = std::nan("");     ///< per device
  std::string cluster_note;                    ///< what does not fit, or why it was not priced
  /// The priced ops (name, kind, count, weight format, time, DRAM bytes, energy, bound) for the
  /// per-op breakdown; empty when the plan was not priced.
  std::vector<cost::Op> ops;
};

/// Progress of a sweep, reported after each plan.
struct Progress {
  std::size_t done = 0;   ///< plans finished (computed or resumed) in this shard
  std::size_t total = 0;  ///< plans in this shard
  std::string label;      ///< the plan just finished
  bool resumed = false;   ///< taken from an earlier run's file
  double elapsed_s = 0;
  double remaining_s = 0;  ///< estimate
};

/// How to run a sweep.
struct SweepOptions {
  std::filesystem::path out;  ///< output directory (default: the experiment's)
  int jobs = 1;               ///< plans evaluated concurrently
  int shard = 0;              ///< this shard, 0..shards-1
  int shards = 1;             ///< number of shards (plans i with i % shards == shard)
  bool force = false;         ///< recompute plans whose results exist
  std::function<void(const Progress&)> on_progress;
  /// Generated datapath records (study_datapaths) to write as DIR/datapath/NAME.toml, so that
  /// `lpemu --formats-dir DIR cost --plan DIR/plans/NNNN.toml` finds them.
  std::vector<std::pair<std::string, std::string>> datapath_files;
};

/// Attribution of one role: the plan with only that role quantised.
struct RoleShare {
  std::string role;
  std::string format;
  double mean_kl = 0;
  double delta_nll = 0;
};

/// Attribution of one quantisation point in one place: the plan with only that role quantised,
/// and only in block `layer` (-1: the LM head).
struct LayerShare {
  std::string role;
  int layer = 0;
  double mean_kl = 0;
  double delta_nll = 0;
};

/// Everything measured for one plan.
struct PlanResult {
  std::size_t index = 0;
  std::string label;
  std::string plan_name;
  std::string weight_format;  ///< format of the `weights` role in most blocks ("fp32" if none)
  std::string gemm;           ///< GEMM strategy of most blocks ("eigen": fp32 accumulation)
  double weight_bits = 32;    ///< bits per weight element, scale overhead included
  EvalResult eval;
  std::vector<ReplayRow> replay;
  std::vector<RoleShare> attribution;
  std::vector<LayerShare> layer_attribution;  ///< per block and point (options.layer_attribution)
  SweepCost cost;
  double seconds = 0;        ///< wall clock of the whole plan (eval.timing breaks its evaluation down)
  double attribution_s = 0;  ///< of which: the attribution runs (one evaluation per role, layer)
};

/// One plan's metrics as (name, value) in results.csv order; these names are the metric's name in
/// every output (results.csv, `lpemu sweep --json`, Python).
std::vector<std::pair<std::string, double>> plan_metrics(const PlanResult& r);

/// Paths of the files a sweep or merge wrote.
struct SweepFiles {
  std::filesystem::path dir, results_h5, results_csv, report_md;
  std::filesystem::path report_html;  ///< the report as one self-contained page
  std::vector<std::filesystem::path> plots;
  std::vector<std::filesystem::path> plan_files;  ///< plans/NNNN.h5 in plan order (empty for a partial shard)
  std::vector<PlanResult> plans;                  ///< the results the summary was built from, in plan order
  double load_s = 0;  ///< seconds loading the model in this run (0 when nothing was loaded)
};

/// Runs (or resumes) this shard's plans and, when the output holds every plan, writes the summary.
SweepFiles run_sweep(const Experiment& exp, const Toolbox& tools, const SweepOptions& options);

/// Throws SpecError "<experiment>: cost.target = \"x\": unknown target 'x'; did you mean: ..."
/// (likewise cost.shape) unless the [cost] table's names resolve in `catalog`; run_sweep calls it first.
void check_cost_setup(const Experiment& exp, cost::Catalog& catalog);
/// Joins shard directories into `out` (plan files copied, summary rebuilt); throws if they
/// come from different experiments or a plan is missing.
SweepFiles merge_sweeps(const std::vector<std::filesystem::path>& dirs, const std::filesystem::path& out);
/// Rebuilds results.h5, results.csv, report.md and plots of `dir` from its plan files.
SweepFiles write_summary(const std::filesystem::path& dir);

/// Writes one plan's result file.
void save_plan_result(const std::filesystem::path& file, const PlanResult& r, const std::string& fingerprint);
/// Reads one plan's result file; `fingerprint` receives the experiment fingerprint stored in it.
PlanResult load_plan_result(const std::filesystem::path& file, std::string* fingerprint = nullptr);

}  // namespace lpemu::experiment
