// Error measures between a reference and an emulated result (DESIGN.md "metrics" layer). All sums
// are in double, sequential, so results do not depend on threads.
#pragma once

#include <cstddef>
#include <span>

namespace lpemu::metrics {

/// Summary of test − reference over a tensor.
struct ErrorStats {
  double mse = 0;        ///< mean squared error
  double max_abs = 0;    ///< largest |test − ref|
  double sqnr_db = 0;    ///< 10·log10(Σref² / Σ(test−ref)²); +inf when equal
  double ref_rms = 0;    ///< RMS of the reference
  std::size_t count = 0;
};

/// Error statistics of `test` against `ref`; throws ShapeError if sizes differ.
ErrorStats compare(std::span<const float> ref, std::span<const float> test);
/// Signal-to-quantisation-noise ratio in dB (+inf for identical inputs).
double sqnr_db(std::span<const float> ref, std::span<const float> test);
/// Mean squared error.
double mse(std::span<const float> ref, std::span<const float> test);
/// log-sum-exp of a logit row, in double.
double log_sum_exp(std::span<const float> logits);
/// −log softmax(logits)[target], in double.
double nll(std::span<const float> logits, int target);
/// KL(P‖Q) in nats between softmax(ref_logits) = P and softmax(test_logits) = Q.
double kl_divergence(std::span<const float> ref_logits, std::span<const float> test_logits);
/// Index of the largest value (the first on ties).
std::size_t argmax(std::span<const float> x);

}  // namespace lpemu::metrics
