#include "lpemu/metrics/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "lpemu/block/quantize.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::metrics {
namespace {

void check_sizes(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) {
    throw ShapeError("metrics: reference has " + std::to_string(a.size()) + " elements, test has " +
                     std::to_string(b.size()));
  }
}

}  // namespace

double max_nan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return std::max(a, b);
}

double QuantizationStats::mse() const {
  return count != 0 ? noise / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN();
}

double QuantizationStats::sqnr_db() const {
  if (count == 0) return std::numeric_limits<double>::quiet_NaN();
  return noise > 0 ? 10.0 * std::log10(signal / noise) : std::numeric_limits<double>::infinity();
}

double QuantizationStats::fraction(std::size_t n) const {
  return static_cast<double>(n) / (count != 0 ? static_cast<double>(count) : 1.0);
}

QuantizationStats quantization_stats(std::span<const float> x, std::span<const float> q,
                                     std::span<const double> limit, std::span<const std::uint8_t> at_max) {
  check_sizes(x, q);
  if (limit.size() != x.size() || at_max.size() != x.size()) {
    throw ShapeError("metrics: " + std::to_string(x.size()) + " elements but " +
                     std::to_string(limit.size()) + " limits and " + std::to_string(at_max.size()) +
                     " saturation flags");
  }
  QuantizationStats s;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) {
      ++s.nonfinite_inputs;
      continue;
    }
    ++s.count;
    const double xv = x[i];
    if (!std::isfinite(q[i])) {  // a finite input that came out NaN or Inf: unbounded error
      ++s.nonfinite_outputs;
      s.signal += xv * xv;
      s.noise = s.max_abs = s.max_rel = std::numeric_limits<double>::infinity();
      continue;
    }
    const double qv = q[i], e = std::fabs(xv - qv);
    s.signal += xv * xv;
    s.noise += (xv - qv) * (xv - qv);
    s.max_abs = std::max(s.max_abs, e);
    if (xv != 0.0) s.max_rel = std::max(s.max_rel, e / std::fabs(xv));
    if (std::fabs(xv) > limit[i]) ++s.clipped;
    if (at_max[i] != 0 && qv != 0.0) ++s.saturated;
    if (xv != 0.0 && qv == 0.0) ++s.flushed;
  }
  // No finite input (an empty tensor, or all NaN/Inf): the errors are unknown, not zero.
  if (s.count == 0) s.max_abs = s.max_rel = std::numeric_limits<double>::quiet_NaN();
  return s;
}

QuantizationStats quantization_stats(const block::BlockFormat& f, std::span<const float> x,
                                     std::span<const float> q, std::span<const std::size_t> shape) {
  const block::BlockTensor t = block::encode(f, x, shape);
  const block::BlockLayout& L = t.layout;
  std::vector<double> limit(L.element_count());
  std::vector<std::uint8_t> at_max(L.element_count());
  for (std::size_t i = 0; i < limit.size(); ++i) {
    const std::size_t a = i / (L.rows * L.cols), r = (i / L.cols) % L.rows, c = i % L.cols;
    const std::size_t b = (a * L.grid_rows() + r / L.block_rows) * L.grid_cols() + c / L.block_cols;
    limit[i] =
        f.element.max_finite * block::scale_value(f, t.scales[b]) * static_cast<double>(t.tensor_scale);
    at_max[i] = std::fabs(format::decode(f.element, t.codes[i])) == f.element.max_finite ? 1 : 0;
  }
  return quantization_stats(x, q, limit, at_max);
}

QuantizationStats quantization_stats(const format::Format& f, std::span<const float> x,
                                     std::span<const float> q) {
  check_sizes(x, q);
  const std::vector<double> limit(x.size(), f.max_finite);
  std::vector<std::uint8_t> at_max(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    at_max[i] = std::fabs(static_cast<double>(q[i])) == f.max_finite ? 1 : 0;
  return quantization_stats(x, q, limit, at_max);
}

ErrorStats compare(std::span<const float> ref, std::span<const float> test) {
  check_sizes(ref, test);
  ErrorStats s;
  s.count = ref.size();
  double sig = 0;
  double err = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double r = static_cast<double>(ref[i]);
    const double d = static_cast<double>(test[i]) - r;
    sig += r * r;
    err += d * d;
    s.max_abs = max_nan(s.max_abs, std::abs(d));
  }
  if (ref.empty()) {  // no element: nothing was measured, so every error is unknown (NaN), not 0
    s.mse = s.max_abs = s.ref_rms = s.sqnr_db = std::numeric_limits<double>::quiet_NaN();
    return s;
  }
  const double n = static_cast<double>(ref.size());
  s.mse = err / n;
  s.ref_rms = std::sqrt(sig / n);
  s.sqnr_db = err == 0 ? std::numeric_limits<double>::infinity() : 10.0 * std::log10(sig / err);
  return s;
}

double sqnr_db(std::span<const float> ref, std::span<const float> test) { return compare(ref, test).sqnr_db; }

double mse(std::span<const float> ref, std::span<const float> test) { return compare(ref, test).mse; }

double log_sum_exp(std::span<const float> logits) {
  double m = -std::numeric_limits<double>::infinity();
  for (const float x : logits) m = std::max(m, static_cast<double>(x));
  double s = 0;
  for (const float x : logits) s += std::exp(static_cast<double>(x) - m);
  return m + std::log(s);
}

double nll(std::span<const float> logits, int target) {
  if (target < 0 || static_cast<std::size_t>(target) >= logits.size()) {
    throw ShapeError("metrics: target " + std::to_string(target) + " outside " +
                     std::to_string(logits.size()) + " logits");
  }
  return log_sum_exp(logits) - static_cast<double>(logits[static_cast<std::size_t>(target)]);
}

double kl_divergence(std::span<const float> ref_logits, std::span<const float> test_logits) {
  check_sizes(ref_logits, test_logits);
  const double lp = log_sum_exp(ref_logits);
  const double lq = log_sum_exp(test_logits);
  double kl = 0;
  for (std::size_t i = 0; i < ref_logits.size(); ++i) {
    const double log_p = static_cast<double>(ref_logits[i]) - lp;
    const double log_q = static_cast<double>(test_logits[i]) - lq;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return std::max(kl, 0.0);
}

}  // namespace lpemu::metrics
