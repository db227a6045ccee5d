// Range counts of training's quantisation points: how many finite elements a quantisation took
// above its format's range (saturated or ±Inf/NaN) and how many non-zero ones it flushed to zero,
// per plan role, summed over a step (`lpemu train`'s overflow_ROLE and underflow_ROLE columns).
#pragma once

#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <mutex>

#include "lpemu/engine/quantizer.hpp"

namespace lpemu::train {

/// What quantising tensors did to the finite elements that went in: `overflow` counts those whose
/// magnitude exceeded the largest their format can hold at their scale (the element format's largest
/// finite value times the block, tensor or delayed scale; they saturated or became ±Inf/NaN),
/// `underflow` the non-zero ones that came out zero (flushed). Non-finite inputs are not counted.
struct RangeCounts {
  std::uint64_t elements = 0;   ///< finite elements quantised
  std::uint64_t overflow = 0;   ///< of them, above the representable range (saturated or ±Inf/NaN)
  std::uint64_t underflow = 0;  ///< of them, non-zero and quantised to zero

  /// Adds `o`'s counts.
  RangeCounts& operator+=(const RangeCounts& o) {
    elements += o.elements;
    overflow += o.overflow;
    underflow += o.underflow;
    return *this;
  }
};

/// The range counts of quantising `x` into `q`, element i representable up to `limit(i)`.
template <class T, class Limit>
RangeCounts range_counts(const T* x, const T* q, std::size_t n, const Limit& limit) {
  RangeCounts c;
  for (std::size_t i = 0; i < n; ++i) {
    const double xv = static_cast<double>(x[i]), qv = static_cast<double>(q[i]);
    if (!std::isfinite(xv)) continue;
    ++c.elements;
    if (!std::isfinite(qv) || std::abs(xv) > limit(i)) ++c.overflow;
    if (xv != 0.0 && qv == 0.0) ++c.underflow;
  }
  return c;
}

/// Per-role range counts of a LinearPlan's quantisers, shared by its sites (quantisation may run
/// on several threads).
struct RoleCounts {
  std::array<RangeCounts, std::size(engine::kAllRoles)> by_role;
  std::mutex mutex;
  std::atomic<bool> enabled{true};  ///< false: quantisers do not count (LinearPlan::set_counting)
};

/// Quantises `x` in place by `q` at `p` (the bits of q.apply) and adds the range counts of its
/// finite elements to `c`: overflow against each element's limit (the element format's largest
/// finite value times its block scale and tensor scale), underflow as non-zero elements that came
/// out zero. Without a copy of `x` where the scales follow from amaxes alone (every scale rule but
/// `search`, finite inputs); otherwise through the encoding and a copy.
void apply_counted(const engine::Quantizer& q, const engine::QuantPoint& p, engine::RowMatrix& x,
                   RangeCounts& c);
/// The same in double.
void apply_counted(const engine::Quantizer& q, const engine::QuantPoint& p, engine::RowMatrixD& x,
                   RangeCounts& c);

}  // namespace lpemu::train
