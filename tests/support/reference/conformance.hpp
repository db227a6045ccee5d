// Runs lpemu's three conversion paths (bulk fast kernel, scalar generic path, bulk quantize) on
// a batch of float32 inputs and compares each with the independent reference (element_reference).
// Thread-safe: many batches may run at once (oneTBB); failures are collected, not asserted, so
// the calling test reports them from the main thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "lpemu/format/format.hpp"
#include "lpemu/format/rounding.hpp"
#include "support/reference/element_reference.hpp"

namespace lpemu::test::ref {

/// Mismatches found by check_batch: a count and the first few descriptions.
class Failures {
 public:
  void add(std::string what);
  std::uint64_t count() const { return count_.load(); }
  std::vector<std::string> first() const;
  /// Number of inputs checked (summed over batches).
  std::atomic<std::uint64_t> checked{0};

 private:
  std::atomic<std::uint64_t> count_{0};
  mutable std::mutex mutex_;
  std::vector<std::string> first_;
};

/// Which paths check_batch compares with the reference.
struct Paths {
  bool bulk_encode = true;
  bool bulk_quantize = true;
  bool scalar_encode = true;
  std::size_t scalar_stride = 1;  ///< the scalar path checks every scalar_stride-th input only
};

/// Checks every input of `in` (element i has stochastic index opts.index_offset + i) with the
/// given paths. `in.size()` should stay <= 32768 so the bulk calls run on the calling thread.
void check_batch(const format::Format& f, const Table& t, std::span<const float> in,
                 const format::ConvertOptions& opts, Failures& failures, Paths paths = {});

/// The float32 exponent range [lo, hi] (unbiased) of the "interesting window":
/// [emin - p - 2, emax + 2], clipped to float32's binades (-127 stands for float subnormals).
std::pair<int, int> interesting_window(const Table& t, const format::Format& f);

/// The boundary set: every value and midpoint (and its negative), ±1..4 float ulps around each,
/// the window's binade edges ±4 ulps, float32 extremes and every special class.
std::vector<float> boundary_set(const Table& t, const format::Format& f);

/// Every `stride`-th float32 bit pattern (both signs) whose exponent lies in [lo, hi].
std::vector<float> strided_window(std::pair<int, int> window, std::uint32_t stride);

/// Reference options matching `opts` for the element with stochastic index `index`.
Options reference_options(const format::ConvertOptions& opts, std::uint64_t index);

}  // namespace lpemu::test::ref
