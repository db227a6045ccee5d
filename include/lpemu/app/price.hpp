// `lpemu cost` and `lpemu.cost()`: a precision plan priced on one device (roofline per phase) or
// on a cluster (a training step, a search of parallel configurations, or inference steps).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "lpemu/app/fields.hpp"
#include "lpemu/cost/catalog.hpp"
#include "lpemu/cost/system.hpp"
#include "lpemu/cost/target.hpp"
#include "lpemu/cost/workload.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/experiment/pricing.hpp"

namespace lpemu::app {

/// What to price. Device level unless a system, devices, parallel degrees, a search or phase
/// "train" is given (cluster()).
struct PriceRequest {
  std::string target;  ///< hardware target name or .toml (required at device level)
  std::string model;   ///< model shape name or .toml
  std::string plan = "bf16";  ///< plan file, fp32/fp64 or shipped plan name
  std::vector<std::filesystem::path> cost_dirs;  ///< extra DIR/hardware, DIR/shapes, DIR/systems
  /// The job: phase ("prefill", "decode", "both" or "train"), batch, context, the cluster options,
  /// and the weights/activations/kv_cache/datapath overrides of the plan.
  experiment::ClusterSetup setup = [] {
    experiment::ClusterSetup s;
    s.phase = "both";
    return s;
  }();
  int top = 8;                   ///< search: configurations reported
  std::filesystem::path plot_dir;  ///< device level: also draw DIR/cost_<phase>.svg

  /// True if the cluster-level models answer.
  bool cluster() const;
};

/// A priced plan.
struct PriceResult {
  cost::Target target;
  cost::ModelShape model;
  std::string plan, plan_origin;
  std::vector<experiment::Pricing> phases;       ///< device level: prefill and/or decode
  std::optional<experiment::ClusterReport> cluster;  ///< cluster level
  int top = 8;                                   ///< search configurations kept in fields()
  std::vector<std::filesystem::path> plots;      ///< SVG files written
};

/// The cost model's catalog of `ctx`: built-ins, then hardware/, shapes/ and systems/ of the user
/// directories (LPEMU_FORMATS_PATH, ctx.formats_dirs), then of `cost_dirs`.
cost::Catalog cost_catalog(experiment::Context& ctx, const std::vector<std::filesystem::path>& cost_dirs = {});

/// The plan `request` prices: its plan file with the setup's format and datapath overrides.
engine::PrecisionPlan priced_plan(experiment::Context& ctx, const PriceRequest& request);

/// Prices a plan as `request` says; throws lpemu::Error for bad input.
PriceResult price(experiment::Context& ctx, const PriceRequest& request);

/// The result's one serialised form (`lpemu cost --json`, the dict of `lpemu.cost()`).
Fields fields(const PriceResult& r);

/// A request from named fields (the keyword arguments of `lpemu.cost()`); unknown names and
/// wrong types throw SpecError naming the field.
PriceRequest price_request(const Fields& f);

}  // namespace lpemu::app
