#include "lpemu/core/model.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "lpemu/error.hpp"

namespace lpemu::core {
namespace {

long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

// DRAM traffic of one loop order: bytes of A, B and C (C: final outputs plus spilled partial sums).
struct Order {
  double a = 0, b = 0, c = 0;
  double total() const { return a + b + c; }
};

}  // namespace

Lane lane_of(const Core& core, const datapath::Datapath& lane) {
  Lane l;
  l.a_bits = lane.a.bits;
  l.b_bits = lane.b.bits;
  if (lane.scale_application != datapath::ScaleApplication::none && lane.scale && lane.scale_block > 0) {
    l.a_scale_bits = static_cast<double>(lane.scale->bits) / lane.scale_block;
  }
  const int widest = std::max(l.a_bits, l.b_bits);
  // A lane takes port_bits of each operand per cycle: port_bits / (element bits) products, formed
  // side by side and summed by an adder tree before the accumulator.
  l.pack = core.port_bits == 0 ? 1 : std::max(1, core.port_bits / widest);
  for (const PackRule& p : core.pack) {
    if (p.bits == widest) l.pack = p.products;
  }
  // Pipeline: one stage (multiply-accumulate, the SCALE-Sim lane) for a single product; a packed
  // lane adds its adder tree (ceil(log2(pack)) levels), the alignment of the packed terms to their
  // largest exponent (one stage unless the sum is exact) and the block-scale step (one stage).
  // A dot unit sums terms x pack products through its tree the same way.
  const int summed = core.kind == ArrayKind::dot ? core.dot_terms * l.pack : l.pack;
  l.pipeline_depth = 1;
  if (summed > 1) {
    l.pipeline_depth += static_cast<int>(std::ceil(std::log2(static_cast<double>(summed))));
    if (lane.alignment != datapath::Alignment::exact) l.pipeline_depth += 1;
  }
  if (lane.scale_application != datapath::ScaleApplication::none) l.pipeline_depth += 1;
  l.c_bits = core.output_bits > 0 ? core.output_bits : lane.output().bits;
  return l;
}

double peak_macs_per_cycle(const Core& core, const Lane& lane) {
  const double per_lane = core.kind == ArrayKind::dot ? static_cast<double>(core.dot_units) * core.dot_terms
                                                      : static_cast<double>(core.rows) * core.cols;
  return per_lane * lane.pack;
}

namespace {

// One mapping of `g`: the array's folds, with the temporal extent T split into `splits` pieces
// (splits > 1 only for ws and is: each piece's partial sums stay in C's scratchpad).
GemmCycles run_mapping(const Core& core, const datapath::Datapath& lane_dp, const Lane& lane, const Gemm& g,
                       long long splits) {
  GemmCycles r;
  r.gemm = g;
  const long long R = core.rows, C = core.cols, M = g.m, N = g.n, K = g.k;
  const bool dot = core.kind == ArrayKind::dot;
  // K in the lane's steps: `pack` elements per lane (systolic), terms x pack per unit (dot).
  const long long keff = ceil_div(K, dot ? static_cast<long long>(core.dot_terms) * lane.pack : lane.pack);
  // SCALE-Sim v2 scalesim/compute/systolic_compute_{os,ws,is}.py, set_params(): the operand
  // matrices' spatial rows Sr, spatial columns Sc and temporal extent T per dataflow, the folds
  // ceil(Sr / rows) x ceil(Sc / cols), and the rows of each fold's demand matrix (its cycles).
  switch (core.dataflow) {
    case Dataflow::os:  // Sr = M (output pixels), Sc = N (filters), T = K (window)
      r.sr = M, r.sc = N, r.t = keff;
      r.cycles_per_fold = r.t + R + C - 2;  // T + (cols - 1) drain, skewed over rows - 1
      break;
    case Dataflow::ws:  // Sr = K, Sc = N, T = M
      r.sr = keff, r.sc = N, r.t = M;
      r.cycles_per_fold =
          2 * R + C + r.t - 2;  // rows to load weights, then T + cols - 1, skewed over rows - 1
      break;
    case Dataflow::is:  // Sr = K, Sc = M, T = N
      r.sr = keff, r.sc = M, r.t = N;
      r.cycles_per_fold = 2 * R + C + r.t - 2;
      break;
  }
  r.row_folds = ceil_div(r.sr, R);
  r.col_folds = ceil_div(r.sc, C);
  const long long folds = r.row_folds * r.col_folds;
  r.splits = splits;
  if (dot) {
    // Dot units: a fold is one R x C output tile; its R x C x keff dot steps (edge tiles padded, as
    // a tensor-core instruction's tile is issued whole) spread over the units, one step each per
    // cycle. Successive steps pipeline; only the last one's latency shows, once per GEMM.
    r.cycles_per_fold = ceil_div(R * C * keff, core.dot_units);
    r.latency_cycles = lane.pipeline_depth - 1;
    r.compute_cycles = folds * r.cycles_per_fold + r.latency_cycles;
  } else {
    r.cycles_per_fold += lane.pipeline_depth - 1;  // the lane's pipeline drains once per fold
    // Each piece of T pays the fold's fill and drain again: a fold is cycles_per_fold - T of fill,
    // weight load and drain, plus T streaming.
    r.compute_cycles = folds * (splits * (r.cycles_per_fold - r.t) + r.t);
  }
  r.macs = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  r.mapping_efficiency = static_cast<double>(r.sr) * static_cast<double>(r.sc) /
                         (static_cast<double>(r.row_folds * R) * static_cast<double>(r.col_folds * C));

  // Scratchpad accesses (elements), as SCALE-Sim counts the array's demands; partial sums read back
  // for accumulation are counted too.
  const double mk = static_cast<double>(M) * static_cast<double>(K);
  const double kn = static_cast<double>(K) * static_cast<double>(N);
  const double mn = static_cast<double>(M) * static_cast<double>(N);
  const auto rf = static_cast<double>(r.row_folds);
  const auto cf = static_cast<double>(r.col_folds);
  switch (core.dataflow) {
    case Dataflow::os: r.a.sram_reads = mk * cf, r.b.sram_reads = kn * rf, r.c.sram_writes = mn; break;
    case Dataflow::ws:  // the weights load into the array once per piece of M
      r.a.sram_reads = mk * cf, r.b.sram_reads = kn * static_cast<double>(splits), r.c.sram_writes = mn * rf,
      r.c.sram_reads = mn * (rf - 1);
      break;
    case Dataflow::is:
      r.a.sram_reads = mk * static_cast<double>(splits), r.b.sram_reads = kn * cf, r.c.sram_writes = mn * rf,
      r.c.sram_reads = mn * (rf - 1);
      break;
  }

  // Scratchpad ports: a streamed operand feeds `rows` lanes (columns for OS's B) with `pack`
  // elements each per cycle; a port slower than that stretches the fold.
  const auto port_factor = [&](const Scratchpad& s, int bits, long long lanes) {
    if (s.words_per_cycle == 0) return 1.0;
    const double per_word = std::max(1.0, std::floor(static_cast<double>(core.word_bits) / bits));
    const double supply = static_cast<double>(s.banks) * s.words_per_cycle * per_word;
    return std::max(1.0, static_cast<double>(lanes * lane.pack) / supply);
  };
  double factor = 1;
  if (dot) {
    // Dot units: a fold (one R x C output tile) reads its R x K slice of A and K x C slice of B
    // from the scratchpads once (the counts above, per fold) over its cycles_per_fold issue cycles;
    // a scratchpad delivering fewer elements per cycle stretches the fold by the ratio.
    const auto demand = [&](const Scratchpad& s, int bits, double reads) {
      if (s.words_per_cycle == 0) return 1.0;
      const double per_word = std::max(1.0, std::floor(static_cast<double>(core.word_bits) / bits));
      const double supply = static_cast<double>(s.banks) * s.words_per_cycle * per_word;
      const double per_cycle = reads / static_cast<double>(folds) / static_cast<double>(r.cycles_per_fold);
      return std::max(1.0, per_cycle / supply);
    };
    factor =
        std::max(demand(core.a, lane.a_bits, r.a.sram_reads), demand(core.b, lane.b_bits, r.b.sram_reads));
  } else {
    if (core.dataflow != Dataflow::is) factor = std::max(factor, port_factor(core.a, lane.a_bits, R));
    if (core.dataflow != Dataflow::ws) {
      factor = std::max(factor, port_factor(core.b, lane.b_bits, core.dataflow == Dataflow::os ? C : R));
    }
  }
  r.sram_stall_cycles = static_cast<long long>(
      std::ceil(static_cast<double>(r.compute_cycles - r.latency_cycles) * (factor - 1)));

  // DRAM traffic: the reuse model of docs/core-model.md. Each operand moves once unless its
  // scratchpad (half of it when double buffered) cannot hold what the loop order keeps for reuse;
  // of the two fold orders the one with less traffic is taken.
  const double a_bytes = (lane.a_bits + lane.a_scale_bits) / 8;
  const double b_bytes = (lane.b_bits + lane.a_scale_bits) / 8;
  const double c_bytes = lane.c_bits / 8.0;
  const double p_bytes = std::max(lane.c_bits, lane_dp.output().bits) / 8.0;  // partial sums
  const double share = core.double_buffered ? 0.5 : 1.0;
  const double cap_a = core.a.kib * 1024 * share, cap_b = core.b.kib * 1024 * share;
  const double cap_c = core.c.kib * 1024 * share;
  const double A = mk * a_bytes, B = kn * b_bytes, Cb = mn * c_bytes, P = mn * p_bytes;
  const auto kt = static_cast<double>(std::min(R * lane.pack, K));  // K per row fold (WS, IS)
  const double spill = 2 * P * (rf - 1);                            // partial sums out and back
  Order col_outer, row_outer;
  double first_a = 0, first_b = 0;
  switch (core.dataflow) {
    case Dataflow::os: {
      const double tile_a = static_cast<double>(std::min(R, M)) * static_cast<double>(K) * a_bytes;
      const double tile_b = static_cast<double>(K) * static_cast<double>(std::min(C, N)) * b_bytes;
      col_outer = {A <= cap_a ? A : A * cf, tile_b <= cap_b ? B : B * rf, Cb};
      row_outer = {tile_a <= cap_a ? A : A * cf, B <= cap_b ? B : B * rf, Cb};
      first_a = tile_a, first_b = tile_b;
      break;
    }
    case Dataflow::ws: {
      const double tile_p = static_cast<double>(M) * static_cast<double>(std::min(C, N)) * p_bytes;
      const double slice_a = static_cast<double>(M) * kt * a_bytes;
      col_outer = {A <= cap_a ? A : A * cf, B, Cb + (tile_p <= cap_c ? 0 : spill)};
      row_outer = {slice_a <= cap_a ? A : A * cf, B, Cb + (P <= cap_c ? 0 : spill)};
      first_a = slice_a, first_b = kt * static_cast<double>(std::min(C, N)) * b_bytes;
      break;
    }
    case Dataflow::is: {
      const double tile_p = static_cast<double>(N) * static_cast<double>(std::min(C, M)) * p_bytes;
      const double slice_b = static_cast<double>(N) * kt * b_bytes;
      col_outer = {A, B <= cap_b ? B : B * cf, Cb + (tile_p <= cap_c ? 0 : spill)};
      row_outer = {A, slice_b <= cap_b ? B : B * cf, Cb + (P <= cap_c ? 0 : spill)};
      first_a = kt * static_cast<double>(std::min(C, M)) * a_bytes, first_b = slice_b;
      break;
    }
  }
  // Split T (Tiling::search): column folds outside, then the pieces of T, then the folds along K;
  // a piece's partial sums stay in C's scratchpad, the streamed operand is re-read per column fold
  // unless it fits (as col_outer), the stationary one per piece unless one column fold's K x C of
  // it fits.
  if (splits > 1) {
    const auto piece = static_cast<double>(ceil_div(r.t, splits));
    const auto c_cols = static_cast<double>(std::min(C, r.sc));
    if (core.dataflow == Dataflow::ws) {
      const double tile_b = static_cast<double>(K) * c_cols * b_bytes;
      col_outer = {A <= cap_a ? A : A * cf, tile_b <= cap_b ? B : B * static_cast<double>(splits), Cb};
      first_a = piece * kt * a_bytes;
    } else {
      const double tile_a = static_cast<double>(K) * c_cols * a_bytes;
      col_outer = {tile_a <= cap_a ? A : A * static_cast<double>(splits), B <= cap_b ? B : B * cf, Cb};
      first_b = piece * kt * b_bytes;
    }
    row_outer = col_outer;
  }
  const bool row = row_outer.total() < col_outer.total();
  const Order& o = row ? row_outer : col_outer;
  r.loop_order = row ? "row_outer" : "col_outer";
  r.a.sram_writes = o.a / a_bytes, r.b.sram_writes = o.b / b_bytes;
  // An L2 between the scratchpads and DRAM: every fill and output passes through it (l2_bytes);
  // an operand the order re-reads comes from DRAM once when it fits the L2, taken greedily, the
  // larger saving first. Partial sums and outputs go on to DRAM.
  Order mem = o;
  if (core.l2.kib > 0) {
    r.l2_bytes = o.total();
    double room = core.l2.kib * 1024;
    const auto keep = [&room](double& moved, double once) {
      if (moved > once && once <= room) moved = once, room -= once;
    };
    if (o.a - A >= o.b - B) {
      keep(mem.a, A), keep(mem.b, B);
    } else {
      keep(mem.b, B), keep(mem.a, A);
    }
  }
  r.a.dram_bytes = mem.a, r.b.dram_bytes = mem.b, r.c.dram_bytes = mem.c;
  r.dram_bytes = mem.total();

  // Stalls: with double buffering the next fold's operands load while this one computes, so a run
  // takes the longer of compute and DRAM time; without it they add up. The first fill is either
  // resident before cycle 0 (hidden: each operand's first buffer-full) or loaded first (exposed:
  // the first fold's operands, after the DRAM latency).
  const double bw = core.dram_bytes_per_cycle;
  double prologue = 0;
  if (core.first_fill == FirstFill::hidden) {
    r.preloaded_bytes = std::min(o.a, cap_a) + std::min(o.b, cap_b);
  } else {
    r.preloaded_bytes = std::min({first_a, o.a, cap_a}) + std::min({first_b, o.b, cap_b});
    prologue = core.dram_latency_cycles + r.preloaded_bytes / bw;
  }
  double dram_run = std::max(0.0, r.dram_bytes - r.preloaded_bytes) / bw;
  if (core.l2.kib > 0) {
    dram_run = std::max(dram_run, std::max(0.0, r.l2_bytes - r.preloaded_bytes) / core.l2.bytes_per_cycle);
  }
  const auto busy = static_cast<double>(r.compute_cycles + r.sram_stall_cycles);
  const double run = core.double_buffered ? std::max(busy, dram_run) : busy + dram_run;
  r.total_cycles = static_cast<long long>(std::ceil(prologue + run));
  r.dram_stall_cycles = r.total_cycles - r.compute_cycles - r.sram_stall_cycles;
  r.compute_bound = busy >= dram_run;
  r.seconds = static_cast<double>(r.total_cycles) / (core.clock_ghz * 1e9);
  r.utilization =
      r.macs / (peak_macs_per_cycle(core, lane) * static_cast<double>(r.total_cycles - r.latency_cycles));

  // Energy per access class.
  const double sram_read_bytes =
      r.a.sram_reads * a_bytes + r.b.sram_reads * b_bytes + r.c.sram_reads * p_bytes + o.c;
  const double sram_write_bytes = o.a + o.b + r.c.sram_writes * p_bytes;
  r.mac_energy_pj = r.macs * core.mac_pj;
  r.sram_energy_pj =
      sram_read_bytes * core.sram_read_pj_per_byte + sram_write_bytes * core.sram_write_pj_per_byte;
  r.l2_energy_pj = r.l2_bytes * core.l2.pj_per_byte;
  r.dram_energy_pj = r.dram_bytes * core.dram_pj_per_byte;
  r.energy_pj = r.mac_energy_pj + r.sram_energy_pj + r.l2_energy_pj + r.dram_energy_pj;
  return r;
}

}  // namespace

GemmCycles simulate_gemm(const Core& core, const datapath::Datapath& lane_dp, const Gemm& g) {
  if (g.m < 1 || g.n < 1 || g.k < 1 || g.count < 1) {
    throw ShapeError("core gemm '" + g.name + "': m = " + std::to_string(g.m) +
                     ", n = " + std::to_string(g.n) + ", k = " + std::to_string(g.k) + ", count = " +
                     std::to_string(g.count) + ": expected every dimension and the count >= 1");
  }
  if (!(core.dram_bytes_per_cycle > 0)) {
    throw SpecError("core '" + core.name + "': dram.bytes_per_cycle: expected a bandwidth > 0");
  }
  const Lane lane = lane_of(core, lane_dp);
  GemmCycles best = run_mapping(core, lane_dp, lane, g, 1);
  if (core.tiling == Tiling::folds || core.dataflow == Dataflow::os || best.row_folds < 2) return best;
  // Tiling search: the fewest pieces of T whose partial-sum tile (T / pieces x cols, in the
  // partial-sum width) fits the working part of C's scratchpad, taken if it finishes sooner.
  const double p_bytes = std::max(lane.c_bits, lane_dp.output().bits) / 8.0;
  const double cap_c = core.c.kib * 1024 * (core.double_buffered ? 0.5 : 1.0);
  const double row_bytes = static_cast<double>(std::min<long long>(core.cols, best.sc)) * p_bytes;
  const auto fit = static_cast<long long>(std::floor(cap_c / row_bytes));  // rows of T that fit
  if (fit < 1 || fit >= best.t) return best;
  const GemmCycles split = run_mapping(core, lane_dp, lane, g, ceil_div(best.t, fit));
  return split.total_cycles < best.total_cycles ? split : best;
}

SoftmaxCycles simulate_softmax(const Core& core, std::string name, long long rows, long long cols,
                               long long count) {
  if (!(core.softmax.elements_per_cycle > 0)) {
    throw SpecError("core '" + core.name + "': softmax: the core has no [softmax] unit (elements_per_cycle)");
  }
  if (rows < 1 || cols < 1 || count < 1) {
    throw ShapeError("core softmax '" + name + "': rows = " + std::to_string(rows) + ", cols = " +
                     std::to_string(cols) + ", count = " + std::to_string(count) + ": expected each >= 1");
  }
  SoftmaxCycles s;
  s.name = std::move(name);
  s.rows = rows, s.cols = cols, s.count = count;
  const double elements = static_cast<double>(rows) * static_cast<double>(cols);
  s.cycles = core.softmax.latency_cycles +
             static_cast<long long>(std::ceil(elements / core.softmax.elements_per_cycle));
  s.seconds = static_cast<double>(s.cycles) / (core.clock_ghz * 1e9);
  s.energy_pj = elements * core.softmax.pj_per_element;
  return s;
}

GemmTotals totals(const Core& core, const Lane& lane, const std::vector<GemmCycles>& runs,
                  const std::vector<SoftmaxCycles>& softmax) {
  GemmTotals t;
  for (const SoftmaxCycles& s : softmax) {
    const auto n = static_cast<double>(s.count);
    t.softmax_cycles += static_cast<double>(s.cycles) * n;
    t.total_cycles += static_cast<double>(s.cycles) * n;
    t.seconds += s.seconds * n;
    t.softmax_energy_pj += s.energy_pj * n;
    t.energy_pj += s.energy_pj * n;
  }
  for (const GemmCycles& r : runs) {
    const auto n = static_cast<double>(r.gemm.count);
    t.macs += r.macs * n;
    t.total_cycles += static_cast<double>(r.total_cycles) * n;
    t.compute_cycles += static_cast<double>(r.compute_cycles) * n;
    t.seconds += r.seconds * n;
    t.dram_bytes += r.dram_bytes * n;
    t.energy_pj += r.energy_pj * n;
    t.l2_bytes += r.l2_bytes * n;
    t.latency_cycles += static_cast<double>(r.latency_cycles) * n;
  }
  const double busy = t.total_cycles - t.latency_cycles;
  t.utilization = busy > 0 ? t.macs / (peak_macs_per_cycle(core, lane) * busy) : 0;
  return t;
}

}  // namespace lpemu::core
