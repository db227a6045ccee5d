// `lpemu run`, `lpemu eval`, `lpemu replay`: a model under a precision plan.
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
#include "lpemu/engine/sampling.hpp"
#include "lpemu/engine/session.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/evaluation.hpp"
#include "lpemu/io/npy.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/io/text.hpp"
#include "lpemu/metrics/perplexity.hpp"

namespace lpemu::cli {
namespace {

namespace fs = std::filesystem;

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

struct RunArgs {
  ModelFlags model;
  std::string prompt, tokens;
  int steps = 256;
  engine::SamplingOptions sampling;
};

struct EvalArgs {
  ModelFlags model;
  std::vector<std::string> texts, tokens;
  std::string reference = "fp32", logits_out;
  int context = 0, stride = 0, batch_tokens = 512;
  bool json = false, per_token = false, points = false;
};

struct ReplayArgs {
  ModelFlags model;
  std::string activations;
  bool json = false;
};

struct Loaded {
  engine::Model model;
  engine::PrecisionPlan plan;
};

Loaded load(Context& ctx, const ModelFlags& f, bool with_model = true) {
  Loaded l;
  if (with_model) l.model = ctx.load_model(f.model);
  l.plan = ctx.load_plan(f.plan);
  return l;
}

std::string num(double v, int digits = 6) {
  return io::format_number(v, io::NumberStyle::significant, digits);
}

// JSON numbers: NaN and ±Inf become null (nlohmann::json's rule; README "Robustness").
nlohmann::json stats_json(const metrics::ErrorStats& s) {
  return {{"sqnr_db", s.sqnr_db}, {"mse", s.mse}, {"max_abs", s.max_abs}};
}

// A token piece quoted for the per-token table (JSON string escaping).
/// A JSON number (NaN and ±Inf as null).

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

void register_engine(CLI::App& app, Context& ctx) {
  // ---- run ----
  auto* run = app.add_subcommand("run", "generate greedily from a prompt under a precision plan");
  static RunArgs ra;
  ra.model.add_to(run);
  auto* run_prompt = run->add_option("--prompt", ra.prompt, "prompt text (empty: start from BOS alone)");
  run->add_option("--tokens", ra.tokens, "prompt as a 1-D integer .npy of token ids (BOS included if wanted)")
      ->check(CLI::ExistingFile)
      ->excludes(run_prompt);
  run->add_option("--temperature", ra.sampling.temperature, "sampling temperature; 0 = greedy")
      ->capture_default_str();
  run->add_option("--top-k", ra.sampling.top_k, "sample among the k most likely tokens; 0 = all")
      ->capture_default_str()
      ->check(at_least(0));
  run->add_option("--top-p", ra.sampling.top_p, "sample within the smallest set of probability >= p")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  run->add_option("--seed", ra.sampling.seed, "seed of the sampling stream")->capture_default_str();
  run->add_option("--steps", ra.steps, "positions to run, prompt included (as llama2.c -n)")
      ->capture_default_str()
      ->check(at_least(1));
  run->callback([&ctx] {
    ctx.apply_threads();
    engine::validate(ra.sampling);
    Loaded l = load(ctx, ra.model);
    if (l.model.tokenizer.empty() && ra.tokens.empty()) {
      throw IoError(l.model.path.string() + ": model file has no tokenizer (give --tokens FILE.npy)");
    }
    const std::vector<int> p = ra.tokens.empty()
                                   ? l.model.tokenizer.encode(ra.prompt)
                                   : engine::load_token_ids(ra.tokens, l.model.config.vocab_size);
    engine::SessionOptions o;
    o.quantizers = &ctx.quantizers();
    o.gemms = &ctx.gemms();
    const int n = std::min(ra.steps, l.model.config.seq_len);
    o.max_tokens = n;  // the KV cache holds the positions this run uses, not the model's whole seq_len
    engine::Session s(l.model, l.plan, o);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int> out = ra.sampling.temperature > 0 ? engine::generate(s, p, n, ra.sampling)
                                                             : engine::generate_greedy(s, p, n);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (l.model.tokenizer.empty()) {
      for (std::size_t i = 0; i < out.size(); ++i) std::cout << (i ? " " : "") << out[i];
      std::cout << std::endl;
    } else {
      std::cout << l.model.tokenizer.decode(out) << std::endl;
    }
    std::cerr << "lpemu: " << l.model.config.name << " under plan " << l.plan.name << ": " << out.size()
              << " tokens, " << num(static_cast<double>(s.position()) / secs, 4) << " positions/s\n";
  });

  // ---- eval ----
  auto* ev = app.add_subcommand("eval", "score a text under a plan against the fp32 reference");
  static EvalArgs ea;
  ea.model.add_to(ev);
  auto* ev_text = ev->add_option("--text", ea.texts, "UTF-8 text file(s) to score (one document each)")
                      ->check(CLI::ExistingFile);
  auto* ev_tok =
      ev->add_option("--tokens", ea.tokens, "1-D integer .npy file(s) of token ids to score instead of texts")
          ->check(CLI::ExistingFile);
  ev_text->excludes(ev_tok);
  ev->add_option("--logits-out", ea.logits_out,
                 "write the plan's logits [tokens, vocab] to this float32 .npy");
  ev->add_option("--context", ea.context,
                 "sliding-window perplexity: window length (default: the model's seq_len)")
      ->check(at_least(1));
  ev->add_option("--stride", ea.stride,
                 "sliding-window perplexity: tokens between window starts (default: --context)")
      ->check(at_least(1));
  ev->add_option(
        "--batch-tokens", ea.batch_tokens,
        "sliding-window perplexity: windows run together up to this many tokens (results do not change)")
      ->capture_default_str()
      ->check(at_least(1));
  ev->add_option("--reference", ea.reference, "reference plan")->capture_default_str();
  ev->add_flag("--json", ea.json, "print JSON instead of a table");
  ev->add_flag("--per-token", ea.per_token, "print every token's NLL (the JSON always has them)");
  ev->add_flag("--points", ea.points,
               "print the error each quantisation point adds (the JSON always has them)");
  ev->callback([&ctx] {
    ctx.apply_threads();
    Loaded l = load(ctx, ea.model);
    const engine::PrecisionPlan ref = ctx.load_plan(ea.reference);
    if (ea.texts.empty() && ea.tokens.empty())
      throw SpecError("eval: give --text FILE... or --tokens FILE.npy...");
    std::vector<std::vector<int>> docs;
    std::vector<std::string> names = ea.tokens.empty() ? ea.texts : ea.tokens;
    for (const auto& name : names) {
      if (!ea.tokens.empty()) {
        docs.push_back(engine::load_token_ids(name, l.model.config.vocab_size));
        continue;
      }
      if (l.model.tokenizer.empty())
        throw IoError(l.model.path.string() + ": model file has no tokenizer (use --tokens)");
      std::string text = io::read_input(name, std::size_t{64} << 20);  // bounded: /dev/zero cannot hang
      while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
      docs.push_back(l.model.tokenizer.encode(text));
    }
    bool sliding = docs.size() > 1 || ea.context > 0 || ea.stride > 0;
    for (const auto& d : docs) sliding = sliding || static_cast<int>(d.size()) > l.model.config.seq_len;
    if (sliding) {
      // Long or several documents: sliding-window perplexity under the plan and the reference,
      // one session each for every document, windows run in batches.
      metrics::PerplexityOptions po;
      po.context = ea.context;
      po.stride = ea.stride;
      po.batch_tokens = ea.batch_tokens;
      engine::SessionOptions so;
      so.quantizers = &ctx.quantizers();
      so.gemms = &ctx.gemms();
      so.max_tokens = metrics::perplexity_cache_tokens(l.model, docs, po);
      const auto score = [&](const engine::PrecisionPlan& plan) {
        po.progress = [&](std::size_t done, std::size_t all, double secs) {
          std::cerr << "\rlpemu: plan " << plan.name << ", " << docs.size() << " document(s): " << done << "/"
                    << all << " tokens, " << num(secs, 3) << " s, about "
                    << num(secs * double(all - done) / double(done), 3) << " s left for this plan   "
                    << std::flush;
        };
        engine::Session s(l.model, plan, so);
        auto r = metrics::sliding_perplexity(s, docs, po);
        std::cerr << "\n";
        return r;
      };
      const auto r = score(l.plan);
      const auto rr = score(ref);
      std::size_t total = 0;
      double sum = 0, ref_sum = 0;
      nlohmann::json jd = nlohmann::json::array();
      for (std::size_t i = 0; i < docs.size(); ++i) {
        total += r[i].nll.size();
        sum += r[i].mean_nll * double(r[i].nll.size());
        ref_sum += rr[i].mean_nll * double(rr[i].nll.size());
        jd.push_back({{"name", names[i]},
                      {"tokens", docs[i].size()},
                      {"windows", r[i].windows},
                      {"mean_nll", r[i].mean_nll},
                      {"perplexity", r[i].perplexity},
                      {"ref_mean_nll", rr[i].mean_nll},
                      {"ref_perplexity", rr[i].perplexity}});
        if (!ea.json) {
          std::cout << names[i] << ": " << docs[i].size() << " tokens, " << r[i].windows
                    << " windows, perplexity " << num(r[i].perplexity) << " (reference "
                    << num(rr[i].perplexity) << ")\n";
        }
      }
      const double mean = sum / double(total), ref_mean = ref_sum / double(total);
      if (ea.json) {
        print_json({{"model", l.model.config.name},
                    {"plan", l.plan.name},
                    {"reference", ref.name},
                    {"documents", jd},
                    {"scored", total},
                    {"mean_nll", mean},
                    {"perplexity", std::exp(mean)},
                    {"ref_mean_nll", ref_mean},
                    {"ref_perplexity", std::exp(ref_mean)}});
      } else {
        std::cout << "model " << l.model.config.name << ", plan " << l.plan.name << " vs " << ref.name << ": "
                  << total << " tokens scored, NLL " << num(mean) << ", perplexity " << num(std::exp(mean))
                  << " (reference " << num(ref_mean) << ", " << num(std::exp(ref_mean)) << ")\n";
      }
      return;
    }
    const std::vector<int>& tokens = docs.front();
    const experiment::EvalResult r =
        experiment::evaluate(l.model, l.plan, ref, tokens, ctx.quantizers(), ctx.gemms());
    if (!ea.logits_out.empty()) {
      io::write_npy_floats(ea.logits_out,
                           {std::size_t(r.plan_logits.rows()), std::size_t(r.plan_logits.cols())},
                           r.plan_logits.data());
    }
    if (ea.json) {
      nlohmann::json j = {{"model", l.model.config.name},
                          {"plan", l.plan.name},
                          {"reference", ref.name},
                          {"tokens", tokens.size()},
                          {"mean_nll", r.mean_nll},
                          {"perplexity", r.perplexity},
                          {"ref_mean_nll", r.ref_mean_nll},
                          {"ref_perplexity", r.ref_perplexity},
                          {"mean_kl", r.mean_kl},
                          {"max_kl", r.max_kl},
                          {"top1_agreement", r.top1_agreement},
                          {"logits", stats_json(r.logits)}};
      j["residual"] = nlohmann::json::object();
      for (const auto& [name, st] : r.residual) j["residual"][name] = stats_json(st);
      j["points"] = nlohmann::json::object();
      for (const auto& [name, st] : r.points) j["points"][name] = stats_json(st);
      j["per_token"] = nlohmann::json::array();
      for (std::size_t t = 0; t < r.nll.size(); ++t) {
        j["per_token"].push_back({{"token", r.tokens[t + 1]},
                                  {"nll", r.nll[t]},
                                  {"ref_nll", r.ref_nll[t]},
                                  {"kl", r.kl[t]},
                                  {"top1_agree", r.top1_agree[t]}});
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
    if (ea.points) {
      std::cout << "  quantisation points (layer/role/tensor: SQNR dB, max |err|):\n";
      for (const auto& [name, st] : r.points) {
        std::cout << "    " << name << "  " << num(st.sqnr_db, 4) << "  " << num(st.max_abs, 3) << "\n";
      }
    }
    if (ea.per_token) {
      std::cout << "  t  token  piece  nll  ref_nll  kl  top1\n";
      for (std::size_t t = 0; t < r.nll.size(); ++t) {
        std::cout << "  " << t << "  " << r.tokens[t + 1] << "  "
                  << quoted(l.model.tokenizer.empty() ? std::string()
                                                      : l.model.tokenizer.piece(r.tokens[t + 1]))
                  << "  " << num(r.nll[t]) << "  " << num(r.ref_nll[t]) << "  " << num(r.kl[t]) << "  "
                  << r.top1_agree[t] << "\n";
      }
    }
  });

  // ---- replay ----
  auto* rp = app.add_subcommand("replay", "feed recorded activations through each linear layer under a plan");
  static ReplayArgs rpa;
  rpa.model.add_to(rp);
  rp->add_option("--activations", rpa.activations, "recorded activations .h5 (schema: data/README.md)")
      ->required()
      ->check(CLI::ExistingFile);
  rp->add_flag("--json", rpa.json, "print JSON instead of a table");
  rp->callback([&ctx] {
    ctx.apply_threads();
    // A model-independent file (/linear/<name>) needs no model; the stories260K schema does.
    const bool generic = experiment::is_linear_activations(rpa.activations);
    Loaded l = load(ctx, rpa.model, !generic);
    if (generic) l.model.config.name = "(recorded linear layers)";
    const auto rows =
        generic ? experiment::replay_linear(rpa.activations, l.plan, ctx.quantizers(), ctx.gemms())
                : experiment::replay(rpa.activations, l.model, l.plan, ctx.quantizers(), ctx.gemms());
    if (rpa.json) {
      nlohmann::json j = {
          {"model", l.model.config.name}, {"plan", l.plan.name}, {"rows", nlohmann::json::array()}};
      for (const auto& r : rows) {
        j["rows"].push_back({{"layer", r.layer},
                             {"tensor", r.tensor},
                             {"role", r.role},
                             {"input", r.input},
                             {"input_format", r.input_format},
                             {"weight_format", r.weight_format},
                             {"gemm", r.gemm},
                             {"input_error", stats_json(r.input_error)},
                             {"weight_error", stats_json(r.weight_error)},
                             {"output_error", stats_json(r.output_error)}});
      }
      print_json(j);
      return;
    }
    std::printf("model %s, plan %s, activations %s\n", l.model.config.name.c_str(), l.plan.name.c_str(),
                rpa.activations.c_str());
    std::printf("%5s %-7s %-13s %-10s %-10s %10s %10s %10s %12s\n", "layer", "tensor", "role", "input",
                "weight", "in_SQNR", "w_SQNR", "out_SQNR", "out_max_err");
    for (const auto& r : rows) {
      std::printf("%5s %-7s %-13s %-10s %-10s %10s %10s %10s %12s\n",
                  r.layer < 0 ? "head" : std::to_string(r.layer).c_str(), r.tensor.c_str(), r.role.c_str(),
                  r.input_format.c_str(), r.weight_format.c_str(), num(r.input_error.sqnr_db, 4).c_str(),
                  num(r.weight_error.sqnr_db, 4).c_str(), num(r.output_error.sqnr_db, 4).c_str(),
                  num(r.output_error.max_abs, 3).c_str());
    }
  });
}

}  // namespace lpemu::cli
