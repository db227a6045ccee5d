// `lpemu run`, `lpemu eval`, `lpemu replay`: a model under a precision plan (parse, call
// lpemu/app/{generate,evaluate,replay}.hpp, print).
//
// --model takes a path to an .h5 file or a shipped model name NAME, found as
// data/models/NAME/model.h5 under: the executable's directory and its two parents (so the
// build tree's ../../data works), the source tree lpemu was built from, $LPEMU_DATA_DIR, then the
// working directory. --plan takes a .toml path, a built-in (fp32, fp64) or a NAME found as
// experiments/plans/NAME.toml under the same directories.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.hpp"
#include "lpemu/app/evaluate.hpp"
#include "lpemu/app/generate.hpp"
#include "lpemu/app/replay.hpp"
#include "lpemu/app/train.hpp"
#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
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
  app::GenerateRequest req;
  bool json = false, verbose = false;
};

struct EvalArgs {
  ModelFlags model;
  app::EvalRequest req;
  bool json = false, per_token = false, points = false, verbose = false;
};

struct TrainArgs {
  ModelFlags model;
  app::TrainRequest req;
  bool json = false;
};

struct ReplayArgs {
  ModelFlags model;
  app::ReplayRequest req;
  bool json = false;
};

std::string significant_num(double v, int digits = 6) {
  return io::format_number(v, io::NumberStyle::significant, digits);
}

// A token piece quoted for the per-token table (JSON string escaping).
std::string quoted(const std::string& s) { return app::json_text(s); }

}  // namespace

void register_engine(CLI::App& app, Context& ctx) {
  // ---- run ----
  auto* run = app.add_subcommand("run", "generate greedily from a prompt under a precision plan");
  static RunArgs ra;
  static ModelFlags run_model;
  run_model.add_to(run);
  app::GenerateRequest& rq = ra.req;
  auto* run_prompt = run->add_option("--prompt", rq.prompt, "prompt text (empty: start from BOS alone)");
  run->add_option("--tokens", rq.tokens, "prompt as a 1-D integer .npy of token ids (BOS included if wanted)")
      ->check(CLI::ExistingFile)
      ->excludes(run_prompt);
  run->add_option("--temperature", rq.sampling.temperature, "sampling temperature; 0 = greedy")
      ->capture_default_str();
  run->add_option("--top-k", rq.sampling.top_k, "sample among the k most likely tokens; 0 = all")
      ->capture_default_str()
      ->check(at_least(0));
  run->add_option("--top-p", rq.sampling.top_p, "sample within the smallest set of probability >= p")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  run->add_option("--seed", rq.sampling.seed, "seed of the sampling stream")
      ->capture_default_str()
      ->check(seed_value());
  run->add_option("--steps", rq.steps, "positions to run, prompt included (as llama2.c -n)")
      ->capture_default_str()
      ->check(at_least(1));
  run->add_flag("--json", ra.json, "print JSON (tokens and text) instead of the text");
  run->add_flag("--verbose", ra.verbose, "print where the time went (load, session, generation)");
  run->callback([&ctx] {
    ctx.apply_threads();
    app::GenerateRequest req = ra.req;
    req.model = run_model.model;
    req.plan = run_model.plan;
    const app::GenerateResult r = app::generate(ctx, req);
    if (ra.verbose) print_timing("run", app::fields(r)["timing"]);
    if (ra.json) {
      print_json(app::fields(r));
    } else if (!r.has_tokenizer) {
      for (std::size_t i = 0; i < r.tokens.size(); ++i) std::cout << (i ? " " : "") << r.tokens[i];
      std::cout << std::endl;
    } else {
      std::cout << r.text << std::endl;
    }
    std::cerr << "lpemu: " << r.model << " under plan " << r.plan << ": " << r.tokens.size() << " tokens, "
              << significant_num(static_cast<double>(r.positions) / r.seconds, 4) << " positions/s\n";
  });

  // ---- train ----
  auto* tr = app.add_subcommand("train", "train a model under a precision plan (docs/training.md)");
  static TrainArgs ta;
  ta.model.add_to(tr);
  tr->get_option("--model")->description(
      "model .h5 file, shipped model name, or a shape (data/shapes name or .toml) initialised from --seed");
  app::TrainRequest& tq = ta.req;
  auto* tr_tok =
      tr->add_option("--tokens", tq.tokens, "training tokens: a 1-D integer .npy")->check(CLI::ExistingFile);
  tr->add_option("--text", tq.texts, "or UTF-8 text file(s), encoded by the model's tokenizer")
      ->check(CLI::ExistingFile)
      ->excludes(tr_tok);
  tr->add_option("--steps", tq.steps, "optimizer steps")->capture_default_str()->check(at_least(1));
  tr->add_option("--batch", tq.batch, "sequences per step")->capture_default_str()->check(at_least(1));
  tr->add_option("--seq", tq.seq, "positions per sequence")->capture_default_str()->check(at_least(1));
  tr->add_option("--optimizer", tq.optimizer, "sgd (with momentum) or adamw")
      ->capture_default_str()
      ->check(CLI::IsMember({"sgd", "adamw"}));
  tr->add_option("--lr", tq.lr, "peak learning rate")->capture_default_str();
  tr->add_option("--momentum", tq.momentum, "SGD momentum")->capture_default_str();
  tr->add_option("--weight-decay", tq.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  tr->add_option("--clip-norm", tq.clip_norm, "clip the global gradient norm to this (0: none)")
      ->capture_default_str();
  tr->add_option("--warmup", tq.warmup, "linear warm-up steps")->capture_default_str()->check(at_least(0));
  tr->add_option("--schedule", tq.schedule, "after warm-up: cosine (to 0 at the last step) or constant")
      ->capture_default_str()
      ->check(CLI::IsMember({"cosine", "constant"}));
  tr->add_option("--seed", tq.seed,
                 "initialises a shape given to --model; mixed into every stochastic-rounding stream")
      ->capture_default_str();
  tr->add_option("--out", tq.out, "output folder: model.h5, log.csv and log.h5")->required();
  tr->add_option("--val-fraction", tq.val_fraction,
                 "share of the windows held out for validation (the last ones)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.999999));
  tr->add_option("--eval-every", tq.eval_every, "validation loss at steps 0, N, 2N, ...")
      ->capture_default_str()
      ->check(at_least(1));
  tr->add_option("--sqnr-every", tq.sqnr_every,
                 "per-block gradient SQNR against the unquantised gradient every this many steps (0: never)")
      ->capture_default_str()
      ->check(at_least(0));
  tr->add_flag("--resume", tq.resume, "continue the run in --out (state.h5, log) up to --steps in total");
  tr->add_flag("--json", ta.json, "print the result as JSON");
  tr->callback([&ctx] {
    ctx.apply_threads();
    app::TrainRequest req = ta.req;
    req.model = ta.model.model;
    req.plan = ta.model.plan;
    req.progress = [](const app::Progress& p) {
      std::cerr << "\rlpemu: " << p.what << ": step " << p.done << "/" << p.total << ", "
                << significant_num(p.seconds, 3) << " s, about "
                << significant_num(p.seconds * double(p.total - p.done) / double(p.done), 3) << " s left   "
                << (p.done == p.total ? "\n" : "") << std::flush;
    };
    const app::TrainResult r = app::train(ctx, req);
    if (ta.json) {
      print_json(app::fields(r));
    } else {
      std::cout << "step,loss,val_loss,grad_norm,lr\n";
      for (const auto& s : r.log) {
        std::cout << s.step << "," << significant_num(s.loss, 8) << "," << significant_num(s.val_loss, 8)
                  << "," << significant_num(s.grad_norm, 6) << "," << significant_num(s.lr, 6) << "\n";
      }
      std::cout << "wrote " << r.model_out << ", " << r.log_out << " and " << r.log_h5 << std::endl;
    }
    std::cerr << "lpemu: trained " << r.model << " under plan " << r.plan << ": " << r.log.size()
              << " steps in " << significant_num(r.seconds, 3) << " s\n";
  });

  // ---- eval ----
  auto* ev = app.add_subcommand("eval", "score a text under a plan against the fp32 reference");
  static EvalArgs ea;
  ea.model.add_to(ev);
  auto* ev_text = ev->add_option("--text", ea.req.texts, "UTF-8 text file(s) to score (one document each)")
                      ->check(CLI::ExistingFile);
  auto* ev_tok = ev->add_option("--tokens", ea.req.tokens,
                                "1-D integer .npy file(s) of token ids to score instead of texts")
                     ->check(CLI::ExistingFile);
  ev_text->excludes(ev_tok);
  ev->add_option("--logits-out", ea.req.logits_out,
                 "write the plan's logits [tokens, vocab] to this float32 .npy");
  ev->add_option("--context", ea.req.context,
                 "sliding-window perplexity: window length (default: the model's seq_len)")
      ->check(at_least(1));
  ev->add_option("--stride", ea.req.stride,
                 "sliding-window perplexity: tokens between window starts (default: --context)")
      ->check(at_least(1));
  ev->add_option(
        "--batch-tokens", ea.req.batch_tokens,
        "sliding-window perplexity: windows run together up to this many tokens (results do not change)")
      ->capture_default_str()
      ->check(at_least(1));
  ev->add_option("--reference", ea.req.reference, "reference plan")->capture_default_str();
  ev->add_flag("--json", ea.json, "print JSON instead of a table");
  ev->add_flag("--verbose", ea.verbose,
               "print where the time went (load, sessions built, forward passes, hooks)");
  ev->add_flag("--per-token", ea.per_token, "print every token's NLL (the JSON always has them)");
  ev->add_flag("--points", ea.points,
               "print the error each quantisation point adds (the JSON always has them)");
  ev->callback([&ctx] {
    ctx.apply_threads();
    app::EvalRequest req = ea.req;
    req.model = ea.model.model;
    req.plan = ea.model.plan;
    req.progress = [](const app::Progress& p) {
      std::cerr << "\rlpemu: " << p.what << ": " << p.done << "/" << p.total << " tokens, "
                << significant_num(p.seconds, 3) << " s, about "
                << significant_num(p.seconds * double(p.total - p.done) / double(p.done), 3)
                << " s left for this plan   " << (p.done == p.total ? "\n" : "") << std::flush;
    };
    const app::EvalReport rep = app::evaluate(ctx, req);
    if (ea.verbose) print_timing("eval", app::fields(rep)["timing"]);
    if (ea.json) {
      print_json(app::fields(rep));
      return;
    }
    if (!rep.single) {
      std::size_t total = 0;
      double sum = 0, ref_sum = 0;
      for (const auto& d : rep.documents) {
        total += d.plan.nll.size();
        sum += d.plan.mean_nll * double(d.plan.nll.size());
        ref_sum += d.reference.mean_nll * double(d.reference.nll.size());
        std::cout << d.name << ": " << d.tokens << " tokens, " << d.plan.windows << " windows, perplexity "
                  << significant_num(d.plan.perplexity) << " (reference "
                  << significant_num(d.reference.perplexity) << ")\n";
      }
      const double mean = sum / double(total), ref_mean = ref_sum / double(total);
      std::cout << "model " << rep.model << ", plan " << rep.plan << " vs " << rep.reference << ": " << total
                << " tokens scored, NLL " << significant_num(mean) << ", perplexity "
                << significant_num(std::exp(mean)) << " (reference " << significant_num(ref_mean) << ", "
                << significant_num(std::exp(ref_mean)) << ")\n";
      return;
    }
    const experiment::EvalResult& r = *rep.single;
    std::cout << "model " << rep.model << ", plan " << rep.plan << " vs " << rep.reference << ", "
              << r.nll.size() << " tokens scored\n"
              << "  NLL (nats/token) " << significant_num(r.mean_nll) << "  perplexity "
              << significant_num(r.perplexity) << "   (reference: " << significant_num(r.ref_mean_nll) << ", "
              << significant_num(r.ref_perplexity) << ")\n"
              << "  KL(ref||plan)    mean " << significant_num(r.mean_kl) << "  max "
              << significant_num(r.max_kl) << "\n"
              << "  top-1 agreement  " << significant_num(100.0 * r.top1_agreement, 4) << " %\n"
              << "  logits           SQNR " << significant_num(r.logits.sqnr_db, 4) << " dB, max |err| "
              << significant_num(r.logits.max_abs, 4) << "\n"
              << "  residual stream SQNR (dB):\n";
    for (const auto& [name, st] : r.residual)
      std::cout << "    " << name << "  " << significant_num(st.sqnr_db, 4) << "\n";
    if (ea.points) {
      std::cout << "  quantisation points (layer/role/tensor: SQNR dB, max |err|):\n";
      for (const auto& [name, st] : r.points) {
        std::cout << "    " << name << "  " << significant_num(st.sqnr_db, 4) << "  "
                  << significant_num(st.max_abs, 3) << "\n";
      }
    }
    if (ea.per_token) {
      std::cout << "  t  token  piece  nll  ref_nll  kl  top1\n";
      for (std::size_t t = 0; t < r.nll.size(); ++t) {
        std::cout << "  " << t << "  " << r.tokens[t + 1] << "  " << quoted(rep.pieces[t]) << "  "
                  << significant_num(r.nll[t]) << "  " << significant_num(r.ref_nll[t]) << "  "
                  << significant_num(r.kl[t]) << "  " << r.top1_agree[t] << "\n";
      }
    }
  });

  // ---- replay ----
  auto* rp = app.add_subcommand("replay", "feed recorded activations through each linear layer under a plan");
  static ReplayArgs rpa;
  rpa.model.add_to(rp);
  rp->add_option("--activations", rpa.req.activations, "recorded activations .h5 (schema: data/README.md)")
      ->required()
      ->check(CLI::ExistingFile);
  rp->add_flag("--json", rpa.json, "print JSON instead of a table");
  rp->callback([&ctx] {
    ctx.apply_threads();
    app::ReplayRequest req = rpa.req;
    req.model = rpa.model.model;
    req.plan = rpa.model.plan;
    const app::ReplayReport rep = app::replay(ctx, req);
    if (rpa.json) {
      print_json(app::fields(rep));
      return;
    }
    std::printf("model %s, plan %s, activations %s\n", rep.model.c_str(), rep.plan.c_str(),
                req.activations.c_str());
    std::printf("%5s %-7s %-13s %-10s %-10s %10s %10s %10s %12s\n", "layer", "tensor", "role", "input",
                "weight", "in_SQNR", "w_SQNR", "out_SQNR", "out_max_err");
    for (const auto& r : rep.rows) {
      std::printf("%5s %-7s %-13s %-10s %-10s %10s %10s %10s %12s\n",
                  r.layer < 0 ? "head" : std::to_string(r.layer).c_str(), r.tensor.c_str(), r.role.c_str(),
                  r.input_format.c_str(), r.weight_format.c_str(),
                  significant_num(r.input_error.sqnr_db, 4).c_str(),
                  significant_num(r.weight_error.sqnr_db, 4).c_str(),
                  significant_num(r.output_error.sqnr_db, 4).c_str(),
                  significant_num(r.output_error.max_abs, 3).c_str());
    }
  });
}

}  // namespace lpemu::cli
