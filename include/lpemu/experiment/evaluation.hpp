// End-to-end and per-layer error of a model run under a precision plan against a reference run
// (the work behind `lpemu eval` and `lpemu replay`).
#pragma once

#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/metrics/metrics.hpp"

namespace lpemu::experiment {

/// Where an evaluation's time went, in wall-clock seconds (they differ from run to run).
struct EvalTiming {
  double plan_prepare_s = 0;       ///< building the plan's session (its weights quantised and packed)
  double plan_forward_s = 0;       ///< the plan's forward pass, hooks included
  double reference_prepare_s = 0;  ///< building the reference's session
  double reference_forward_s = 0;  ///< the reference's forward pass, hooks included
  /// Of the above: time inside the hooks (residuals recorded, each quantisation point's error
  /// summed), both while the plan's weights are quantised and in the forward passes.
  double hooks_s = 0;
};

/// Per-token and summary results of scoring a token sequence under a plan and a reference plan.
struct EvalResult {
  std::vector<int> tokens;
  std::vector<double> nll;      ///< nll[t] = −log p(tokens[t+1] | tokens[..t]) under the plan
  std::vector<double> ref_nll;  ///< the same under the reference plan
  std::vector<double> kl;       ///< KL(reference ‖ plan) of the next-token distribution at t
  std::vector<int> top1_agree;  ///< 1 where the argmax of both runs agrees at t (0 where a logit is NaN)
  double mean_nll = 0, perplexity = 0, ref_mean_nll = 0, ref_perplexity = 0;
  /// Means over t; NaN once any position's logits hold a NaN (a broken run never reads as agreement).
  double mean_kl = 0, max_kl = 0, top1_agreement = 0;
  /// Residual-stream error per tensor: "layers/l/residual_input" (l ≥ 1), then "final_residual".
  std::vector<std::pair<std::string, metrics::ErrorStats>> residual;
  metrics::ErrorStats logits;     ///< logits of the plan against the reference
  engine::RowMatrix plan_logits;  ///< the plan's logits [tokens, vocab] (row t predicts tokens[t+1])
  /// Error each quantisation point added (its output against its own input), accumulated over
  /// heads and calls, keyed "layer/role/tensor" (layer "head" outside the blocks), in run order.
  std::vector<std::pair<std::string, metrics::ErrorStats>> points;
  EvalTiming timing;  ///< where the time went
};

/// Accumulates ErrorStats of in→out pairs under a key (for QuantHook-based error attribution).
class ErrorAccumulator {
 public:
  /// Adds the elements of one (reference, test) pair to part `part` of `key`'s totals. Parts (e.g.
  /// attention heads, added from parallel work in any order) are summed in ascending order, so
  /// the totals do not depend on the order of the calls across parts.
  void add(const std::string& key, std::span<const float> ref, std::span<const float> test, int part = -1);
  /// Totals per key, in first-seen order.
  std::vector<std::pair<std::string, metrics::ErrorStats>> results() const;

 private:
  struct Sums {
    double sig = 0, err = 0, max_abs = 0;
    std::size_t count = 0;
  };
  std::vector<std::pair<std::string, std::map<int, Sums>>> sums_;
};

/// The tokens `lpemu eval` scores for `text`: trailing newlines dropped, BOS first, cut to the
/// model's seq_len; throws IoError if the model file has no tokenizer.
std::vector<int> eval_tokens(const engine::Model& model, std::string text);

/// Runs `tokens` (BOS first) once under `plan` and once under `reference` (one prefill pass each).
EvalResult evaluate(const engine::Model& model, const engine::PrecisionPlan& plan,
                    const engine::PrecisionPlan& reference, const std::vector<int>& tokens,
                    const engine::QuantizerFactory& quantizers, const engine::GemmFactory& gemms);

/// Error of one linear layer fed with recorded inputs.
struct ReplayRow {
  int layer = -1;      ///< -1 for the classifier
  std::string tensor;  ///< "wq", ..., "w2", "output"; a module path for recorded files
  /// What the linear map is: attention.q|k|v|out, mlp.gate|up|down, mlp, attention, head, or
  /// "other" (a recorded map of unknown role, named by `tensor`).
  std::string role;
  std::string input;  ///< dataset the input came from
  std::string input_format, weight_format, gemm;
  metrics::ErrorStats input_error;   ///< quantised input vs recorded input
  metrics::ErrorStats weight_error;  ///< quantised weight vs model weight
  metrics::ErrorStats output_error;  ///< plan output vs the exact (double) product of the recorded input
};

/// Feeds each linear layer's recorded input from `activations` (schema of stories260K's
/// activations.h5) through the plan's quantisers and GEMM; one row per layer and weight.
std::vector<ReplayRow> replay(const std::filesystem::path& activations, const engine::Model& model,
                              const engine::PrecisionPlan& plan, const engine::QuantizerFactory& quantizers,
                              const engine::GemmFactory& gemms);

/// True if `activations` follows the model-independent schema "lpemu-linear-activations" (a
/// /linear/<name>/{input,weight} group per linear layer, as experiments/record_activations.py writes).
bool is_linear_activations(const std::filesystem::path& activations);

/// Feeds each /linear/<name>/input of a model-independent activations file through its own
/// weight under the plan (roles linear_input/weights, or lm_head_input/lm_head for kind "head").
/// A map of kind "other" takes linear_input/weights too; throws Error naming it when the plan
/// gives attention and MLP layers different formats or GEMMs there (its kind would decide).
std::vector<ReplayRow> replay_linear(const std::filesystem::path& activations,
                                     const engine::PrecisionPlan& plan,
                                     const engine::QuantizerFactory& quantizers,
                                     const engine::GemmFactory& gemms);

}  // namespace lpemu::experiment
