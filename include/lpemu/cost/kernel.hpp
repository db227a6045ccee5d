// Kernel level: a GEMM on a device's compute units. Output tiles of tile_m x tile_n are spread
// over the units in waves; the last wave may leave units idle (wave quantisation) and edge tiles
// carry padding (tile quantisation), as NVIDIA's "Matrix Multiplication Background User's Guide"
// (Deep Learning Performance docs, 2023) describes. Like a library choosing among tile
// configurations, the kernel takes the tile height tile_m or tile_m/2 that finishes first (both
// run at the unit's full rate: a Hopper warp-group MMA is 64 rows, CUTLASS ships 128- and 64-row
// tiles); smaller tiles would lose operand reuse, which this model does not price. With fewer
// tiles than units the k range is split over units (split-K, as cuBLAS and CUTLASS do). DRAM traffic is the
// workload's (each operand once: on-chip memory captures the tile re-reads). Inside a wave a unit
// runs at the fraction of peak the device's best measured GEMM of that class reaches
// (Target::gemm_efficiency, from data/hardware `achieved_tflops`), never a fitted factor.
#pragma once

#include <string>

#include "lpemu/cost/system.hpp"
#include "lpemu/cost/target.hpp"

namespace lpemu::cost {

/// Time of one GEMM y[m, n] = x[m, k] . W[k, n] on a device.
struct KernelEstimate {
  long long tile_m = 0, tile_n = 0;  ///< the tile chosen
  long long tiles = 0, waves = 0;
  long long split_k = 1;           ///< units sharing one tile's k range
  double partial_bytes = 0;        ///< FP32 partial sums written and read back by split-K
  double wave_efficiency = 1;      ///< tiles / (waves x units)
  double padding_efficiency = 1;   ///< m n / (tiles x tile_m x tile_n)
  double kernel_efficiency = 1;    ///< in-wave fraction of peak: Target::gemm_efficiency (measured GEMMs)
  double achievable_fraction = 1;  ///< of the rate class's peak: wave x padding x kernel efficiency
  double compute_s = 0, memory_s = 0, time_s = 0;
  bool compute_bound = false;
};

/// Prices a GEMM of `flops` = 2mkn moving `bytes` of DRAM traffic on `target`'s `rate_class`,
/// tiled as `sys` describes. Each wave takes one full tile's time on one unit (peak / units); a
/// split-operand emulation (RateChoice::passes > 1) takes `passes` times the MACs.
KernelEstimate gemm_kernel(const System& sys, const Target& target, const std::string& rate_class, double m,
                           double k, double n, double bytes, double passes = 1);

}  // namespace lpemu::cost
