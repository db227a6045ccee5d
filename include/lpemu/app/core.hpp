// `lpemu core` and `lpemu.call("core", ...)`: cycles, traffic and energy of GEMMs on a configured
// compute core (lpemu/core/model.hpp): one GEMM, one layer of a model shape, or a whole prefill or
// decode step.
#pragma once

#include <string>
#include <vector>

#include "lpemu/app/fields.hpp"
#include "lpemu/core/model.hpp"
#include "lpemu/experiment/context.hpp"

namespace lpemu::app {

/// What to simulate, and on which core.
struct CoreRequest {
  std::string core;               ///< core name (data/cores, DIR/cores) or a .toml path
  std::string datapath;           ///< the lane's datapath record; empty: the core's own lane
  std::string dataflow;           ///< os, ws or is; empty: the core's
  int rows = 0, cols = 0;         ///< the array's shape; 0: the core's
  double sram_scale = 1;          ///< every scratchpad's capacity times this
  long long m = 0, n = 0, k = 0;  ///< one GEMM C[m,n] = A[m,k] . B[k,n] (when no model is given)
  std::string model;              ///< a model shape (data/shapes): simulate its GEMMs instead
  std::string scope = "layer";  ///< with a model: "layer" (one block) or "step" (every block and the LM head)
  std::string phase = "decode";  ///< prefill or decode
  long long batch = 1, context = 1024;
  /// Prefill: query positions per block of causal attention; block j's QK^T, softmax and PV run
  /// over the keys up to its last position (FlashAttention-2 skips fully masked blocks the same way,
  /// with blocks of 64 or 128 rows). 0: the full context x context square, the mask not exploited.
  long long causal_block = 128;
};

/// Every GEMM simulated and the totals.
struct CoreResult {
  core::Core core;
  std::string datapath;
  core::Lane lane;
  std::vector<core::GemmCycles> gemms;
  std::vector<core::SoftmaxCycles> softmax;  ///< with a model, on a core with a softmax unit
  core::GemmTotals totals;
};

/// Simulates the request; throws SpecError for unknown names or inconsistent fields.
CoreResult simulate_core(experiment::Context& ctx, const CoreRequest& request);
/// The result's one serialised form (`lpemu core --json`).
Fields fields(const CoreResult& r);
/// A request from named fields (core, datapath, dataflow, rows, cols, sram_scale, m, n, k, model, scope,
/// phase, batch, context, causal_block).
CoreRequest core_request(const Fields& f);
/// The GEMMs of one block of `shape` (scope "layer") or of a whole step (every block, and the LM
/// head on the batch's last positions) in `phase` at `batch` and `context`; in prefill with
/// `causal_block` > 0, attention's QK^T and PV per block of that many query positions, each over
/// the keys up to the block's last position (see CoreRequest::causal_block).
std::vector<core::Gemm> shape_gemms(const cost::ModelShape& shape, std::string_view scope, cost::Phase phase,
                                    long long batch, long long context, long long causal_block = 0);

/// The softmax of one block's attention (scope "layer") or of every block's (scope "step"): per
/// sequence and K/V head, the group's query rows by the keys they see, one run per QK^T of
/// shape_gemms with the same arguments.
std::vector<core::SoftmaxCycles> shape_softmax(const core::Core& core, const cost::ModelShape& shape,
                                               std::string_view scope, cost::Phase phase, long long batch,
                                               long long context, long long causal_block = 0);

}  // namespace lpemu::app
