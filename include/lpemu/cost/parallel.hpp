// Cluster level: training steps and inference steps of a transformer on a System under tensor (TP,
// with optional sequence parallelism SP), pipeline (PP, 1F1B or interleaved), data (DP, ZeRO
// stages), context (CP) and expert (EP) parallelism; memory per device; search over configs.
// Mechanisms and formulas: Shoeybi et al., "Megatron-LM" (arXiv:1909.08053); Narayanan et al.,
// "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM" (SC'21,
// arXiv:2104.04473); Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
// Models" (arXiv:2205.05198); Rajbhandari et al., "ZeRO" (SC'20, arXiv:1910.02054).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lpemu/cost/collectives.hpp"
#include "lpemu/cost/system.hpp"
#include "lpemu/cost/workload.hpp"

namespace lpemu::cost {

/// Degrees of parallelism; devices = tp x pp x dp x cp (EP reuses the DP x CP ranks).
struct Parallel {
  long long tp = 1, pp = 1, dp = 1, cp = 1, ep = 1;
  long long vpp = 1;    ///< virtual pipeline stages per device (interleaved 1F1B); 1 = plain 1F1B
  bool sp = false;      ///< sequence parallelism inside the TP group (Korthikanti et al. 2022)
  int zero = 1;         ///< ZeRO stage: 0 none, 1 optimizer states, 2 + gradients, 3 + weights (FSDP)
  long long first = 0;  ///< layers on the first pipeline stage (0: derived, see stage_layers)
  long long last = 0;   ///< layers on the last pipeline stage (0: derived, see stage_layers)
  /// tp x pp x dp x cp.
  long long devices() const { return tp * pp * dp * cp; }
  /// "tp=8,pp=4,dp=32,..." (only the fields that differ from 1/false, plus zero).
  std::string str() const;
};

/// The largest degree of any parallel dimension, and of their product (devices): 2^20.
inline constexpr long long kMaxParallelDegree = 1LL << 20;

/// Layers held by each of the pp pipeline stages. `first` and `last` (a missing one equal to the
/// other) set the first and last stage, the others share the rest evenly (Megatron-Core's
/// decoder_first/last_pipeline_num_layers). With neither given, pp dividing n_layers splits evenly;
/// otherwise the middle stages take ceil(n_layers / pp) each and the first and last stage what is
/// left, the embedding and LM head sitting beside fewer layers, as Llama 3 405B ran 126 layers on
/// 16 stages (Dubey et al., "The Llama 3 Herd of Models", arXiv:2407.21783, §3.3.2). Throws
/// SpecError naming the layers and stages when no split gives every stage at least one layer (and at
/// least vpp, one per virtual stage; virtual stages need not be equal).
std::vector<long long> stage_layers(const Parallel& p, long long n_layers);

/// Parses "tp=8,pp=4,dp=32,cp=1,ep=1,vpp=1,sp=1,zero=1,first=7,last=7"; missing keys keep their
/// defaults. If `devices` > 0 and dp is absent, dp = devices / (tp pp cp). Throws SpecError on bad
/// input, including a degree or device count above kMaxParallelDegree.
Parallel parse_parallel(std::string_view spec, long long devices = 0);

/// Activation recomputation in the backward pass.
enum class Recompute { none, selective, full };
/// "none", "selective" (attention core only) or "full" (whole layer); throws SpecError otherwise.
Recompute parse_recompute(std::string_view s);
/// Name of a recomputation mode.
const char* recompute_name(Recompute r);
/// Name of a recomputation mode ("none", "selective", "full").
std::string_view to_string(Recompute r);

/// Formats per tensor role in training.
struct TrainFormats {
  CostFormat weights, activations;  ///< GEMM operands (forward and backward)
  CostFormat gradients;             ///< weight gradients as accumulated and kept
  CostFormat optimizer_states;      ///< Adam m and v
  CostFormat master_weights;        ///< what the optimizer updates
  CostFormat grad_comm;             ///< gradients on the wire (DP all-reduce / reduce-scatter)
  CostFormat act_comm;              ///< activations on the wire (TP, CP, PP)
};

/// One training run's shape.
struct TrainConfig {
  Parallel par;
  long long seq = 2048, global_batch = 512, micro_batch = 1;
  Recompute recompute = Recompute::selective;
  bool flash_attention = true;  ///< fused attention: no s x s scores stored or read from DRAM
  bool overlap_dp = true;       ///< DP gradient reduction overlaps the last micro-batch's backward
};

/// Where one step's time goes on the slowest (critical) device, seconds per step.
struct StepTime {
  double compute_s = 0;  ///< compute-bound kernels (forward, backward, recomputation)
  double memory_s = 0;   ///< memory-bound kernels
  double tp_s = 0, cp_s = 0, pp_s = 0, dp_s = 0;  ///< exposed communication per parallel dimension
  double ep_s = 0;                                ///< expert-parallel all-to-alls (MoE shapes)
  double bubble_s = 0;                            ///< pipeline fill and drain
  double optimizer_s = 0;                         ///< the optimizer step (memory bound)
  /// The recomputed forward passes: a part of compute_s + memory_s, not added again to step_s.
  double recompute_s = 0;
  double step_s = 0;  ///< total
};

/// Bytes held per device at the peak.
struct DeviceMemory {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0, total = 0, capacity = 0;
  double reserve = 0;  ///< CUDA context and loaded kernels, counted in total
  bool fits = true;
  std::string why;  ///< what does not fit, when it does not
};

/// A priced training step.
struct TrainResult {
  TrainConfig config;
  long long microbatches = 0;  ///< per pipeline per step
  std::string rate_class;      ///< the GEMMs' peak-rate class
  StepTime time;
  DeviceMemory memory;
  double model_flops = 0;  ///< forward + backward flops of the model per step, no recomputation
  double tokens_per_s = 0;
  double tflops_per_device = 0;  ///< model_flops / step / devices
  double mfu = 0;                ///< tflops_per_device / peak of rate_class
  std::vector<std::string>
      warnings;  ///< settings that are priced but make little sense (see parallel_warnings)
};

/// Pipeline bubble as a share of the step: (p - 1) / (v m + p - 1) for p stages, m micro-batches
/// and v virtual stages per device (Narayanan et al. 2021, §2.2).
double bubble_fraction(long long p, long long m, long long v = 1);

/// Prices one training step of `shape` on `sys` (device `target`); throws SpecError if the
/// configuration is inconsistent (degrees that do not divide the model, batch or system).
TrainResult training_step(const ModelShape& shape, const TrainFormats& f, const System& sys,
                          const Target& target, const MacDatapath& dp, const TrainConfig& cfg);

/// Every consistent configuration on `devices` devices (TP inside one scale-up domain, PP over
/// every stage count stage_layers splits the layers into, CP, micro-batch, recomputation,
/// interleaving depth vpp 1/2/4, ZeRO 1/2/3), best tokens/s first; those that do not fit in memory
/// come after the ones that do. `base` gives seq, global batch, attention and DP overlap.
std::vector<TrainResult> search_training(const ModelShape& shape, const TrainFormats& f, const System& sys,
                                         const Target& target, const MacDatapath& dp, long long devices,
                                         const TrainConfig& base);

/// The fewest devices (scale-up domain size x 1, 2, 4, ... up to `max_devices`) whose best
/// fitting configuration from `search_training` steps in at most `max_step_s`; returns that
/// search (empty if no device count up to `max_devices` meets the target).
std::vector<TrainResult> fewest_devices_for_step(const ModelShape& shape, const TrainFormats& f,
                                                 const System& sys, const Target& target,
                                                 const MacDatapath& dp, const TrainConfig& base,
                                                 double max_step_s, long long max_devices);

/// A priced inference step (prefill of a prompt, or one decode step) under TP and PP.
struct InferenceResult {
  Parallel par;
  Phase phase = Phase::decode;
  long long batch = 0, context = 0;
  double step_s = 0, compute_s = 0, memory_s = 0, tp_s = 0, pp_s = 0;
  /// Device time lost waiting for the host: per kernel, the eager launch time (5 us) less the
  /// kernel's own time where that is shorter (decode at small batch).
  double launch_s = 0;
  double tokens_per_s = 0;
  double weight_bytes = 0, kv_bytes = 0, capacity = 0;  ///< per device
  bool fits = true;
  std::string why;
  std::vector<std::string> warnings;  ///< see parallel_warnings
};

/// What is ill-posed about running `par` on `sys` with sequences of `seq` tokens, each a sentence
/// naming the degree: TP wider than the scale-up domain (its all-reduces then cross the scale-out
/// network every layer), CP leaving fewer query rows per rank than one 128-row attention tile
/// (FlashAttention-2's query block: Dao, "FlashAttention-2", arXiv:2307.08691, §3.3). Empty if none.
std::vector<std::string> parallel_warnings(const Parallel& par, const System& sys, long long seq);

/// One prefill or decode step at `batch` sequences of `context` tokens with TP x PP devices.
InferenceResult inference_step(const ModelShape& shape, const PlanFormats& f, const System& sys,
                               const Target& target, const MacDatapath& dp, const Parallel& par, Phase phase,
                               long long batch, long long context);

/// The largest batch whose weights and KV cache at `context` fit per device (0 if the weights
/// alone do not fit).
long long max_batch_for_kv(const ModelShape& shape, const PlanFormats& f, const Target& target,
                           const Parallel& par, long long context);

}  // namespace lpemu::cost
