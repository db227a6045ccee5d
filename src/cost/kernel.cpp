#include "lpemu/cost/kernel.hpp"

#include <algorithm>
#include <cmath>

#include "lpemu/error.hpp"

namespace lpemu::cost {

KernelEstimate gemm_kernel(const System& sys, const Target& target, const std::string& rate_class, double m,
                           double k, double n, double bytes, double passes) {
  if (!(m > 0 && k > 0 && n > 0)) {
    throw SpecError("GEMM shape m = " + std::to_string(m) + ", k = " + std::to_string(k) +
                    ", n = " + std::to_string(n) + ": expected positive sizes");
  }
  KernelEstimate e;
  const double tn = static_cast<double>(sys.tile_n);
  const double units = static_cast<double>(sys.kernel_units);
  // The rate a unit sustains inside a wave: the class's peak times the fraction its best measured
  // GEMM reaches (issue, epilogue and clock under load, as published per device and class).
  const double in_wave = target.gemm_efficiency(rate_class);
  const double unit_peak = target.peak_ops(rate_class) * in_wave / units / passes;
  for (long long div = 1; div <= 2; div *= 2) {
    const long long tile_m = std::max<long long>(1, sys.tile_m / div);
    const double tm = static_cast<double>(tile_m);
    const double tiles = std::ceil(m / tm) * std::ceil(n / tn);
    // Split-K: with fewer tiles than units, each tile's k range is shared by several units (at
    // least 128 deep each) whose FP32 partial sums are written and read back once.
    const double split =
        tiles < units ? std::max(1.0, std::min(std::floor(units / tiles), std::floor(k / 128))) : 1.0;
    const double waves = std::ceil(tiles * split / units);
    // Every wave costs one full tile (2 tile_m tile_n k/split flops) at one unit's share of the peak.
    const double compute_s = waves * 2.0 * tm * tn * std::ceil(k / split) / unit_peak;
    if (div > 1 && compute_s >= e.compute_s) continue;
    e.split_k = static_cast<long long>(split);
    e.partial_bytes = split > 1 ? 2.0 * split * m * n * 4.0 : 0.0;
    e.tile_m = tile_m;
    e.tile_n = sys.tile_n;
    e.tiles = static_cast<long long>(tiles);
    e.waves = static_cast<long long>(waves);
    e.wave_efficiency = tiles * split / (waves * units);
    e.padding_efficiency = m * n / (tiles * tm * tn);
    e.kernel_efficiency = in_wave;
    e.achievable_fraction = e.wave_efficiency * e.padding_efficiency * in_wave;
    e.compute_s = compute_s;
  }
  e.memory_s = (bytes + e.partial_bytes) / (target.bandwidth_gb_s * 1e9);
  e.time_s = std::max(e.compute_s, e.memory_s);
  e.compute_bound = e.compute_s >= e.memory_s;
  return e;
}

}  // namespace lpemu::cost
