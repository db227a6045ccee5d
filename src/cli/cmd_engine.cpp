// `lpemu run`, `lpemu eval`, `lpemu replay`: a model under a precision plan (issue 5).
//
// --model takes a path to an .h5 file or a shipped model name NAME, found as
// data/models/NAME/model.h5 under: the executable's directory and its two parents (so the
// build tree's ../../data works), the source tree lpemu was built from, $LPEMU_DATA_DIR, then the
// working directory. --plan takes a .toml path, a built-in (fp32, fp64) or a NAME found as
// experiments/plans/NAME.toml under the same directories.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.hpp"
#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/session.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/metrics/model_eval.hpp"

namespace lpemu::cli {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> search_dirs() { return data_search_dirs(); }

struct ModelFlags {
  std::string model = "stories260K";
  std::string plan = "fp32";

  void add_to(CLI::App* sub) {
    sub->add_option("--model", model, "model .h5 file or shipped model name (data/models/NAME/model.h5)")
        ->capture_default_str();
    sub->add_option("--plan", plan, "precision plan: .toml file, fp32, fp64, or experiments/plans/NAME.toml")
        ->capture_default_str();
  }
};

struct Loaded {
  engine::Model model;
  engine::QuantizerFactory quantizers;
  engine::GemmFactory gemms;
  engine::PrecisionPlan plan;
};

Loaded load(Context& ctx, const ModelFlags& f, bool with_model = true) {
  Loaded l;
  if (with_model) l.model = engine::load_model(engine::resolve_model_path(f.model, search_dirs()));
  l.quantizers = engine::QuantizerFactory::standard(ctx.formats(), &ctx.blocks());
  l.gemms = engine::GemmFactory::with_datapaths(ctx.datapaths());
  std::vector<std::string> dirs;
  for (const auto& d : search_dirs()) dirs.push_back(d.string());
  l.plan = engine::load_plan(f.plan, l.quantizers, l.gemms, dirs);
  return l;
}

std::string num(double v, int digits = 6) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

// JSON numbers: NaN and ±Inf become null (nlohmann::json's rule; README "Robustness").
nlohmann::json stats_json(const metrics::ErrorStats& s) {
  return {{"sqnr_db", s.sqnr_db}, {"mse", s.mse}, {"max_abs", s.max_abs}};
}

// A token piece quoted for the per-token table (JSON string escaping).
std::string quoted(const std::string& s) { return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace

void register_engine(CLI::App& app, Context& ctx) {
  // ---- run ----
  auto* run = app.add_subcommand("run", "generate greedily from a prompt under a precision plan");
  static ModelFlags run_flags;
  static std::string prompt;
  static int steps = 256;
  run_flags.add_to(run);
  run->add_option("--prompt", prompt, "prompt text (empty: start from BOS alone)");
  run->add_option("--steps", steps, "positions to run, prompt included (as llama2.c -n)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  run->callback([&ctx] {
    ctx.apply_threads();
    Loaded l = load(ctx, run_flags);
    if (l.model.tokenizer.empty()) throw IoError(l.model.path.string() + ": model file has no tokenizer");
    const std::vector<int> p = l.model.tokenizer.encode(prompt);
    engine::SessionOptions o;
    o.quantizers = &l.quantizers;
    o.gemms = &l.gemms;
    const int n = std::min(steps, l.model.config.seq_len);
    o.max_tokens = n;  // the KV cache holds the positions this run uses, not the model's whole seq_len
    engine::Session s(l.model, l.plan, o);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int> out = engine::generate_greedy(s, p, n);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << l.model.tokenizer.decode(out) << std::endl;
    std::cerr << "lpemu: " << l.model.config.name << " under plan " << l.plan.name << ": " << out.size()
              << " tokens, " << num(static_cast<double>(s.position()) / secs, 4) << " positions/s\n";
  });

  // ---- eval ----
  auto* ev = app.add_subcommand("eval", "score a text under a plan against the fp32 reference");
  static ModelFlags ev_flags;
  static std::string text_file;
  static std::string reference = "fp32";
  static bool json = false;
  static bool per_token = false;
  static bool points = false;
  ev_flags.add_to(ev);
  ev->add_option("--text", text_file, "UTF-8 text file to score")->required()->check(CLI::ExistingFile);
  ev->add_option("--reference", reference, "reference plan")->capture_default_str();
  ev->add_flag("--json", json, "print JSON instead of a table");
  ev->add_flag("--per-token", per_token, "print every token's NLL (the JSON always has them)");
  ev->add_flag("--points", points, "print the error each quantisation point adds (the JSON always has them)");
  ev->callback([&ctx] {
    ctx.apply_threads();
    Loaded l = load(ctx, ev_flags);
    std::vector<std::string> dirs;
    for (const auto& d : search_dirs()) dirs.push_back(d.string());
    const engine::PrecisionPlan ref = engine::load_plan(reference, l.quantizers, l.gemms, dirs);
    std::string text = io::read_input(text_file, std::size_t{64} << 20);  // bounded: /dev/zero cannot hang
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    std::vector<int> tokens = l.model.tokenizer.encode(text);
    if (static_cast<int>(tokens.size()) > l.model.config.seq_len) {
      tokens.resize(static_cast<std::size_t>(l.model.config.seq_len));
    }
    const metrics::EvalResult r = metrics::evaluate(l.model, l.plan, ref, tokens, l.quantizers, l.gemms);
    if (json) {
      nlohmann::json j = {{"model", l.model.config.name}, {"plan", l.plan.name}, {"reference", ref.name},
                          {"tokens", tokens.size()}, {"mean_nll", r.mean_nll}, {"perplexity", r.perplexity},
                          {"ref_mean_nll", r.ref_mean_nll}, {"ref_perplexity", r.ref_perplexity},
                          {"mean_kl", r.mean_kl}, {"max_kl", r.max_kl}, {"top1_agreement", r.top1_agreement},
                          {"logits", stats_json(r.logits)}};
      j["residual"] = nlohmann::json::object();
      for (const auto& [name, st] : r.residual) j["residual"][name] = stats_json(st);
      j["points"] = nlohmann::json::object();
      for (const auto& [name, st] : r.points) j["points"][name] = stats_json(st);
      j["per_token"] = nlohmann::json::array();
      for (std::size_t t = 0; t < r.nll.size(); ++t) {
        j["per_token"].push_back({{"token", r.tokens[t + 1]}, {"nll", r.nll[t]}, {"ref_nll", r.ref_nll[t]},
                                  {"kl", r.kl[t]}, {"top1_agree", r.top1_agree[t]}});
      }
      print_json(j);
      return;
    }
    std::cout << "model " << l.model.config.name << ", plan " << l.plan.name << " vs " << ref.name << ", "
              << r.nll.size() << " tokens scored\n"
              << "  NLL (nats/token) " << num(r.mean_nll) << "  perplexity " << num(r.perplexity)
              << "   (reference: " << num(r.ref_mean_nll) << ", " << num(r.ref_perplexity) << ")\n"
              << "  KL(ref||plan)    mean " << num(r.mean_kl) << "  max " << num(r.max_kl) << "\n"
              << "  top-1 agreement  " << num(100.0 * r.top1_agreement, 4) << " %\n"
              << "  logits           SQNR " << num(r.logits.sqnr_db, 4) << " dB, max |err| "
              << num(r.logits.max_abs, 4) << "\n"
              << "  residual stream SQNR (dB):\n";
    for (const auto& [name, s] : r.residual) std::cout << "    " << name << "  " << num(s.sqnr_db, 4) << "\n";
    if (points) {
      std::cout << "  quantisation points (layer/role/tensor: SQNR dB, max |err|):\n";
      for (const auto& [name, st] : r.points) {
        std::cout << "    " << name << "  " << num(st.sqnr_db, 4) << "  " << num(st.max_abs, 3) << "\n";
      }
    }
    if (per_token) {
      std::cout << "  t  token  piece  nll  ref_nll  kl  top1\n";
      for (std::size_t t = 0; t < r.nll.size(); ++t) {
        std::cout << "  " << t << "  " << r.tokens[t + 1] << "  " << quoted(l.model.tokenizer.piece(r.tokens[t + 1]))
                  << "  " << num(r.nll[t]) << "  " << num(r.ref_nll[t]) << "  " << num(r.kl[t]) << "  "
                  << r.top1_agree[t] << "\n";
      }
    }
  });

  // ---- replay ----
  auto* rp = app.add_subcommand("replay", "feed recorded activations through each linear layer under a plan");
  static ModelFlags rp_flags;
  static std::string acts;
  static bool rp_json = false;
  rp_flags.add_to(rp);
  rp->add_option("--activations", acts, "recorded activations .h5 (schema: data/README.md)")
      ->required()
      ->check(CLI::ExistingFile);
  rp->add_flag("--json", rp_json, "print JSON instead of a table");
  rp->callback([&ctx] {
    ctx.apply_threads();
    // A model-independent file (/linear/<name>) needs no model; the stories260K schema does.
    const bool generic = metrics::is_linear_activations(acts);
    Loaded l = load(ctx, rp_flags, !generic);
    if (generic) l.model.config.name = "(recorded linear layers)";
    const auto rows = generic ? metrics::replay_linear(acts, l.plan, l.quantizers, l.gemms)
                              : metrics::replay(acts, l.model, l.plan, l.quantizers, l.gemms);
    if (rp_json) {
      nlohmann::json j = {{"model", l.model.config.name}, {"plan", l.plan.name}, {"rows", nlohmann::json::array()}};
      for (const auto& r : rows) {
        j["rows"].push_back({{"layer", r.layer}, {"tensor", r.tensor}, {"input", r.input},
                             {"input_format", r.input_format}, {"weight_format", r.weight_format}, {"gemm", r.gemm},
                             {"input_error", stats_json(r.input_error)}, {"weight_error", stats_json(r.weight_error)},
                             {"output_error", stats_json(r.output_error)}});
      }
      print_json(j);
      return;
    }
    std::printf("model %s, plan %s, activations %s\n", l.model.config.name.c_str(), l.plan.name.c_str(),
                acts.c_str());
    std::printf("%5s %-7s %-10s %-10s %10s %10s %10s %12s\n", "layer", "tensor", "input", "weight", "in_SQNR",
                "w_SQNR", "out_SQNR", "out_max_err");
    for (const auto& r : rows) {
      std::printf("%5s %-7s %-10s %-10s %10s %10s %10s %12s\n", r.layer < 0 ? "head" : std::to_string(r.layer).c_str(),
                  r.tensor.c_str(), r.input_format.c_str(), r.weight_format.c_str(),
                  num(r.input_error.sqnr_db, 4).c_str(), num(r.weight_error.sqnr_db, 4).c_str(),
                  num(r.output_error.sqnr_db, 4).c_str(), num(r.output_error.max_abs, 3).c_str());
    }
  });
}

}  // namespace lpemu::cli
