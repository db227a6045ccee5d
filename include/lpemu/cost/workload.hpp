// Transformer workload shapes, precision plans for cost, every op of prefill and decode, and
// the roofline time and energy per op and per token.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "lpemu/cost/cost_format.hpp"
#include "lpemu/cost/mac_model.hpp"
#include "lpemu/cost/target.hpp"

namespace lpemu::cost {

class Catalog;

/// A Llama-style decoder's shape (data/shapes/*.toml).
struct ModelShape {
  std::string name, source, origin;
  long long dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, hidden_dim = 0, vocab_size = 0;
  bool tied_embeddings = false;
  bool gated_mlp = true;  ///< SwiGLU (gate, up, down); false: GPT-style 2-matrix MLP (up, down)
  /// Mixture of experts: `experts` MLPs of width hidden_dim per block, each token routed to
  /// `top_k` of them by a [dim, experts] router; 0 = a dense MLP.
  long long experts = 0, top_k = 0;

  /// True for a mixture-of-experts shape.
  bool moe() const { return experts > 0; }
  /// MLPs per block (1 for a dense shape).
  long long mlps() const { return moe() ? experts : 1; }
  /// MLPs each token passes through per block (1 for a dense shape).
  long long mlps_per_token() const { return moe() ? top_k : 1; }

  /// Per-head width dim / n_heads.
  long long head_dim() const { return dim / n_heads; }
  /// Width of K (and of V): n_kv_heads * head_dim.
  long long kv_dim() const { return n_kv_heads * head_dim(); }
  /// Parameters in all linear layers and embeddings (norm weights excluded), every expert included.
  long long parameters() const;
  /// Parameters one token's forward pass uses: only its top_k experts (= parameters() when dense).
  long long active_parameters() const;
  /// Parameters of the experts' MLPs (0 when dense): what expert parallelism shards.
  long long expert_parameters() const;

  /// Every field equal (`origin` included: compare shapes read from the same place).
  friend bool operator==(const ModelShape&, const ModelShape&) = default;
};

/// One GEMM of a plan as the cost model prices it: the stored formats of its operands (format
/// names; "fp32" = unquantised) and the datapath record that runs it.
struct GemmPlan {
  std::string weights = "fp32";  ///< B, the weight matrix (element or block format)
  std::string inputs = "fp32";   ///< A, the activations entering the GEMM
  std::string datapath;  ///< the plan's datapath record; "" = the target's datapath for the rate class
};

/// One transformer block of a plan, for cost.
struct LayerPlan {
  GemmPlan q_proj, k_proj, v_proj, o_proj, gate, up, down;
  std::string q = "fp32";          ///< queries entering QK^T
  std::string probs = "fp32";      ///< probabilities entering PV
  std::string kv_cache = "fp32";   ///< K and V as stored in the cache
  std::string attention_datapath;  ///< datapath of QK^T and PV; "" = the target's for the rate class
};

/// A precision plan as the cost model prices it: every block's formats and datapaths, the LM head
/// and the embedding table. lpemu::experiment::layerwise_plan builds one from an engine plan file.
struct LayerwisePlan {
  std::string name, description, origin;
  std::vector<LayerPlan> layers;  ///< one per block of the priced model shape
  GemmPlan lm_head;
  std::string embedding = "fp32";

  /// The same weights / activations / KV-cache formats in every block, the LM head and (weights) the
  /// embedding table.
  static LayerwisePlan uniform(std::string name, const std::string& weights, const std::string& activations,
                               const std::string& kv_cache, long long n_layers);
};

/// Prefill (a prompt of `context` tokens per sequence) or one decode step at `context`.
enum class Phase { prefill, decode };
/// "prefill" or "decode".
std::string_view to_string(Phase p);
/// The phase spelled `text`; throws SpecError "phase 'x': expected one of prefill, decode".
Phase parse_phase(std::string_view text);

/// What a cluster job prices: a prefill, a decode step, or a training step.
enum class JobPhase { prefill, decode, train };
/// "prefill", "decode" or "train".
std::string_view to_string(JobPhase p);
/// The job phase spelled `text`; throws SpecError "phase 'x': expected one of prefill, decode, train".
JobPhase parse_job_phase(std::string_view text);
/// The inference phase a single device prices for a job (training: the forward pass of one
/// micro-batch, as a prefill).
Phase device_phase(JobPhase p);

/// One operation of a forward pass, repeated `count` times (e.g. once per layer).
struct Op {
  std::string name;
  std::string kind;  ///< "gemm", "attention" or "memory"
  long long count = 1;
  double flops = 0;                ///< per instance (2 per MAC)
  double bytes = 0;                ///< DRAM traffic per instance
  double m = 0, k = 0, n = 0;      ///< GEMM shape y[m, n] = x[m, k] . W[k, n]; 0 for other kinds
  double weight_copies = 1;        ///< weight matrices of this shape read (MoE: experts touched); in `bytes`
  std::string rate_class;          ///< peak-rate class used; empty for memory-only ops
  std::string a_format, b_format;  ///< operand formats as stored (A: inputs/queries, B: weights/cache)
  std::string datapath;            ///< the datapath record priced for the MACs; empty for memory-only ops
  double passes = 1;               ///< MACs of `rate_class` per MAC of the op (> 1: emulated, see rate_note)
  std::string rate_note;           ///< why a non-native class runs it ("" when a class accepts both operands)
  double energy_per_mac_pj = 0;
  double mac_area_fa = 0;  ///< full-adder equivalents per MAC lane of `datapath`
  // Filled in by roofline():
  double compute_s = 0, memory_s = 0, time_s = 0, energy_j = 0;
  bool compute_bound = false;
};

/// Expected number of distinct experts `tokens` tokens reach when each picks `top_k` of `experts`
/// uniformly: E (1 - (1 - k/E)^T); 1 for a dense shape (experts = 0).
double experts_touched(long long experts, long long top_k, double tokens);

/// Every op of one phase, and the tokens it produces or ingests.
struct Workload {
  Phase phase = Phase::decode;
  long long batch = 1, context = 0;
  double tokens = 0;
  double weight_bytes = 0;     ///< every weight (blocks, LM head, embedding) in its plan format
  double bits_per_weight = 0;  ///< bits_per_weight(shape, plan)
  double mac_area_fa = 0;      ///< MAC-weighted mean area per MAC lane over the GEMM and attention ops
  double kv_cache_bytes = 0;   ///< K and V for batch x context tokens
  std::vector<Op> ops;
  std::vector<std::string> notes;  ///< each distinct rate_note of the ops, in order of first use
};

/// How build_workload resolves the format and datapath names of a plan.
struct WorkloadResolver {
  std::function<CostFormat(const std::string&)> format;
  std::function<const MacDatapath&(const std::string&)> datapath;
  /// Names through a catalog (element and block formats, datapath records).
  static WorkloadResolver of(Catalog& catalog);
};

/// One format per role, for the cluster-level models that take a plan as weights, activations and
/// KV cache on one MAC datapath.
struct PlanFormats {
  CostFormat weights, activations, kv_cache;
};

/// Bits per weight of `plan` on `shape`: the parameter-weighted mean over every quantised weight
/// (blocks' linear layers and the LM head, scale overhead included); the unquantised width (32, or
/// 64 for fp64 plans) if none is quantised.
double bits_per_weight(const ModelShape& shape, const LayerwisePlan& plan, Catalog& catalog);
/// bits_per_weight with names resolved by `resolver`.
double bits_per_weight(const ModelShape& shape, const LayerwisePlan& plan, const WorkloadResolver& resolver);

/// Builds every GEMM, attention and memory op of `phase` at batch `batch` and context `context`,
/// each block and the LM head in its own formats, each MAC priced on the datapath that runs it
/// (`catalog` resolves formats and datapaths). Throws SpecError if the target cannot run a format.
Workload build_workload(const ModelShape& shape, const LayerwisePlan& plan, const Target& target,
                        Catalog& catalog, Phase phase, long long batch, long long context);
/// build_workload with names resolved by `resolver`.
Workload build_workload(const ModelShape& shape, const LayerwisePlan& plan, const Target& target,
                        const WorkloadResolver& resolver, Phase phase, long long batch, long long context);
/// build_workload of LayerwisePlan::uniform(formats) with every MAC priced on `datapath`.
Workload build_workload(const ModelShape& shape, const PlanFormats& formats, const Target& target,
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

/// A GEMM's time from a model other than the roofline (a configured compute core): sets one
/// instance's compute_s, memory_s, time_s and compute_bound of a "gemm" op.
using GemmTimer = std::function<void(Op& op)>;

/// Fills each op's time (max of compute and memory time), bound and energy; returns totals. With
/// `gemm_time`, each GEMM op's times come from it instead (its energy stays the roofline's).
Roofline roofline(Workload& w, const Target& target, const GemmTimer& gemm_time = {});

/// How a GEMM of two formats runs on a target: the rate class, and how many MACs of that class
/// each of its MACs takes.
struct RateChoice {
  std::string rate_class;
  double passes = 1;  ///< 1: the class accepts both operands natively; > 1: split-operand emulation
  std::string note;   ///< "" when native; else what runs it and the published scheme it follows
};

/// The rate class a GEMM of `a` x `b` runs on: the narrowest class both fit that `target` has.
/// Where none accepts both, the split-operand emulation a real kernel uses (3xTF32, bf16x3/x6):
/// each operand split into pieces of a wider-range class the target lists, pieces(pieces + 1)/2
/// products; the cheapest such class by passes / peak. Throws SpecError naming the target and
/// formats if neither exists (e.g. fp64 operands).
RateChoice choose_rate_class(const ElementWidth& a, const ElementWidth& b, const Target& target,
                             std::string_view a_name, std::string_view b_name);

/// choose_rate_class's class where it is native; throws SpecError naming the target and formats
/// where no class the target lists accepts both operands.
std::string gemm_rate_class(const ElementWidth& a, const ElementWidth& b, const Target& target,
                            std::string_view a_name, std::string_view b_name);

}  // namespace lpemu::cost
