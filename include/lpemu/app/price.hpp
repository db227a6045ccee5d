// `lpemu cost` and `lpemu.cost()`: a precision plan priced on one device (roofline per phase) or
// on a cluster (a training step, a search of parallel configurations, or inference steps).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "lpemu/app/fields.hpp"
#include "lpemu/cost/catalog.hpp"
#include "lpemu/cost/mac_model.hpp"
#include "lpemu/cost/system.hpp"
#include "lpemu/cost/target.hpp"
#include "lpemu/cost/workload.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/experiment/pricing.hpp"

namespace lpemu::app {

/// What to price. Device level unless a system, devices, parallel degrees, a search or phase
/// "train" is given (cluster()).
struct PriceRequest {
  std::string target;                            ///< hardware target name or .toml (required at device level)
  std::string model;                             ///< model shape name or .toml
  std::string plan = "bf16";                     ///< plan file, fp32/fp64 or shipped plan name
  std::vector<std::filesystem::path> cost_dirs;  ///< extra DIR/hardware, DIR/shapes, DIR/systems
  /// The job: phase ("prefill", "decode", "both" or "train"), batch, context, the cluster options,
  /// and the weights/activations/kv_cache/datapath overrides of the plan.
  experiment::ClusterSetup setup = [] {
    experiment::ClusterSetup s;
    s.phase = "both";
    return s;
  }();
  std::string core;  ///< device level: GEMM times from the core model on this core ("": roofline)
  int top = 8;       ///< search: configurations reported
  std::filesystem::path plot_dir;  ///< device level: also draw DIR/cost_<phase>.svg

  /// True if the cluster-level models answer.
  bool cluster() const;
};

/// A priced plan.
struct PriceResult {
  cost::Target target;
  cost::ModelShape model;
  std::string plan, plan_origin;
  std::string core;                                  ///< the core the GEMMs were timed on ("": the roofline)
  std::vector<experiment::Pricing> phases;           ///< device level: prefill and/or decode
  std::optional<experiment::ClusterReport> cluster;  ///< cluster level
  int top = 8;                                       ///< search configurations kept in fields()
  std::vector<std::filesystem::path> plots;          ///< SVG files written
};

/// The cost model's catalog of `ctx`: built-ins, then hardware/, shapes/ and systems/ of the user
/// directories (LPEMU_FORMATS_PATH, ctx.formats_dirs), then of `cost_dirs`.
cost::Catalog cost_catalog(experiment::Context& ctx,
                           const std::vector<std::filesystem::path>& cost_dirs = {});

/// The plan `request` prices: its plan file with the setup's format and datapath overrides.
engine::PrecisionPlan priced_plan(experiment::Context& ctx, const PriceRequest& request);

/// Prices a plan as `request` says; throws lpemu::Error for bad input.
PriceResult price(experiment::Context& ctx, const PriceRequest& request);

/// The result's one serialised form (`lpemu cost --json`, the dict of `lpemu.cost()`).
Fields fields(const PriceResult& r);

/// A request from named fields (the keyword arguments of `lpemu.cost()`); unknown names and
/// wrong types throw SpecError naming the field.
PriceRequest price_request(const Fields& f);

/// What `lpemu cost mac` prices: one MAC lane, and optionally a target's array spent on it.
struct MacRequest {
  std::string format, format_b;  ///< input formats ("": the datapath's own; format_b "": format)
  std::string datapath = "generic_bf16";
  std::string iso_target, iso_class = "bf16", iso_format;  ///< iso-area on a target's rate class
  std::vector<std::filesystem::path> cost_dirs;
};

/// One MAC lane's area and energy, beside baseline formats on the same datapath.
struct MacResult {
  cost::MacDatapath datapath;
  cost::MacCost mac;
  /// (baseline format, its MAC, how many of ours fit in the area of 1024 of it): bf16, mxfp8_e4m3.
  struct Baseline {
    std::string format;
    cost::MacCost mac;
    long long fit_in_1024 = 0;
  };
  std::vector<Baseline> baselines;
  std::optional<cost::IsoArea> iso;  ///< with an iso target
  std::string iso_target, iso_unit, iso_class, iso_format;
  double iso_listed_tflops = 0;  ///< the target file's rate for iso_class
};

/// Prices one MAC lane; throws lpemu::Error for unknown names.
MacResult price_mac(experiment::Context& ctx, const MacRequest& request);
/// `lpemu cost mac --json`.
Fields fields(const MacResult& r);
/// A request from named fields (format, format_b, datapath, iso_target, iso_class, iso_format, cost_dirs).
MacRequest mac_request(const Fields& f);

/// What `lpemu cost targets` lists.
struct TargetsRequest {
  std::vector<std::filesystem::path> cost_dirs;
};
/// Every hardware target with its rates, datapaths and sources.
struct TargetsResult {
  std::vector<cost::Target> targets;
};
/// Lists the targets (built-ins and user directories).
TargetsResult list_targets(experiment::Context& ctx, const TargetsRequest& request);
/// `lpemu cost targets --json`.
Fields fields(const TargetsResult& r);
/// A request from named fields (cost_dirs).
TargetsRequest targets_request(const Fields& f);

}  // namespace lpemu::app
