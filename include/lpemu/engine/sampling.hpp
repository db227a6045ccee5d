// Sampling the next token from logits: temperature, top-k and top-p (nucleus, Holtzman et al.
// 2020, "The Curious Case of Neural Text Degeneration"), applied in the order of Hugging Face
// transformers' logits warpers (temperature, top-k, top-p); seeded and reproducible.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lpemu/engine/session.hpp"

namespace lpemu::engine {

/// How `lpemu run` picks each new token.
struct SamplingOptions {
  double temperature = 0.0;  ///< 0: greedy (argmax); > 0: softmax(logits / temperature)
  int top_k = 0;             ///< keep the k most likely tokens; 0: all
  double top_p = 1.0;        ///< keep the smallest most-likely set whose probability reaches top_p
  std::uint64_t seed = 0;    ///< seed of the uniform stream (SplitMix64)
};

/// Throws SpecError unless temperature ≥ 0, top_k ≥ 0 and 0 < top_p ≤ 1 (message names the field).
void validate(const SamplingOptions& o);

/// The token chosen from one row of logits with uniform number u ∈ [0, 1): argmax when
/// temperature is 0, else the token where u · (kept mass) falls in the kept tokens' cumulative
/// probabilities, most likely first (ties: lower id first).
int sample_token(std::span<const float> logits, const SamplingOptions& o, double u);

/// As generate_greedy, but each generated token is sample_token(logits, o, u) with u drawn from
/// SplitMix64(o.seed) (Steele, Lea, Flood 2014), one draw per generated token.
std::vector<int> generate(Session& session, const std::vector<int>& prompt, int steps,
                          const SamplingOptions& o);

}  // namespace lpemu::engine
