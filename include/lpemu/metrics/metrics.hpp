// Error measures between a reference and an emulated result (the "metrics" layer). All sums
// are in double, sequential, so results do not depend on threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "lpemu/block/block_format.hpp"
#include "lpemu/format/format.hpp"

namespace lpemu::metrics {

/// Summary of test − reference over a tensor.
struct ErrorStats {
  double mse = 0;      ///< mean squared error
  double max_abs = 0;  ///< largest |test − ref|
  double sqnr_db = 0;  ///< 10·log10(Σref² / Σ(test−ref)²); +inf when equal
  double ref_rms = 0;  ///< RMS of the reference
  std::size_t count = 0;
};

/// What quantising x into q did, over the finite inputs (non-finite inputs are only counted).
struct QuantizationStats {
  std::size_t count = 0;              ///< finite inputs
  std::size_t nonfinite_inputs = 0;   ///< NaN/Inf inputs (excluded from everything else)
  std::size_t nonfinite_outputs = 0;  ///< finite inputs that came out NaN/Inf (unbounded error)
  std::size_t clipped = 0;            ///< |x| above the largest magnitude its block can represent
  std::size_t saturated = 0;          ///< element code at the element format's largest finite magnitude
  std::size_t flushed = 0;            ///< non-zero inputs that came out zero
  double signal = 0;                  ///< Σx²
  double noise = 0;                   ///< Σ(x−q)² (+inf once an output is non-finite)
  double max_abs = 0;                 ///< largest |x − q| (NaN without finite inputs)
  double max_rel = 0;                 ///< largest |x − q| / |x| over x ≠ 0 (NaN without finite inputs)

  /// Mean squared error over the finite inputs (NaN when there are none).
  double mse() const;
  /// 10·log10(signal / noise): +inf without noise, −inf with unbounded noise, NaN without finite inputs.
  double sqnr_db() const;
  /// `n` as a fraction of the finite inputs.
  double fraction(std::size_t n) const;
};

/// Statistics of q = quantised x, where element i can represent magnitudes up to `limit[i]` and
/// `at_max[i]` says whether its element code has the element format's largest finite magnitude;
/// throws ShapeError if sizes differ.
QuantizationStats quantization_stats(std::span<const float> x, std::span<const float> q,
                                     std::span<const double> limit, std::span<const std::uint8_t> at_max);
/// Statistics of q = block::quantize(f, x, shape): saturation read from the element codes, so it
/// is exact for every scale format (power of two or not).
QuantizationStats quantization_stats(const block::BlockFormat& f, std::span<const float> x,
                                     std::span<const float> q, std::span<const std::size_t> shape);
/// Statistics of q = format::quantize(f, x) (no scale: the limit is f's largest finite value).
QuantizationStats quantization_stats(const format::Format& f, std::span<const float> x,
                                     std::span<const float> q);

/// The larger of `a` and `b`, NaN if either is NaN (std::max(a, NaN) is a, which would hide it).
double max_nan(double a, double b);
/// Error statistics of `test` against `ref` (NaN where an element pair is not comparable, e.g. a NaN
/// on either side or +Inf against +Inf; every statistic NaN for empty spans); throws ShapeError if
/// sizes differ.
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

}  // namespace lpemu::metrics
