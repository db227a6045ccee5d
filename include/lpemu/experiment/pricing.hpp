// Pricing an engine precision plan with the cost model: the one join between what the engine
// emulates and what lpemu::cost prices. `lpemu cost --plan`, a sweep's cost columns and the
// proposal summary all go through price_plan, so they agree by construction.
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "lpemu/cost/catalog.hpp"
#include "lpemu/cost/kernel.hpp"
#include "lpemu/cost/parallel.hpp"
#include "lpemu/cost/system.hpp"
#include "lpemu/cost/workload.hpp"
#include "lpemu/engine/plan.hpp"

namespace lpemu::core {
struct Core;
}  // namespace lpemu::core
namespace lpemu::datapath {
struct Datapath;
class DatapathRegistry;
}  // namespace lpemu::datapath

namespace lpemu::experiment {

/// The cost model's view of `plan` over a model of `n_layers` blocks: for each block the formats
/// the engine gives each linear layer's weights and inputs (the last quantiser a tensor passes,
/// e.g. wo's input is linear_input, else attn_output), the queries, probabilities and KV cache,
/// and the datapath each GEMM runs on; the same for the LM head. Unquantised tensors are "fp32"
/// ("fp64" for plans that compute in double).
cost::LayerwisePlan layerwise_plan(const engine::PrecisionPlan& plan, long long n_layers);

/// What the GEMM ops of a priced workload take on a configured compute core: each GEMM op (one
/// instance of m x k x n, times its count) run through core::simulate_gemm with the op's datapath
/// record as the lane (attention and memory ops are not run on the core).
struct CoreTotals {
  std::string core;        ///< the core's name
  double cycles = 0;       ///< sum over GEMM ops of count x total cycles
  double seconds = 0;      ///< sum over GEMM ops of count x total cycles / clock
  double macs = 0;         ///< sum over GEMM ops of count x m x k x n
  double utilization = 0;  ///< macs / sum of count x peak MACs per cycle of the op's lane x busy cycles
  double energy_j = 0;     ///< the core model's MAC, scratchpad, L2 and DRAM energy
  double dram_bytes = 0;   ///< the core model's DRAM traffic
};

/// A plan priced on one target, model shape, phase, batch and context.
struct Pricing {
  cost::LayerwisePlan plan;
  cost::Workload workload;
  cost::Roofline roofline;
  double mac_area_rel_bf16 = 0;    ///< MAC lane area of `datapath` / the target's bf16 MAC lane
  double mac_energy_pj = 0;        ///< MAC-weighted mean energy per MAC (45 nm Horowitz constants)
  std::string datapath;            ///< the datapath record carrying the most MACs
  std::string computed;            ///< "A x B on D (share of MACs); ..." for every operand pair and datapath
  std::optional<CoreTotals> core;  ///< the GEMMs on a configured core (core_totals), when one was named
};

/// Prices `plan` (layerwise_plan over `shape`'s layers, then the workload and its roofline; with
/// `gemm_time`, e.g. core_gemm_timer, the GEMMs' times from it).
Pricing price_plan(const engine::PrecisionPlan& plan, const cost::ModelShape& shape,
                   const cost::Target& target, cost::Catalog& catalog, cost::Phase phase, long long batch,
                   long long context, const cost::GemmTimer& gemm_time = {});

/// The cost model's kernel-level estimate of y[m, n] = x[m, k] . W[k, n] from the core model
/// instead of the roofline: time, compute and memory time, boundedness and folds (as tiles) of
/// `core::simulate_gemm(core, lane, {m, n, k})`.
cost::KernelEstimate core_gemm_kernel(const core::Core& core, const datapath::Datapath& lane, long long m,
                                      long long k, long long n);

/// A GEMM timer that runs each GEMM op (one instance of m x k x n) on `core` with the op's
/// datapath record (found in `datapaths`) as the lane: the time is core_gemm_kernel's, that is the
/// core model's total cycles / clock.
cost::GemmTimer core_gemm_timer(const core::Core& core, const datapath::DatapathRegistry& datapaths);

/// The GEMM ops of `workload` on `core`, each with its own datapath record (found in
/// `datapaths`) as the lane; the same simulations core_gemm_timer times the ops with.
CoreTotals core_totals(const core::Core& core, const datapath::DatapathRegistry& datapaths,
                       const cost::Workload& workload);

/// A plan priced at cluster level: the system, the job and the formats the cluster models take
/// (`lpemu cost --system ...` and a sweep's [cost] table with `system` both fill it).
struct ClusterSetup {
  std::string system;            ///< data/systems name or .toml path; empty: no cluster pricing
  std::string target;            ///< the device's hardware target ("" = the system's device)
  std::string phase = "decode";  ///< "train", "prefill" or "decode"
  long long devices = 0;         ///< devices in the job (train: dp = devices / (tp pp cp))
  std::string parallel;          ///< "tp=8,pp=4,..." ("" = tp=1)
  bool search = false;           ///< train: the best configuration search_training finds on `devices`
  long long batch = 1;           ///< inference: sequences per step
  long long context = 2048;      ///< inference: context; training: sequence length
  long long global_batch = 512, micro_batch = 1;  ///< training
  std::string recompute = "selective", gradients = "fp32", optimizer_states = "fp32", master_weights = "fp32";
  std::string comm;  ///< training: wire format of gradients and activations ("": bf16 gradients, activations
                     ///< as computed)
  std::string grad_comm;        ///< training: gradients on the wire ("": comm, else bf16)
  std::string act_comm;         ///< training: activations on the wire ("": comm, else as computed)
  bool flash_attention = true;  ///< training: fused attention (false: s x s scores through DRAM)
  bool overlap_dp = true;       ///< training: DP reduction overlaps the last backward
  std::string weights, activations, kv_cache,
      datapath;                    ///< overrides of the plan's formats ("" = the plan's)
  double step_time = 0;            ///< train search without devices: the step time to meet (s)
  std::vector<long long> batches;  ///< inference: batch sizes to price (empty: `batch`)
};

/// Applies the setup's weights, activations, kv_cache and datapath overrides to `plan` (as
/// `lpemu cost --weights ...` does); each replaced role names `origin`.
void apply_overrides(engine::PrecisionPlan& plan, const ClusterSetup& setup, const std::string& origin);

/// The one format per role and the MAC datapath the cluster models price `plan` with: the plan's
/// middle block (first/last block overrides aside), each overridable by the setup; MACs on the
/// setup's datapath, else the plan's, else the target's for the operands' rate class.
struct ClusterFormats {
  cost::PlanFormats formats;
  std::string datapath;
  std::vector<std::string> notes;  ///< operand pairs no rate class accepts, and what runs them instead
};
/// The cluster formats of `plan` over `shape` on `target` (see ClusterFormats).
ClusterFormats cluster_formats(const engine::PrecisionPlan& plan, const cost::ModelShape& shape,
                               const cost::Target& target, cost::Catalog& catalog, const ClusterSetup& setup);
/// Training formats: the plan's weights and activations plus the setup's gradient, optimizer,
/// master-weight and wire formats.
cost::TrainFormats train_formats(const cost::PlanFormats& f, cost::Catalog& catalog,
                                 const ClusterSetup& setup);
/// The training job of a setup (sequence, batches, recomputation; parallel degrees left at 1).
cost::TrainConfig train_config(const ClusterSetup& setup);

/// Everything the cluster-level models say of one plan: one training step, every configuration
/// a search found (best first), or one inference step per phase and batch.
struct ClusterReport {
  cost::System system;
  cost::Target target;                   ///< the device priced (the setup's target, else the system's device)
  ClusterFormats formats;                ///< the one format per role and the MAC datapath
  cost::TrainFormats train_formats{};    ///< training only
  std::vector<cost::TrainResult> train;  ///< training: one step, or the search's configurations
  long long fewest_devices = 0;          ///< search by step time: the devices of the first configuration
  cost::Parallel parallel;               ///< inference: the configuration priced
  long long max_batch = 0;               ///< inference: largest batch whose KV cache fits per device
  std::vector<cost::InferenceResult> inference;  ///< inference: prefill, then decode, per batch
};

/// Prices `plan` with the cluster-level models on `system` as `setup` says (phase train, prefill,
/// decode or both); throws SpecError for an inconsistent setup. `lpemu cost --system` and a sweep's
/// cluster columns both come from here.
ClusterReport price_cluster(const engine::PrecisionPlan& plan, const cost::ModelShape& shape,
                            const cost::System& system, cost::Catalog& catalog, const ClusterSetup& setup);

/// One plan priced at cluster level (NaN where not priced).
struct ClusterPricing {
  std::string system;
  std::string parallel;  ///< the configuration priced (the search's best when searching)
  double step_s = std::nan("");
  double tokens_per_s = std::nan("");  ///< for the whole job
  double mfu = std::nan("");           ///< training only
  double memory_gb = std::nan("");     ///< per device
  bool fits = true;
  std::string why;  ///< what does not fit
};

/// Prices `plan` with the cluster-level models: one training step (or the best configuration the
/// search finds) or one inference step, exactly as `lpemu cost --system` does.
ClusterPricing price_plan_cluster(const engine::PrecisionPlan& plan, const cost::ModelShape& shape,
                                  const cost::System& system, cost::Catalog& catalog,
                                  const ClusterSetup& setup);

}  // namespace lpemu::experiment
