// `lpemu run` and `lpemu.call("run", ...)`: text generated from a prompt under a precision plan
// (greedy, or sampled with temperature, top-k and top-p).
#pragma once

#include <string>
#include <vector>

#include "lpemu/app/fields.hpp"
#include "lpemu/engine/sampling.hpp"
#include "lpemu/experiment/context.hpp"

namespace lpemu::app {

/// What to generate.
struct GenerateRequest {
  std::string model = "stories260K";  ///< model .h5 file or shipped model name
  std::string plan = "fp32";          ///< plan file, fp32/fp64 or shipped plan name
  std::string prompt;                 ///< prompt text (empty: start from BOS alone)
  std::string tokens;                 ///< prompt as a 1-D integer .npy of token ids instead
  int steps = 256;                    ///< positions to run, prompt included
  engine::SamplingOptions sampling;   ///< temperature (0: greedy), top_k, top_p, seed
};

/// Generated tokens.
struct GenerateResult {
  std::string model, plan;  ///< the model's and plan's names
  std::vector<int> tokens;  ///< every token, prompt included
  std::string text;         ///< the tokens decoded ("" for a model without a tokenizer)
  bool has_tokenizer = false;
  int positions = 0;     ///< positions the session ran
  double seconds = 0;    ///< generation time (wall clock, like the three below: differs run to run)
  double load_s = 0;     ///< loading the model
  double prepare_s = 0;  ///< building the session (the plan's weights quantised and packed)
  double total_s = 0;    ///< the whole call
};

/// Generates as `request` says; throws lpemu::Error for bad input.
GenerateResult generate(experiment::Context& ctx, const GenerateRequest& request);
/// The result's one serialised form (`lpemu run --json`).
Fields fields(const GenerateResult& r);
/// A request from named fields (model, plan, prompt, tokens, steps, temperature, top_k, top_p,
/// seed).
GenerateRequest generate_request(const Fields& f);

}  // namespace lpemu::app
