// Pricing an engine precision plan with the cost model: the one join between what the engine
// emulates and what lpemu::cost prices. `lpemu cost --plan`, a sweep's cost columns and the
// proposal summary all go through price_plan, so they agree by construction.
#pragma once

#include <string>

#include "lpemu/cost/catalog.hpp"
#include "lpemu/cost/workload.hpp"
#include "lpemu/engine/plan.hpp"

namespace lpemu::experiment {

/// The cost model's view of `plan` over a model of `n_layers` blocks: for each block the formats
/// the engine gives each linear layer's weights and inputs (the last quantiser a tensor passes,
/// e.g. wo's input is linear_input, else attn_output), the queries, probabilities and KV cache,
/// and the datapath each GEMM runs on; the same for the LM head. Unquantised tensors are "fp32"
/// ("fp64" for plans that compute in double).
cost::CostPlan cost_plan(const engine::PrecisionPlan& plan, long long n_layers);

/// A plan priced on one target, model shape, phase, batch and context.
struct Pricing {
  cost::CostPlan plan;
  cost::Workload workload;
  cost::Roofline roofline;
  double mac_area_rel_bf16 = 0;  ///< MAC lane area of `datapath` / the target's bf16 MAC lane
  double mac_energy_pj = 0;      ///< MAC-weighted mean energy per MAC (45 nm Horowitz constants)
  std::string datapath;          ///< the datapath record carrying the most MACs
  std::string computed;          ///< "A x B on D (share of MACs); ..." for every operand pair and datapath
};

/// Prices `plan` (cost_plan over `shape`'s layers, then the workload and its roofline).
Pricing price_plan(const engine::PrecisionPlan& plan, const cost::ModelShape& shape, const cost::Target& target,
                   cost::Catalog& catalog, cost::Phase phase, long long batch, long long context);

}  // namespace lpemu::experiment
