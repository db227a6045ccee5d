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
#include "lpemu/engine/session.hpp"

namespace lpemu::metrics {

/// Window length, stride, batching and an optional progress callback for sliding_perplexity.
struct PerplexityOptions {
  int context = 0;  ///< window length in tokens; 0 = the model's seq_len
  int stride = 0;   ///< distance between window starts; 0 = context (disjoint windows)
  /// Windows (of any documents) run together as one batch up to this many tokens (at least one
  /// window per batch); batching never changes a result (Session::forward_batch).
  int batch_tokens = 512;
  /// Called after each batch with (tokens scored so far, tokens to score, seconds elapsed).
  std::function<void(std::size_t done, std::size_t total, double seconds)> progress;
};

/// Negative log-likelihoods of one sequence under a plan.
struct PerplexityResult {
  /// −log p(tokens[t] | its window) of each scored token in order: every t ≥ 1 but the first
  /// token of a window that no earlier window reached (stride = context), as in the recipe
  std::vector<double> nll;
  int windows = 0;        ///< forward passes run
  double mean_nll = 0;    ///< mean of nll
  double perplexity = 0;  ///< exp(mean_nll)
};

/// Scores tokens[1..] of each document with sliding windows on `session` (its cache must hold a
/// window: SessionOptions::max_tokens ≥ min(context, longest document)); throws ShapeError for a
/// document of fewer than two tokens, a context beyond the model's seq_len, or a stride outside
/// 1..context. The session is left reset.
std::vector<PerplexityResult> sliding_perplexity(engine::Session& session,
                                                 const std::vector<std::vector<int>>& documents,
                                                 const PerplexityOptions& options = {});

/// The KV-cache length (SessionOptions::max_tokens) that sliding_perplexity of `documents` needs.
int perplexity_cache_tokens(const engine::Model& model, const std::vector<std::vector<int>>& documents,
                            const PerplexityOptions& options);

/// One document under a plan, in a session of its own.
PerplexityResult sliding_perplexity(const engine::Model& model, const engine::PrecisionPlan& plan,
                                    const std::vector<int>& tokens,
                                    const engine::QuantizerFactory& quantizers,
                                    const engine::GemmFactory& gemms, const PerplexityOptions& options = {});

}  // namespace lpemu::metrics
