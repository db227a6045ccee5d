// `lpemu cost --system/--devices/--parallel/--search/--phase train`: training steps, parallel
// searches and inference at scale. Thin: parse, call lpemu::cost, print.
#include "cli/cmd_cost_cluster.hpp"

#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "lpemu/cost/catalog.hpp"
#include "lpemu/cost/parallel.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::cli {
namespace {

std::string fixed_num(double v, int digits) { return io::format_number(v, io::NumberStyle::fixed, digits); }

std::string pct(double part, double whole) { return fixed_num(100.0 * part / whole, 1) + "%"; }

void print_train(const cost::TrainResult& r, const cost::Target& t) {
  const auto& s = r.time;
  const auto& m = r.memory;
  std::cout << "parallel " << r.config.par.str() << "; micro-batch " << r.config.micro_batch << ", "
            << r.microbatches << " micro-batches per pipeline; recompute "
            << cost::recompute_name(r.config.recompute) << "\n";
  std::cout << "step     " << fixed_num(s.step_s, 3) << " s, " << fixed_num(r.tokens_per_s, 0)
            << " tokens/s, " << fixed_num(r.tflops_per_device, 1) << " model TFLOP/s per device, MFU "
            << fixed_num(100 * r.mfu, 1) << "% of " << r.rate_class << " peak ("
            << fixed_num(t.peak_ops(r.rate_class) / 1e12, 1) << " TFLOP/s)\n";
  std::cout << "time     compute " << fixed_num(s.compute_s, 3) << " s (" << pct(s.compute_s, s.step_s)
            << "), memory-bound " << fixed_num(s.memory_s, 3) << " (" << pct(s.memory_s, s.step_s)
            << "), TP comm " << fixed_num(s.tp_s, 3) << " (" << pct(s.tp_s, s.step_s) << "), CP comm "
            << fixed_num(s.cp_s, 3) << " (" << pct(s.cp_s, s.step_s) << "), EP all-to-all "
            << fixed_num(s.ep_s, 3) << " (" << pct(s.ep_s, s.step_s) << "), PP comm " << fixed_num(s.pp_s, 3)
            << " (" << pct(s.pp_s, s.step_s) << "), DP comm " << fixed_num(s.dp_s, 3) << " ("
            << pct(s.dp_s, s.step_s) << "), bubble " << fixed_num(s.bubble_s, 3) << " ("
            << pct(s.bubble_s, s.step_s) << "), optimizer " << fixed_num(s.optimizer_s, 3) << " ("
            << pct(s.optimizer_s, s.step_s) << "); recomputation " << fixed_num(s.recompute_s, 3)
            << " of the compute and memory-bound time\n";
  std::cout << "memory   per device: weights " << fixed_num(m.weights / 1e9, 1) << " GB, gradients "
            << fixed_num(m.gradients / 1e9, 1) << ", optimizer " << fixed_num(m.optimizer / 1e9, 1)
            << ", activations " << fixed_num(m.activations / 1e9, 1) << ", framework reserve "
            << fixed_num(m.reserve / 1e9, 1) << " = " << fixed_num(m.total / 1e9, 1) << " of "
            << fixed_num(m.capacity / 1e9, 0) << " GB" << (m.fits ? " (fits)" : " -- DOES NOT FIT: " + m.why)
            << "\n";
  for (const auto& w : r.warnings) std::cout << "warning  " << w << "\n";
}

}  // namespace

void add_cost_cluster_options(CLI::App* cmd, CostArgs& a) {
  experiment::ClusterSetup& s = a.req.setup;
  std::vector<std::string> recompute;
  for (const auto r : {cost::Recompute::none, cost::Recompute::selective, cost::Recompute::full})
    recompute.emplace_back(cost::recompute_name(r));
  cmd->add_option(
      "--system", s.system,
      "system (data/systems: dgx_a100, dgx_h100, gb200_nvl72, tpu_v5p_pod) or a .toml file; its device "
      "is the target unless --target is given");
  cmd->add_option("--devices", s.devices, "devices in the job (training: dp = devices / (tp pp cp))")
      ->check(at_least(1));
  cmd->add_option("--parallel", s.parallel, "parallel degrees, e.g. tp=8,pp=4,dp=32,cp=1,vpp=1,sp=1,zero=1");
  cmd->add_flag("--search", s.search, "search parallel configurations on --devices and list the best --top");
  cmd->add_option("--step-time", s.step_time,
                  "with --search and no --devices: the fewest devices (scale-up size x 2^k) meeting this "
                  "step time (s)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--global-batch", s.global_batch, "training: sequences per step")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--micro-batch", s.micro_batch, "training: sequences per micro-batch")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--recompute", s.recompute, "training: activation recomputation")
      ->capture_default_str()
      ->check(CLI::IsMember(recompute));
  cmd->add_option("--gradients", s.gradients, "training: gradient format")->capture_default_str();
  cmd->add_option("--optimizer-states", s.optimizer_states, "training: Adam state format")
      ->capture_default_str();
  cmd->add_option("--master-weights", s.master_weights, "training: master-weight format")
      ->capture_default_str();
  cmd->add_option("--comm", s.comm,
                  "training: format on the wire for gradients and activations (default: "
                  "gradients bf16, activations in the activation format)");
  cmd->add_option("--grad-comm", s.grad_comm, "training: gradients on the wire (overrides --comm)");
  cmd->add_option("--act-comm", s.act_comm, "training: activations on the wire (overrides --comm)");
  cmd->add_option_function<std::string>(
         "--attention", [&s](const std::string& v) { s.flash_attention = v == "fused"; },
         "training: fused (default; FlashAttention, no s x s scores in DRAM) or unfused attention")
      ->check(CLI::IsMember({"fused", "unfused"}));
  cmd->add_option_function<std::string>(
         "--dp-overlap", [&s](const std::string& v) { s.overlap_dp = v == "on"; },
         "training: on (default) overlaps the data-parallel gradient reduction with the last backward; off "
         "runs it after")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--batches", s.batches, "inference: batch sizes to tabulate (default: --batch)")
      ->delimiter(',')
      ->check(at_least(1));
}

void print_cost_cluster(const app::PriceResult& res, const app::PriceRequest& req) {
  const experiment::ClusterSetup& setup = req.setup;
  const experiment::ClusterReport& c = *res.cluster;
  const cost::System& sys = c.system;
  const cost::Target& t = c.target;
  const cost::ModelShape& m = res.model;
  const cost::PlanFormats& pf = c.formats.formats;
  std::cout << "system   " << sys.name << " (" << sys.display_name << "): device " << t.name << ", scale-up "
            << sys.scale_up_kind << " of " << sys.scale_up_size << " at " << sys.scale_up.bandwidth_gb_s
            << " GB/s" << (sys.scale_up_kind == "torus" ? " per link" : " per device") << ", scale-out "
            << sys.scale_out.bandwidth_gb_s << " GB/s per device\n";
  std::cout << "model    " << m.name << " (" << fixed_num(static_cast<double>(m.parameters()) / 1e9, 2)
            << " G parameters)\n";
  for (const auto& note : c.formats.notes) std::cout << "note     " << note << "\n";
  if (!c.train.empty()) {
    const cost::TrainFormats& f = c.train_formats;
    std::cout << "formats  weights " << f.weights.name << ", activations " << f.activations.name
              << ", gradients " << f.gradients.name << ", optimizer states " << f.optimizer_states.name
              << ", master weights " << f.master_weights.name << "; on the wire: gradients "
              << f.grad_comm.name << ", activations " << f.act_comm.name << "\n";
    std::cout << "job      " << setup.global_batch << " sequences of " << setup.context
              << " tokens per step\n\n";
    if (!setup.search) {
      print_train(c.train.front(), t);
      return;
    }
    if (c.fewest_devices > 0) {
      std::cout << "fewest devices meeting a step of " << fixed_num(setup.step_time, 3)
                << " s: " << c.fewest_devices << "\n";
    }
    std::printf("%4s %-34s %3s %-9s %8s %10s %6s %7s %6s %6s %6s %6s %6s %6s %6s %7s\n", "rank", "parallel",
                "mb", "recompute", "step s", "tokens/s", "MFU", "compute", "memory", "TP", "EP", "PP", "DP",
                "bubble", "opt", "mem GB");
    for (std::size_t i = 0; i < c.train.size() && static_cast<int>(i) < req.top; ++i) {
      const auto& r = c.train[i];
      const auto& s = r.time;
      std::printf(
          "%4zu %-34s %3lld %-9s %8.3f %10.0f %5.1f%% %6.1f%% %5.1f%% %5.1f%% %5.1f%% %5.1f%% %5.1f%% "
          "%5.1f%% %5.1f%% %6.1f%s\n",
          i + 1, r.config.par.str().c_str(), r.config.micro_batch, cost::recompute_name(r.config.recompute),
          s.step_s, r.tokens_per_s, 100 * r.mfu, 100 * s.compute_s / s.step_s, 100 * s.memory_s / s.step_s,
          100 * s.tp_s / s.step_s, 100 * s.ep_s / s.step_s, 100 * s.pp_s / s.step_s, 100 * s.dp_s / s.step_s,
          100 * s.bubble_s / s.step_s, 100 * s.optimizer_s / s.step_s, r.memory.total / 1e9,
          r.memory.fits ? "" : " (does not fit)");
    }
    std::cout << "(" << c.train.size() << " consistent configurations; percentages are shares of the step)\n";
    return;
  }
  const cost::Parallel& par = c.parallel;
  std::cout << "plan     weights " << pf.weights.name << ", activations " << pf.activations.name << ", kv "
            << pf.kv_cache.name << "; parallel tp=" << par.tp << ",pp=" << par.pp << "\n";
  std::cout << "KV cache at context " << setup.context
            << ": largest batch that fits per device = " << c.max_batch << "\n";
  int shown = -1;
  for (const auto& r : c.inference) {
    if (static_cast<int>(r.phase) != shown) {
      shown = static_cast<int>(r.phase);
      std::printf("\n%s, context %lld\n%7s %10s %12s %14s %8s %8s %8s %8s %9s\n",
                  r.phase == cost::Phase::prefill ? "prefill" : "decode", setup.context, "batch", "step ms",
                  "tokens/s", "tokens/s/dev", "compute", "memory", "TP", "launch", "GB/dev");
    }
    std::printf("%7lld %10.3f %12.1f %14.1f %7.1f%% %7.1f%% %7.1f%% %7.1f%% %9.1f%s\n", r.batch,
                r.step_s * 1e3, r.tokens_per_s, r.tokens_per_s / static_cast<double>(par.devices()),
                100 * r.compute_s / r.step_s, 100 * r.memory_s / r.step_s, 100 * r.tp_s / r.step_s,
                100 * r.launch_s / r.step_s, (r.weight_bytes + r.kv_bytes) / 1e9,
                r.fits ? "" : "  does not fit");
  }
  if (!c.inference.empty()) {
    for (const auto& w : c.inference.back().warnings) std::cout << "warning  " << w << "\n";
  }
}

}  // namespace lpemu::cli
