#include "lpemu/metrics/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "lpemu/error.hpp"

namespace lpemu::metrics {
namespace {

void check_sizes(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) {
    throw ShapeError("metrics: reference has " + std::to_string(a.size()) + " elements, test has " +
                     std::to_string(b.size()));
  }
}

}  // namespace

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
    s.max_abs = std::max(s.max_abs, std::abs(d));
  }
  const double n = ref.empty() ? 1.0 : static_cast<double>(ref.size());
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
    throw ShapeError("metrics: target " + std::to_string(target) + " outside " + std::to_string(logits.size()) +
                     " logits");
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

std::size_t argmax(std::span<const float> x) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < x.size(); ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

}  // namespace lpemu::metrics
