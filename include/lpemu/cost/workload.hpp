// Transformer workload shapes, precision plans for cost, every op of prefill and decode, and
// the roofline time and energy per op and per token (issue 7).
#pragma once

#include <string>
#include <vector>

#include "lpemu/cost/cost_format.hpp"
#include "lpemu/cost/mac_model.hpp"
#include "lpemu/cost/target.hpp"

namespace lpemu::cost {

/// A Llama-style decoder's shape (data/shapes/*.toml).
struct ModelShape {
  std::string name, source, origin;
  long long dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, hidden_dim = 0, vocab_size = 0;
  bool tied_embeddings = false;
  bool gated_mlp = true;  ///< SwiGLU (gate, up, down); false: GPT-style 2-matrix MLP (up, down)

  /// Per-head width dim / n_heads.
  long long head_dim() const { return dim / n_heads; }
  /// Width of K (and of V): n_kv_heads * head_dim.
  long long kv_dim() const { return n_kv_heads * head_dim(); }
  /// Parameters in all linear layers and embeddings (norm weights excluded).
  long long parameters() const;
};

/// The formats a plan gives each tensor role, for cost (data/plans/*.toml or CLI flags).
struct CostPlan {
  std::string name, description, origin;
  std::string weights = "bf16", activations = "bf16", kv_cache = "bf16";
};

/// Prefill (a prompt of `context` tokens per sequence) or one decode step at `context`.
enum class Phase { prefill, decode };

/// One operation of a forward pass, repeated `count` times (e.g. once per layer).
struct Op {
  std::string name;
  std::string kind;         ///< "gemm", "attention" or "memory"
  long long count = 1;
  double flops = 0;         ///< per instance (2 per MAC)
  double bytes = 0;         ///< DRAM traffic per instance
  double m = 0, k = 0, n = 0;  ///< GEMM shape y[m, n] = x[m, k] . W[k, n]; 0 for other kinds
  std::string rate_class;   ///< peak-rate class used; empty for memory-only ops
  double energy_per_mac_pj = 0;
  // Filled in by roofline():
  double compute_s = 0, memory_s = 0, time_s = 0, energy_j = 0;
  bool compute_bound = false;
};

/// Every op of one phase, and the tokens it produces or ingests.
struct Workload {
  Phase phase = Phase::decode;
  long long batch = 1, context = 0;
  double tokens = 0;
  double weight_bytes = 0;    ///< all weights in the plan's weight format
  double kv_cache_bytes = 0;  ///< K and V for batch x context tokens
  std::vector<Op> ops;
};

/// Resolved formats of a plan.
struct PlanFormats {
  CostFormat weights, activations, kv_cache;
};

/// Builds every GEMM, attention and memory op of `phase` at batch `batch` and context
/// `context`; `datapath` prices the MACs. Throws SpecError if the target cannot run a format.
Workload build_workload(const ModelShape& shape, const PlanFormats& plan, const Target& target,
                        const MacDatapath& datapath, Phase phase, long long batch, long long context);

/// Totals of a roofline evaluation.
struct Roofline {
  double time_s = 0, energy_j = 0, tokens = 0;
  double compute_bound_time_s = 0;
  bool fits_in_memory = true;
  /// Seconds per token.
  double time_per_token() const { return time_s / tokens; }
  /// Tokens per second.
  double tokens_per_s() const { return tokens / time_s; }
  /// Joules per token.
  double energy_per_token() const { return energy_j / tokens; }
};

/// Fills each op's time (max of compute and memory time), bound and energy; returns totals.
Roofline roofline(Workload& w, const Target& target);

/// The rate class a GEMM of `a` x `b` runs on: the narrowest class both fit that `target` has.
/// Throws SpecError naming the target and formats if there is none.
std::string gemm_rate_class(const CostFormat& a, const CostFormat& b, const Target& target);

}  // namespace lpemu::cost
