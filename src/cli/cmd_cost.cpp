// `lpemu cost` (roofline time and energy per token), `lpemu cost mac` (per-MAC breakdown and
// iso-area), `lpemu cost targets` (the hardware table with sources). Thin: parse, call, print.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "cli/cmd_cost_cluster.hpp"
#include "cli/commands.hpp"
#include "lpemu/cost/catalog.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/figures.hpp"
#include "lpemu/experiment/pricing.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::cli {
namespace {

std::string fixed(double v, int digits) { return io::format_number(v, io::NumberStyle::fixed, digits); }

std::string sig(double v) { return io::format_number(v, io::NumberStyle::significant, 6); }

// Ops summed over layers, largest time first.
struct Row {
  std::string name, kind, rate_class, operands, datapath;
  long long count = 0;
  double flops = 0, bytes = 0, time = 0, energy = 0;
  bool compute_bound = false;
};

std::vector<Row> rows_of(const cost::Workload& w) {
  std::vector<Row> rows;
  for (const auto& op : w.ops) {
    const double n = static_cast<double>(op.count);
    const std::string operands = op.kind == "memory" ? op.b_format : op.a_format + " x " + op.b_format;
    rows.push_back({op.name, op.kind, op.rate_class, operands, op.datapath, op.count, n * op.flops,
                    n * op.bytes, n * op.time_s, n * op.energy_j, op.compute_bound});
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.time > b.time; });
  return rows;
}

const char* phase_name(cost::Phase p) { return p == cost::Phase::prefill ? "prefill" : "decode"; }

void print_text(const cost::Workload& w, const cost::Roofline& r, int top) {
  std::cout << "\n"
            << phase_name(w.phase) << " (batch " << w.batch << ", context " << w.context
            << "): " << sig(w.tokens) << " tokens\n";
  std::cout << "  time " << fixed(r.time_s * 1e3, 3) << " ms, " << fixed(r.time_per_token() * 1e6, 3)
            << " us/token, " << fixed(r.tokens_per_s(), 1) << " tokens/s\n";
  std::cout << "  energy " << fixed(r.energy_per_token() * 1e3, 3)
            << " mJ/token (45 nm Horowitz constants: MACs + DRAM, not the target's node)\n";
  std::cout << "  compute-bound share of time " << fixed(100.0 * r.compute_bound_time_s / r.time_s, 1)
            << "%\n";
  for (const auto& note : w.notes) std::cout << "  note: " << note << "\n";
  std::printf("  %-12s %5s %5s %12s %12s %8s %8s %10s %6s  %s\n", "op", "count", "class", "GFLOP", "MB",
              "flop/B", "bound", "time ms", "share", "operands (A x B) on datapath");
  const auto rows = rows_of(w);
  for (std::size_t i = 0; i < rows.size() && static_cast<int>(i) < top; ++i) {
    const Row& x = rows[i];
    std::printf("  %-12s %5lld %5s %12.3f %12.3f %8.1f %8s %10.4f %5.1f%%  %s%s%s\n", x.name.c_str(), x.count,
                x.rate_class.empty() ? "-" : x.rate_class.c_str(), x.flops / 1e9, x.bytes / 1e6,
                x.bytes > 0 ? x.flops / x.bytes : 0.0,
                x.kind == "memory" ? "memory" : (x.compute_bound ? "compute" : "memory"), x.time * 1e3,
                100.0 * x.time / r.time_s, x.operands.c_str(), x.datapath.empty() ? "" : " on ",
                x.datapath.c_str());
  }
}

void print_device(const app::PriceResult& r, int top) {
  const cost::Target& t = r.target;
  const cost::ModelShape& m = r.model;
  const experiment::Pricing& p0 = r.phases.front();
  const cost::Workload& w0 = p0.workload;
  const bool fits = p0.roofline.fits_in_memory;
  std::cout << "target   " << t.name << " (" << t.display_name << "): " << sig(t.bandwidth_gb_s) << " GB/s, "
            << sig(t.capacity_gb) << " GB\n";
  std::cout << "model    " << m.name << " (" << fixed(static_cast<double>(m.parameters()) / 1e9, 3)
            << " G parameters)\n";
  std::cout << "plan     " << r.plan << " (" << r.plan_origin << "): " << sig(w0.bits_per_weight)
            << " bits per weight; MAC area " << fixed(p0.mac_area_rel_bf16, 3) << "x the target's bf16 MAC ("
            << p0.datapath << ")\n";
  std::cout << "computes " << p0.computed << "\n";
  if (!r.core.empty()) std::cout << "gemms    timed on core " << r.core << " (lpemu core)\n";
  std::cout << "memory   weights " << fixed(w0.weight_bytes / 1e9, 3) << " GB + KV cache "
            << fixed(w0.kv_cache_bytes / 1e9, 3) << " GB " << (fits ? "fit in " : "DO NOT FIT in ")
            << sig(t.capacity_gb) << " GB\n";
  for (const auto& p : r.phases) print_text(p.workload, p.roofline, top);
}

void run_cost(Context& ctx, const CostArgs& a) {
  const app::PriceResult r = app::price(ctx, a.req);
  for (const auto& svg : r.plots) std::cerr << "wrote " << svg.string() << "\n";
  if (a.json) {
    print_json(app::fields(r));
  } else if (r.cluster) {
    print_cost_cluster(r, a.req);
  } else {
    print_device(r, a.req.top);
  }
}

void print_mac_table(const cost::MacCost& m) {
  std::printf("%-14s %10s %10s %10s  %s\n", "component", "FA", "um^2@45nm", "fJ@45nm", "formula");
  for (const auto& p : m.parts) {
    std::printf("%-14s %10.3f %10.1f %10.1f  %s\n", p.name.c_str(), p.fa, p.fa * cost::kFaAreaUm2_45nm,
                p.fa * cost::kFaEnergyFj45nm, p.formula.c_str());
  }
  std::printf("%-14s %10.3f %10.1f %10.1f\n", "total", m.total_fa, m.area_um2_45nm(),
              m.energy_pj_45nm() * 1000);
}

void run_mac(Context& ctx, const CostArgs& a) {
  app::MacRequest req;
  req.format = a.format;
  req.format_b = a.format_b;
  req.datapath = a.req.setup.datapath;
  req.iso_target = a.iso_target;
  req.iso_class = a.iso_class;
  req.iso_format = a.iso_format;
  req.cost_dirs = a.req.cost_dirs;
  const app::MacResult r = app::price_mac(ctx, req);
  if (a.json) {
    print_json(app::fields(r));
    return;
  }
  const cost::MacDatapath& dp = r.datapath;
  const cost::MacCost& m = r.mac;
  std::cout << "MAC " << m.a_format << " x " << m.b_format << " on datapath " << dp.name
            << " (n = " << dp.fused_terms << ", W = " << dp.alignment_bits << ", accumulator "
            << dp.accumulator;
  if (dp.promote_every > 0) std::cout << ", promoted every " << dp.promote_every;
  std::cout << ")\n";
  std::cout << "datapath source: " << dp.source << (dp.unverified ? " [unverified]" : "") << "\n\n";
  print_mac_table(m);
  std::cout << "\nrelative to baselines on the same datapath (area = energy ratio in this model):\n";
  for (const auto& b : r.baselines) {
    std::cout << "  vs " << b.format << ": " << fixed(m.total_fa / b.mac.total_fa, 3) << "x area per MAC; "
              << b.fit_in_1024 << " MACs fit in the area of 1024 " << b.format << " MACs\n";
  }
  std::cout << "\nFA = full-adder equivalent; 45 nm figures use Horowitz ISSCC 2014 ("
            << cost::kFaAreaUm2_45nm << " um^2 and " << cost::kFaEnergyFj45nm << " fJ per FA).\n";
  if (r.iso) {
    const cost::IsoArea& iso = *r.iso;
    std::cout << "\niso-area on " << r.iso_target << ": its " << r.iso_class << " array ("
              << iso.budget_macs_per_clock_per_unit << " MACs/clock/" << r.iso_unit << ", priced as "
              << r.iso_format << ") holds " << iso.macs_per_clock_per_unit << " " << m.a_format
              << " MACs/clock/" << r.iso_unit << " -> " << fixed(iso.tflops, 1) << " dense TFLOP/s (vs "
              << fixed(r.iso_listed_tflops, 1) << " listed for " << r.iso_class << " in the target file"
              << ")\n";
  }
}

void run_targets(Context& ctx, const CostArgs& a) {
  const app::TargetsResult r = app::list_targets(ctx, app::TargetsRequest{a.req.cost_dirs});
  if (a.json) {
    print_json(app::fields(r));
    return;
  }
  for (const cost::Target& t : r.targets) {
    std::cout << t.name << ": " << t.display_name << " [" << t.kind << "]\n  memory " << sig(t.bandwidth_gb_s)
              << " GB/s, " << sig(t.capacity_gb) << " GB  (" << t.bandwidth_source << ")\n";
    if (t.units > 0) {
      std::cout << "  " << t.units << " " << t.unit_name << "s"
                << (t.clock_mhz > 0 ? " at " + sig(t.clock_mhz) + " MHz" : "")
                << (t.compute_unverified ? "  [unverified: " + t.compute_note + "]" : "") << "\n";
    }
    for (const auto& [cls, x] : t.rates) {
      const auto rebuilt = t.rebuilt_tflops(cls);
      std::cout << "  " << cls << ": " << sig(x.tflops) << " TFLOP/s dense"
                << (rebuilt ? " (rebuilt " + fixed(*rebuilt, 1) + ")" : "")
                << (x.unverified ? " [unverified]" : "") << " on " << t.datapath_for(cls) << "  -- "
                << (x.derived_from.empty() ? x.source : x.derived_from) << "\n";
    }
  }
}

}  // namespace

void register_cost(CLI::App& app, Context& ctx) {
  static CostArgs args;
  auto* cmd = app.add_subcommand(
      "cost", "roofline time and energy per token of a model on a hardware target under a precision plan");
  cmd->require_subcommand(0, 1);
  cmd->add_option("--cost-dir", args.req.cost_dirs,
                  "extra directory with hardware/ and shapes/ TOML files; repeatable")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--target", args.req.target, "hardware target name (data/hardware) or a .toml file");
  cmd->add_option("--model", args.req.model, "model shape name (data/shapes) or a .toml file");
  cmd->add_option("--plan", args.req.plan,
                  "precision plan: experiments/plans NAME, a plan .toml, fp32 or fp64")
      ->capture_default_str();
  cmd->add_option("--weights", args.req.setup.weights,
                  "override the plan's weight format (blocks and LM head)");
  cmd->add_option("--activations", args.req.setup.activations,
                  "override the plan's GEMM-input format (linear_input, lm_head_input, q, probs)");
  cmd->add_option("--kv-cache", args.req.setup.kv_cache, "override the plan's KV-cache format");
  cmd->add_option(
      "--datapath", args.req.setup.datapath,
      "run every GEMM on this datapath record (formats/datapath or a .toml); default: the plan's, else the "
      "target's datapath for each rate class");
  cmd->add_option("--batch", args.req.setup.batch, "sequences per step")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--context", args.req.setup.context,
                  "prompt length (prefill) / tokens in the KV cache (decode)")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--phase", args.req.setup.phase, "prefill | decode | both | train (train needs --system)")
      ->capture_default_str()
      ->check(CLI::IsMember({"prefill", "decode", "both", "train"}));
  cmd->add_option(
      "--core", args.req.core,
      "time each GEMM on this compute core (data/cores or a .toml; docs/core-model.md) instead of "
      "the roofline");
  cmd->add_option("--top", args.req.top, "ops to list per phase")->capture_default_str()->check(at_least(0));
  cmd->add_flag("--json", args.json, "print JSON instead of tables");
  cmd->add_option("--plot", args.req.plot_dir,
                  "also draw each phase's per-op time, bytes and energy to DIR/cost_<phase>.svg");
  add_cost_cluster_options(cmd, args);
  cmd->callback([&ctx, cmd] {
    if (!cmd->get_subcommands().empty()) return;
    ctx.apply_threads();
    run_cost(ctx, args);
  });

  auto* mac =
      cmd->add_subcommand("mac", "per-MAC area/energy breakdown of a format on a datapath, and iso-area");
  mac->add_option("--format", args.format,
                  "element or block format of the inputs (default: the datapath's own input formats)");
  mac->add_option("--format-b", args.format_b, "second input's format if it differs");
  mac->add_option("--datapath", args.req.setup.datapath,
                  "datapath record (formats/datapath; default generic_bf16)");
  mac->add_option("--iso-target", args.iso_target, "also spend this target's MAC array on --format MACs");
  mac->add_option("--iso-class", args.iso_class, "rate class whose array is the area budget")
      ->capture_default_str();
  mac->add_option("--iso-format", args.iso_format,
                  "format that prices the budget MACs (default: --iso-class)");
  mac->add_flag("--json", args.json, "print JSON instead of tables");
  mac->callback([&ctx] { run_mac(ctx, args); });

  auto* targets = cmd->add_subcommand("targets", "list hardware targets with their rates and sources");
  targets->add_flag("--json", args.json, "print JSON instead of the list");
  targets->callback([&ctx] { run_targets(ctx, args); });
}

}  // namespace lpemu::cli
