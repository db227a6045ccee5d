// `lpemu core`: parses into app::CoreRequest, runs app::simulate_core (GEMM cycles on a configured
// compute core), prints a table or the result's fields.
#include <cstdio>
#include <string>

#include "cli/commands.hpp"
#include "lpemu/app/core.hpp"

namespace lpemu::cli {
namespace {

void print_table(const app::CoreResult& r) {
  if (r.core.kind == core::ArrayKind::dot) {
    std::printf("core %s: %d dot units of %d terms, %dx%d output tiles at %.3g GHz", r.core.name.c_str(),
                r.core.dot_units, r.core.dot_terms, r.core.rows, r.core.cols, r.core.clock_ghz);
  } else {
    std::printf("core %s: %dx%d %s at %.3g GHz", r.core.name.c_str(), r.core.rows, r.core.cols,
                std::string(core::to_string(r.core.dataflow)).c_str(), r.core.clock_ghz);
  }
  std::printf(", lane %s (%d products/cycle, pipeline %d)\n", r.datapath.c_str(), r.lane.pack,
              r.lane.pipeline_depth);
  std::printf("%-11s %7s %7s %7s %6s %12s %12s %7s %6s %10s\n", "gemm", "m", "n", "k", "count", "compute_cyc",
              "total_cyc", "util%", "bound", "dram_MB");
  for (const core::GemmCycles& g : r.gemms) {
    std::printf("%-11s %7lld %7lld %7lld %6lld %12lld %12lld %7.2f %6s %10.3f\n", g.gemm.name.c_str(),
                g.gemm.m, g.gemm.n, g.gemm.k, g.gemm.count, g.compute_cycles, g.total_cycles,
                100 * g.utilization, g.compute_bound ? "comp" : "dram", g.dram_bytes / 1e6);
  }
  for (const core::SoftmaxCycles& s : r.softmax) {
    std::printf("%-11s %7lld %7lld %7s %6lld %12lld %12lld\n", s.name.c_str(), s.rows, s.cols, "-", s.count,
                s.cycles, s.cycles);
  }
  const core::GemmTotals& t = r.totals;
  std::printf("total: %.6g cycles (%.4g us), utilization %.2f%%, DRAM %.4g MB, energy %.4g uJ\n",
              t.total_cycles, t.seconds * 1e6, 100 * t.utilization, t.dram_bytes / 1e6, t.energy_pj / 1e6);
}

}  // namespace

void register_core(CLI::App& app, Context& ctx) {
  static RequestArgs<app::CoreRequest> args;
  app::CoreRequest& q = args.req;
  auto* sub = app.add_subcommand(
      "core",
      "cycles, stalls, traffic and energy of GEMMs on a configured compute core (docs/core-model.md)");
  sub->add_option("--core", q.core, "core name (data/cores, DIR/cores) or a .toml file")->required();
  sub->add_option("--datapath", q.datapath, "the lane's datapath record (default: the core's lane)");
  sub->add_option("--dataflow", q.dataflow, "os, ws or is (default: the core's)");
  sub->add_option("--rows", q.rows, "rows of the array (default: the core's)");
  sub->add_option("--cols", q.cols, "columns of the array (default: the core's)");
  sub->add_option("--sram-scale", q.sram_scale, "multiply every scratchpad's capacity (0.5: halved)");
  sub->add_option("--m", q.m, "one GEMM C[m,n] = A[m,k] . B[k,n]: rows of A and C");
  sub->add_option("--n", q.n, "columns of B and C");
  sub->add_option("--k", q.k, "the reduction dimension");
  sub->add_option("--model", q.model, "a model shape (data/shapes): simulate its GEMMs instead");
  sub->add_option("--scope", q.scope, "with --model: layer (one block) or step (all blocks and the LM head)");
  sub->add_option("--phase", q.phase, "with --model: prefill or decode");
  sub->add_option("--batch", q.batch, "with --model: sequences");
  sub->add_option("--context", q.context, "with --model: tokens per sequence (prompt or cache)");
  sub->add_option("--causal-block", q.causal_block,
                  "with --model, prefill: query positions per causal attention block (0: the full square)")
      ->capture_default_str();
  json_or_text(
      sub, args, "a table", [&ctx](const app::CoreRequest& r) { return app::simulate_core(ctx, r); },
      print_table);
}

}  // namespace lpemu::cli
