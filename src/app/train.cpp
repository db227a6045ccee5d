#include "lpemu/app/train.hpp"

#include <chrono>
#include <cstdio>
#include <sstream>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/tokenizer.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/train/backward.hpp"
#include "lpemu/train/linear_plan.hpp"
#include "lpemu/train/optimizer.hpp"

namespace lpemu::app {
namespace {

namespace fs = std::filesystem;

std::vector<int> training_tokens(const TrainRequest& a, const engine::Model& model) {
  if (!a.tokens.empty()) return engine::load_token_ids(a.tokens, model.config.vocab_size);
  if (model.tokenizer.empty())
    throw IoError(model.path.string() + ": model file has no tokenizer (use tokens)");
  std::vector<int> all;
  for (const auto& f : a.texts) {
    std::string text = io::read_input(f, std::size_t{64} << 20);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    const std::vector<int> t = model.tokenizer.encode(text);
    all.insert(all.end(), t.begin(), t.end());
  }
  return all;
}

template <class T>
void run(experiment::Context& ctx, const TrainRequest& a, engine::Model& model,
         const engine::PrecisionPlan& plan, const std::vector<int>& tokens, TrainResult& r) {
  const engine::Config& c = model.config;
  train::Params<T> p = train::params_from_model<T>(model);
  train::LinearPlan lp(plan, ctx.quantizers(), ctx.gemms(), c);
  train::OptimizerOptions o;
  o.kind = train::parse_optimizer(a.optimizer);
  o.lr = a.lr;
  o.momentum = a.momentum;
  o.weight_decay = a.weight_decay;
  o.clip_norm = a.clip_norm;
  o.warmup_steps = a.warmup;
  o.decay_steps = a.schedule == "cosine" ? std::max(a.steps - a.warmup, 1) : 0;
  train::Optimizer<T> opt(o, p, &plan, &ctx.quantizers(), c.n_layers);
  const std::size_t w = static_cast<std::size_t>(a.seq) + 1;
  std::vector<int> batch(static_cast<std::size_t>(a.batch) * w);
  train::Params<T> g;
  for (int s = 0; s < a.steps; ++s) {
    // Row b of step s is window (s·batch + b) mod windows: the stream's windows in order.
    for (int b = 0; b < a.batch; ++b) {
      const auto win =
          (static_cast<std::size_t>(s) * static_cast<std::size_t>(a.batch) + static_cast<std::size_t>(b)) %
          static_cast<std::size_t>(r.windows);
      std::copy_n(tokens.begin() + static_cast<std::ptrdiff_t>(win * w), w,
                  batch.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(b) * w));
    }
    lp.set_step((a.seed << 32U) + static_cast<std::uint64_t>(s));
    TrainStep st;
    st.step = s;
    st.loss = train::loss_and_gradients(c, p, batch, a.batch, a.seq, g, &lp);
    st.lr = train::learning_rate(o, s);
    st.grad_norm = opt.step(p, g, st.lr);
    r.log.push_back(st);
  }
  train::params_to_model(p, model);
}

}  // namespace

TrainResult train(experiment::Context& ctx, const TrainRequest& a) {
  if (a.steps < 1 || a.batch < 1 || a.seq < 1) {
    throw SpecError("train: steps, batch and seq must be >= 1 (got " + std::to_string(a.steps) + ", " +
                    std::to_string(a.batch) + ", " + std::to_string(a.seq) + ")");
  }
  if (a.warmup < 0) throw SpecError("train: warmup = " + std::to_string(a.warmup) + ": expected >= 0");
  if (a.schedule != "cosine" && a.schedule != "constant") {
    throw SpecError("train: schedule '" + a.schedule + "': expected cosine or constant");
  }
  if (a.out.empty()) throw SpecError("train: give an output folder (out)");
  if (a.texts.empty() == a.tokens.empty())
    throw SpecError("train: give tokens (a .npy) or texts, one of them");
  train::parse_optimizer(a.optimizer);
  engine::Model model = ctx.load_model(a.model);
  const engine::PrecisionPlan plan = ctx.load_plan(a.plan);
  if (a.seq > model.config.seq_len) {
    throw SpecError("train: seq = " + std::to_string(a.seq) + " exceeds the model's seq_len " +
                    std::to_string(model.config.seq_len));
  }
  const std::vector<int> tokens = training_tokens(a, model);
  TrainResult r;
  r.windows = static_cast<int>(tokens.size() / (static_cast<std::size_t>(a.seq) + 1));
  if (r.windows < 1) {
    throw SpecError("train: " + std::to_string(tokens.size()) +
                    " tokens hold no window of seq + 1 = " + std::to_string(a.seq + 1));
  }
  io::check_output_dir(a.out, "log.csv");
  fs::create_directories(a.out);
  const auto t0 = std::chrono::steady_clock::now();
  if (plan.compute == engine::Compute::fp64) {
    run<double>(ctx, a, model, plan, tokens, r);
  } else {
    run<float>(ctx, a, model, plan, tokens, r);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.model = model.config.name;
  r.plan = plan.name;
  r.optimizer = a.optimizer;
  r.batch = a.batch;
  r.seq = a.seq;
  r.model_out = (a.out / "model.h5").string();
  r.log_out = (a.out / "log.csv").string();
  engine::save_model(model, r.model_out);
  std::ostringstream csv;
  csv << "step,loss,grad_norm,lr\n";
  char line[160];
  for (const TrainStep& s : r.log) {
    std::snprintf(line, sizeof line, "%d,%.17g,%.17g,%.17g\n", s.step, s.loss, s.grad_norm, s.lr);
    csv << line;
  }
  io::write_file_atomic(r.log_out, csv.str(), io::OutputPolicy{true, {}});
  return r;
}

Fields fields(const TrainResult& r) {
  Fields log = Fields::array();
  for (const TrainStep& s : r.log) {
    log.push_back({{"step", s.step}, {"loss", s.loss}, {"grad_norm", s.grad_norm}, {"lr", s.lr}});
  }
  return {{"model", r.model},
          {"plan", r.plan},
          {"optimizer", r.optimizer},
          {"batch", r.batch},
          {"seq", r.seq},
          {"windows", r.windows},
          {"log", log},
          {"model_out", r.model_out},
          {"log_out", r.log_out}};
}

TrainRequest train_request(const Fields& f) {
  TrainRequest r;
  FieldReader in(f, "train");
  in.read("model", r.model);
  in.read("plan", r.plan);
  in.read("tokens", r.tokens);
  in.read("texts", r.texts);
  in.read("steps", r.steps);
  in.read("batch", r.batch);
  in.read("seq", r.seq);
  in.read("optimizer", r.optimizer);
  in.read("lr", r.lr);
  in.read("momentum", r.momentum);
  in.read("weight_decay", r.weight_decay);
  in.read("clip_norm", r.clip_norm);
  in.read("warmup", r.warmup);
  in.read("schedule", r.schedule);
  in.read("seed", r.seed);
  in.read("out", r.out);
  in.finish();
  return r;
}

}  // namespace lpemu::app
