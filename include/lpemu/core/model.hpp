// The cycle model of a core (lpemu/core/core.hpp) running GEMMs C[M,N] = A[M,K] . B[K,N]:
// folds, fill and drain of the systolic array per dataflow (as SCALE-Sim v2 counts them), the
// lane's packing and pipeline from its datapath record, scratchpad ports, DRAM traffic under the
// reuse model of docs/core-model.md, stalls, utilisation and energy. Analytic per fold: the cost
// of a GEMM does not grow with its size.
#pragma once

#include <string>
#include <vector>

#include "lpemu/core/core.hpp"
#include "lpemu/datapath/datapath.hpp"

namespace lpemu::core {

/// A GEMM C[m,n] = A[m,k] . B[k,n], run `count` times.
struct Gemm {
  std::string name;
  long long m = 1, n = 1, k = 1;
  long long count = 1;
};

/// What a lane is, derived from its datapath record and the core's port width.
struct Lane {
  int a_bits = 0, b_bits = 0;  ///< element bits of A and B
  double a_scale_bits = 0;     ///< block-scale bits per element of A and of B (scale bits / block)
  int pack = 1;                ///< products a lane forms per cycle: port_bits / widest input
  int pipeline_depth = 1;      ///< cycles from operands in to the lane's sum out
  int c_bits = 0;              ///< bits of each C element written out
};

/// Bytes and accesses of one operand.
struct Traffic {
  double sram_reads = 0;   ///< elements read from the scratchpad by the array
  double sram_writes = 0;  ///< elements written into the scratchpad (fills from DRAM, array outputs)
  double dram_bytes = 0;   ///< bytes moved between DRAM and the scratchpad
};

/// The result of one GEMM on a core (per instance; multiply by Gemm::count for all of them).
struct GemmCycles {
  Gemm gemm;
  long long sr = 0, sc = 0,
            t = 0;  ///< spatial rows, spatial columns, temporal extent (SCALE-Sim's Sr, Sc, T)
  long long row_folds = 0, col_folds = 0;
  long long splits = 1;           ///< pieces the temporal extent T is split into (Tiling::search), 1: none
  long long cycles_per_fold = 0;  ///< with T unsplit
  long long compute_cycles = 0;   ///< stall-free: folds x (splits x (cycles_per_fold - T) + T)
  long long sram_stall_cycles = 0;
  long long dram_stall_cycles = 0;
  long long latency_cycles = 0;  ///< dot units: the last dot product's pipeline latency (in total_cycles)
  long long total_cycles = 0;
  double seconds = 0;
  double macs = 0;
  double mapping_efficiency = 0;  ///< mean over folds of lanes holding work / lanes
  double utilization = 0;         ///< macs / (peak_macs_per_cycle x (total_cycles - latency_cycles))
  std::string loop_order;  ///< "col_outer" (SCALE-Sim's) or "row_outer": the one with less DRAM traffic
  Traffic a, b, c;
  double dram_bytes = 0, preloaded_bytes = 0;
  double l2_bytes = 0;  ///< bytes between the L2 and the scratchpads (0 without an [l2])
  double energy_pj = 0, mac_energy_pj = 0, sram_energy_pj = 0, l2_energy_pj = 0, dram_energy_pj = 0;
  bool compute_bound = true;  ///< compute cycles >= the DRAM-limited cycles
};

/// The lane of `core` running datapath `lane`: packing and pipeline depth (docs/core-model.md).
Lane lane_of(const Core& core, const datapath::Datapath& lane);
/// Multiply-accumulates `core` completes per cycle with lanes `lane`: rows x cols x pack for a
/// systolic array, units x terms x pack for dot units.
double peak_macs_per_cycle(const Core& core, const Lane& lane);
/// Cycles, traffic and energy of `g` on `core` whose lanes run `lane`. Throws ShapeError for a
/// dimension below 1 and SpecError for a core the model cannot run (no DRAM bandwidth).
GemmCycles simulate_gemm(const Core& core, const datapath::Datapath& lane, const Gemm& g);

/// Softmax over `rows` x `cols` attention scores (each row normalised over its `cols`), run
/// `count` times, on a core's softmax unit.
struct SoftmaxCycles {
  std::string name;
  long long rows = 1, cols = 1, count = 1;
  long long cycles = 0;  ///< per instance: latency + ceil(rows x cols / elements per cycle)
  double seconds = 0;    ///< per instance
  double energy_pj = 0;  ///< per instance: rows x cols x the unit's pJ per element
};
/// Cycles of one softmax instance on `core`'s softmax unit. Throws SpecError if the core has none
/// (`[softmax]` absent) and ShapeError for a dimension below 1.
SoftmaxCycles simulate_softmax(const Core& core, std::string name, long long rows, long long cols,
                               long long count);

/// Totals over a list of GEMMs and softmax runs, each weighted by its count. The softmax unit runs
/// between QK^T and PV, which wait for it, so its cycles add to the GEMMs' (serialised).
struct GemmTotals {
  double macs = 0, total_cycles = 0, compute_cycles = 0, seconds = 0, dram_bytes = 0, energy_pj = 0;
  double softmax_cycles = 0;     ///< included in total_cycles and seconds
  double softmax_energy_pj = 0;  ///< included in energy_pj
  double l2_bytes = 0;           ///< bytes between the L2 and the scratchpads
  double latency_cycles = 0;     ///< dot units' pipeline latencies, included in total_cycles
  double utilization = 0;        ///< macs / (peak_macs_per_cycle x (total_cycles - latency_cycles))
};
/// Sums `runs` and `softmax` (each one's count included) on `core`.
GemmTotals totals(const Core& core, const Lane& lane, const std::vector<GemmCycles>& runs,
                  const std::vector<SoftmaxCycles>& softmax = {});

}  // namespace lpemu::core
