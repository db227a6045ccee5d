// Perplexity of token sequences longer than a model's context: the sliding-window recipe of the
// Hugging Face transformers guide "Perplexity of fixed-length models" (windows of `context`
// tokens starting every `stride` tokens; each token is scored once, in the first window that
// reaches it, with the rest of that window as its context).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"

namespace lpemu::metrics {

/// Window length, stride and an optional progress callback for sliding_perplexity.
struct PerplexityOptions {
  int context = 0;  ///< window length in tokens; 0 = the model's seq_len
  int stride = 0;   ///< distance between window starts; 0 = context (disjoint windows)
  /// Called after each window with (tokens scored so far, tokens to score, seconds elapsed).
  std::function<void(std::size_t done, std::size_t total, double seconds)> progress;
};

/// Negative log-likelihoods of one sequence under a plan.
struct PerplexityResult {
  std::vector<double> nll;  ///< nll[t-1] = −log p(tokens[t] | its window), t = 1..n−1
  int windows = 0;          ///< forward passes run
  double mean_nll = 0;      ///< mean of nll
  double perplexity = 0;    ///< exp(mean_nll)
};

/// Scores tokens[1..] of one document with sliding windows; throws ShapeError for fewer than two
/// tokens, a context beyond the model's seq_len, or a stride outside 1..context.
PerplexityResult sliding_perplexity(const engine::Model& model, const engine::PrecisionPlan& plan,
                                    const std::vector<int>& tokens,
                                    const engine::QuantizerFactory& quantizers,
                                    const engine::GemmFactory& gemms, const PerplexityOptions& options = {});

}  // namespace lpemu::metrics
