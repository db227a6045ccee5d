// Accuracy and cost part of a proposal: an experiment over fp32, bf16, mxfp8_e4m3 and
// the proposed formats, run by the sweep machinery into DIR/accuracy, summarised in summary.md.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "experiment/proposal_detail.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/sweep.hpp"

namespace lpemu::experiment::detail {
namespace {

namespace fs = std::filesystem;

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// One [[plan]] of the experiment: `format` on the linear layers' weights and inputs (overflow
// saturating), the blocks' GEMMs on `gemm` if given; "" = the fp32 reference. The plan's own
// fields are written by engine::to_toml.
std::string plan_toml(const std::string& label, const std::string& format, const std::string& gemm) {
  engine::PrecisionPlan plan;
  plan.name = label;
  if (!format.empty()) {
    format::ConvertOptions o;
    o.overflow = format::Overflow::saturate;
    plan = engine::with_role_format(std::move(plan), engine::Role::weights, format, o);
    plan = engine::with_role_format(std::move(plan), engine::Role::linear_input, format, o);
    // The datapath runs the blocks' linear layers (the classifier stays float, as in the other plans).
    if (!gemm.empty()) plan = engine::with_block_gemm(std::move(plan), gemm);
  }
  return "\n[[plan]]\nlabel = " + quoted(label) + "\n" + engine::to_toml(plan, "plan.");
}

std::string num(double v, const char* fmt = "%.4g") {
  if (std::isnan(v)) return "–";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string ratio(double a, double b) {
  if (!(std::isfinite(a) && std::isfinite(b)) || b == 0) return "–";
  return num(a / b, "%.3g") + "×";
}

}  // namespace

std::vector<fs::path> write_accuracy(const fs::path& dir, const ProposalRequest& req) {
  const AccuracyRequest& acc = *req.accuracy;
  if (acc.tools == nullptr) throw Error("proposal: the accuracy summary needs the plan tools (internal)");
  if (acc.formats.empty()) throw Error("proposal: no proposed format to evaluate");
  const fs::path out = fs::absolute(dir / "accuracy");
  std::ostringstream t;
  t << "# Written by `lpemu proposal`: the proposed formats against fp32, bf16 and mxfp8_e4m3 on the\n"
       "# linear layers' weights and inputs. Re-run with `lpemu sweep "
    << (out / "experiment.toml").string() << "`.\n";
  t << "name = \"proposal\"\ndescription = " << quoted("format proposal " + acc.formats.front()) << "\n";
  t << "[source]\nmodel = " << quoted(acc.model) << "\ntext = " << quoted(fs::absolute(acc.text).string())
    << "\n";
  if (acc.max_tokens > 0) t << "max_tokens = " << acc.max_tokens << "\n";
  t << "[output]\ndir = " << quoted(out.string()) << "\n[options]\nreference = \"fp32\"\n";
  if (!acc.cost.target.empty()) {
    t << "[cost]\ntarget = " << quoted(acc.cost.target) << "\n";
    if (!acc.cost.shape.empty()) t << "shape = " << quoted(acc.cost.shape) << "\n";
    if (!acc.cost.core.empty()) t << "core = " << quoted(acc.cost.core) << "\n";
    t << "phase = " << quoted(acc.cost.cluster.phase) << "\nbatch = " << acc.cost.cluster.batch
      << "\ncontext = " << acc.cost.cluster.context << "\n";
  }
  t << plan_toml("fp32", "", "") << plan_toml("bf16", "bf16", "")
    << plan_toml("mxfp8_e4m3", "mxfp8_e4m3", "");
  for (const auto& f : acc.formats) t << plan_toml(f, f, "");
  if (!acc.gemm.empty()) {
    for (const auto& f : acc.formats) t << plan_toml(f + "+" + acc.gemm, f, acc.gemm);
  }
  fs::create_directories(out);
  const Experiment exp = parse_experiment_toml(t.str(), out / "experiment.toml");
  SweepOptions opt;
  opt.out = out;
  opt.force = true;
  if (acc.on_progress) {
    opt.on_progress = [&](const Progress& p) {
      acc.on_progress("  [" + std::to_string(p.done) + "/" + std::to_string(p.total) + "] " + p.label);
    };
  }
  const SweepFiles files = run_sweep(exp, *acc.tools, opt);
  write_text(out / "experiment.toml", t.str());  // after the sweep, which refuses folders it did not start

  const std::vector<PlanResult>& results = files.plans;
  if (results.size() != exp.plans.size())
    throw Error("proposal: the accuracy sweep did not finish every plan");
  const auto by_label = [&](const std::string& l) -> const PlanResult& {
    for (const auto& r : results) {
      if (r.label == l) return r;
    }
    throw Error("proposal: plan '" + l + "' missing from the sweep");
  };
  std::ostringstream s;
  const PlanResult& ref = by_label("fp32");
  s << "# Accuracy and cost: " << acc.formats.front() << " on " << acc.model << "\n\n";
  s << "Linear layers' weights and inputs in each format (overflow saturating), every other tensor fp32; "
    << ref.eval.tokens.size() << " tokens of `" << acc.text.filename().string()
    << "` scored against the fp32 "
    << "reference (perplexity " << num(ref.eval.perplexity) << ").";
  if (!acc.cost.target.empty()) {
    s << " Cost: " << acc.cost.target << ", " << (acc.cost.shape.empty() ? acc.model : acc.cost.shape) << " "
      << acc.cost.cluster.phase << " at batch " << acc.cost.cluster.batch << ", context "
      << acc.cost.cluster.context
      << " (lpemu cost model: roofline time and energy per token, MAC area relative to a bf16 MAC).";
    if (!acc.cost.core.empty()) {
      s << " GEMMs timed on the core `" << acc.cost.core
        << "` (lpemu core model: the step's GEMM cycles, utilisation and energy on it).";
    }
  }
  if (!acc.gemm.empty()) {
    s << " Plans `+" << acc.gemm
      << "` run the blocks' linear layers on that datapath, bit-exact; operands enter it "
      << "with their scales moved out in powers of two (per row, or per block for block-scaled datapaths), "
         "so "
      << "formats with non-power-of-two scales (per-tensor FP32) are re-rounded once on the way in.";
  }
  const bool on_core = !acc.cost.target.empty() && !acc.cost.core.empty();
  s << "\n\n| plan | bits/weight | mean KL vs fp32 | Δ NLL (nats/token) | perplexity | top-1 agreement | "
       "tokens/s | "
       "J/token | MAC area vs bf16 |"
    << (on_core ? " core cycles | core util | core energy J |" : "")
    << "\n|---|---|---|---|---|---|---|---|---|" << (on_core ? "---|---|---|" : "") << "\n";
  for (const auto& r : results) {
    s << "| " << r.label << " | " << num(r.weight_bits, "%.3g") << " | " << num(r.eval.mean_kl) << " | "
      << num(r.eval.mean_nll - r.eval.ref_mean_nll, "%+.4g") << " | " << num(r.eval.perplexity) << " | "
      << num(100 * r.eval.top1_agreement, "%.1f%%") << " | " << num(r.cost.tokens_per_s, "%.0f") << " | "
      << num(r.cost.joules_per_token, "%.3g") << " | " << num(r.cost.mac_area_rel_bf16, "%.3g") << " |";
    if (on_core) {
      s << " " << num(r.cost.core_cycles, "%.6g") << " | " << num(100 * r.cost.core_utilization, "%.1f%%")
        << " | " << num(r.cost.core_energy_j, "%.3g") << " |";
    }
    s << "\n";
  }
  s << "\n## Against the baselines\n\n| proposal | vs | KL ratio | bits/weight ratio | tokens/s ratio | "
       "J/token ratio | "
       "MAC area ratio |\n|---|---|---|---|---|---|---|\n";
  for (std::size_t i = 3; i < results.size(); ++i) {
    const PlanResult& p = results[i];
    for (const char* base : {"bf16", "mxfp8_e4m3"}) {
      const PlanResult& b = by_label(base);
      s << "| " << p.label << " | " << base << " | " << ratio(p.eval.mean_kl, b.eval.mean_kl) << " | "
        << ratio(p.weight_bits, b.weight_bits) << " | " << ratio(p.cost.tokens_per_s, b.cost.tokens_per_s)
        << " | " << ratio(p.cost.joules_per_token, b.cost.joules_per_token) << " | "
        << ratio(p.cost.mac_area_rel_bf16, b.cost.mac_area_rel_bf16) << " |\n";
    }
  }
  for (const auto& r : results) {
    if (!r.cost.note.empty()) s << "\nCost of " << r.label << " not priced: " << r.cost.note << "\n";
  }
  s << "\nThe sweep behind these numbers (per-layer error, replay, plots) is in `accuracy/` (`report.md`, "
       "`results.csv`, `results.h5`); `accuracy/experiment.toml` re-runs it.\n";
  write_text(dir / "summary.md", s.str());

  std::vector<fs::path> written{dir / "summary.md", out / "experiment.toml", files.results_csv,
                                files.results_h5, files.report_md};
  written.insert(written.end(), files.plots.begin(), files.plots.end());
  written.insert(written.end(), files.plan_files.begin(), files.plan_files.end());
  return written;
}

}  // namespace lpemu::experiment::detail
