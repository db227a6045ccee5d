#include "lpemu/app/generate.hpp"

#include <algorithm>
#include <chrono>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/session.hpp"
#include "lpemu/engine/tokenizer.hpp"
#include "lpemu/error.hpp"

namespace lpemu::app {

GenerateResult generate(experiment::Context& ctx, const GenerateRequest& a) {
  engine::validate(a.sampling);
  if (a.steps < 1) throw SpecError("run: steps = " + std::to_string(a.steps) + ": expected >= 1");
  if (!a.prompt.empty() && !a.tokens.empty()) throw SpecError("run: give a prompt or tokens, not both");
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const auto start = Clock::now();
  const engine::Model model = ctx.load_model(a.model);
  const double load_s = since(start);
  const engine::PrecisionPlan plan = ctx.load_plan(a.plan);
  if (model.tokenizer.empty() && a.tokens.empty()) {
    throw IoError(model.path.string() + ": model file has no tokenizer (give --tokens FILE.npy)");
  }
  const std::vector<int> p = a.tokens.empty() ? model.tokenizer.encode(a.prompt)
                                              : engine::load_token_ids(a.tokens, model.config.vocab_size);
  engine::SessionOptions o;
  o.quantizers = &ctx.quantizers();
  o.gemms = &ctx.gemms();
  const int n = std::min(a.steps, model.config.seq_len);
  o.max_tokens = n;  // the KV cache holds the positions this run uses, not the model's whole seq_len
  const auto tp = Clock::now();
  engine::Session s(model, plan, o);
  const double prepare_s = since(tp);
  const auto t0 = Clock::now();
  GenerateResult r;
  r.load_s = load_s;
  r.prepare_s = prepare_s;
  r.tokens =
      a.sampling.temperature > 0 ? engine::generate(s, p, n, a.sampling) : engine::generate_greedy(s, p, n);
  r.seconds = since(t0);
  r.model = model.config.name;
  r.plan = plan.name;
  r.has_tokenizer = !model.tokenizer.empty();
  if (r.has_tokenizer) r.text = model.tokenizer.decode(r.tokens);
  r.positions = static_cast<int>(s.position());
  r.total_s = since(start);
  return r;
}

Fields fields(const GenerateResult& r) {
  return {{"model", r.model},
          {"plan", r.plan},
          {"positions", r.positions},
          {"tokens", r.tokens},
          {"text", r.text},
          {"timing",
           {{"load_s", r.load_s},
            {"prepare_s", r.prepare_s},
            {"generate_s", r.seconds},
            {"total_s", r.total_s}}}};
}

GenerateRequest generate_request(const Fields& f) {
  GenerateRequest r;
  FieldReader in(f, "run");
  in.read("model", r.model);
  in.read("plan", r.plan);
  in.read("prompt", r.prompt);
  in.read("tokens", r.tokens);
  in.read("steps", r.steps);
  in.read("temperature", r.sampling.temperature);
  in.read("top_k", r.sampling.top_k);
  in.read("top_p", r.sampling.top_p);
  in.read("seed", r.sampling.seed);
  in.finish();
  return r;
}

}  // namespace lpemu::app
