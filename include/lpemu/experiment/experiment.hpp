// Experiments as data: a TOML file naming the source (a model and a text, optionally
// recorded activations to replay), the plans to compare (listed, inline, or a grid of formats ×
// GEMM datapaths), options and the output directory. Format in docs/experiments-and-reports.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lpemu/experiment/pricing.hpp"

namespace lpemu::experiment {

/// One plan of an experiment: a plan name/path, or an inline plan document.
struct PlanSpec {
  std::string label;        ///< unique within the experiment
  std::string plan;         ///< plan name or path (empty when inline)
  std::string inline_toml;  ///< an inline plan document (empty when `plan` is set)
};

/// Where each plan is priced by the cost model (lpemu::cost): a hardware target, a model shape,
/// and the job (phase, batch, context and, optionally, a cluster). Empty target: no cost columns.
struct CostSetup {
  std::string target;  ///< data/hardware name, e.g. "h100_sxm"
  std::string shape;   ///< data/shapes name; default: the experiment's model name
  /// A compute core (data/cores name or .toml): each plan's GEMMs are also run on it, with their
  /// datapath records as the lane, and timed from it (as `lpemu cost --core`); "": the roofline only.
  std::string core;
  /// The job: phase ("decode" or "prefill"; "train" with a system), batch and context (512 in an
  /// experiment); with cluster.system set, each plan is also priced on that cluster, as
  /// `lpemu cost --system` does.
  ClusterSetup cluster = [] {
    ClusterSetup c;
    c.context = 512;
    return c;
  }();
};

/// An accumulator study ([grid.datapath]): variants of a base datapath record, one per combination
/// of the axes given; each is emulated and priced under its own name (datapath_variant_name).
struct DatapathStudy {
  std::string base;                      ///< a datapath record name
  std::vector<int> fused_terms;          ///< block.fused_terms values (empty: the base's)
  std::vector<int> fraction_bits;        ///< alignment.fraction_bits values
  std::vector<std::string> accumulator;  ///< accumulator.format names
  std::vector<int> promote_every;        ///< promotion.every values (0: none; promotes into fp32)
  std::vector<std::string> formats;      ///< formats run on every variant
  std::string origin;                    ///< file:line of the table, for messages
};

/// One generated variant of a DatapathStudy's base.
struct DatapathVariant {
  std::string name;
  int fused_terms = -1, fraction_bits = -1, promote_every = -1;  ///< -1: not varied
  std::string accumulator;                                       ///< "": not varied
};

/// The name that says what a variant is: base + ".n16" (fused terms) + ".f24" (fraction bits) +
/// ".acc_fp16" + ".p128" (promotion; ".p0" none), for the axes the study varies.
std::string datapath_variant_name(const std::string& base, const DatapathVariant& v);

/// A training experiment ([train]): every plan trains the same model, initialised from a shape,
/// on the same tokens ([source] tokens) with the same optimizer; fp32 also trains from each seed.
struct TrainSetup {
  std::string shape;  ///< model shape (data/shapes name or .toml) initialised from seeds[0]
  int steps = 100, batch = 8, seq = 64, warmup = 0;
  std::string optimizer = "adamw";  ///< "sgd" or "adamw"
  double lr = 1e-3, clip_norm = 0.0, weight_decay = 0.0;
  std::vector<std::uint64_t> seeds = {0, 1, 2};  ///< fp32 runs, the noise band; seeds[0] also for every plan
  std::string reference = "fp32";                ///< the plan (label) trained from every seed
  double val_fraction = 0;  ///< share of the token windows held out for the validation loss (0: none)
  int eval_every = 10;      ///< validation loss at steps 0, eval_every, ...
  int sqnr_every = 0;       ///< per-block gradient SQNR at steps 0, sqnr_every, ... (0: never)
};

/// A parsed experiment file.
struct Experiment {
  std::string name;
  std::string description;
  std::filesystem::path origin;       ///< the file
  std::string model = "stories260K";  ///< model name or path
  std::filesystem::path text;         ///< text to score (resolved against the file's folder)
  std::filesystem::path tokens;       ///< or: 1-D integer .npy of token ids to score instead of a text
  std::filesystem::path activations;  ///< recorded activations to replay; empty = none
  int max_tokens = 0;                 ///< score at most this many tokens (0 = all)
  std::string reference = "fp32";     ///< the reference plan
  bool attribution = false;           ///< also quantise one role at a time
  /// Plans (by label) whose attribution is also taken layer by layer: one quantisation point in
  /// one block (or the LM head) at a time; `layer_attribution_all`: every plan.
  std::vector<std::string> layer_attribution;
  bool layer_attribution_all = false;
  std::filesystem::path out_dir;  ///< default output directory
  CostSetup cost;                 ///< [cost] table
  std::vector<PlanSpec> plans;
  std::optional<DatapathStudy> study;     ///< [grid.datapath]
  std::vector<DatapathVariant> variants;  ///< the study's variants, in grid order
  std::optional<TrainSetup> train;        ///< [train]: a training experiment

  /// A hash of everything that determines the results (to refuse mixing runs when resuming).
  std::string fingerprint() const;
};

/// Parses an experiment document; relative input paths resolve against `origin`'s folder, the
/// output directory against the working directory. Errors name origin:line, field, value.
Experiment parse_experiment_toml(std::string_view text, const std::filesystem::path& origin);
/// Loads an experiment file; throws IoError/SpecError.
Experiment load_experiment(const std::filesystem::path& file);

}  // namespace lpemu::experiment
