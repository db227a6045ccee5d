// `lpemu eval` and `lpemu.call("eval", ...)`: a model scored under a precision plan against a
// reference plan, on one sequence (per-token NLL, KL, top-1 agreement, residual-stream and
// per-quantisation-point error) or on a corpus (sliding-window perplexity per document).
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lpemu/app/fields.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/experiment/evaluation.hpp"
#include "lpemu/metrics/perplexity.hpp"

namespace lpemu::app {

/// Progress of a long run: what runs ("plan NAME"), units done and to do, seconds so far.
struct Progress {
  std::string what;
  std::size_t done = 0, total = 0;
  double seconds = 0;
};
/// Called as a long run goes (on the calling thread); may be empty.
using ProgressFn = std::function<void(const Progress&)>;

/// What to score.
struct EvalRequest {
  std::string model = "stories260K";          ///< model .h5 file or shipped model name
  std::string plan = "fp32";                  ///< plan file, fp32/fp64 or shipped plan name
  std::string reference = "fp32";             ///< reference plan
  std::vector<std::filesystem::path> texts;   ///< UTF-8 text files, one document each
  std::vector<std::filesystem::path> tokens;  ///< 1-D integer .npy files of token ids instead
  int context = 0, stride = 0;       ///< sliding-window perplexity (0: the model's seq_len; = context)
  int batch_tokens = 512;            ///< windows run together up to this many tokens
  std::filesystem::path logits_out;  ///< one sequence: write the plan's logits here (.npy)
  bool force = false;                ///< replace an existing logits_out
  ProgressFn progress;               ///< corpus runs report progress per plan
};

/// One document of a corpus run.
struct DocumentScore {
  std::string name;
  std::size_t tokens = 0;
  metrics::PerplexityResult plan, reference;
};

/// A scored model: `single` for one sequence that fits the model's context, else `documents`.
struct EvalReport {
  std::string model, plan, reference;
  std::optional<experiment::EvalResult> single;
  std::vector<DocumentScore> documents;
  std::vector<std::string> pieces;  ///< single: the tokenizer's piece of each token ("" without one)
  double load_s = 0;                ///< loading the model (wall clock; differs run to run)
  experiment::EvalTiming timing;    ///< sessions built and run (single: `single->timing`)
  double total_s = 0;               ///< the whole call
};

/// An error statistic's fields (sqnr_db, mse, max_abs).
Fields fields(const metrics::ErrorStats& s);

/// One sequence's scores (NLL, perplexity, KL, top-1 agreement, logits, residual-stream and
/// per-point error; not the per-token lists).
Fields fields(const experiment::EvalResult& e);

/// Where an evaluation's time went (`timing` of eval, sweep plans): seconds per stage.
Fields fields(const experiment::EvalTiming& t);
/// Scores the request's documents; throws lpemu::Error for bad input.
EvalReport evaluate(experiment::Context& ctx, const EvalRequest& request);

/// The report's one serialised form (`lpemu eval --json`).
Fields fields(const EvalReport& r);

/// A request from named fields (texts, tokens, model, plan, reference, context, stride,
/// batch_tokens, logits_out, force).
EvalRequest eval_request(const Fields& f);

}  // namespace lpemu::app
