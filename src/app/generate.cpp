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
  const engine::Model model = ctx.load_model(a.model);
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
  engine::Session s(model, plan, o);
  const auto t0 = std::chrono::steady_clock::now();
  GenerateResult r;
  r.tokens =
      a.sampling.temperature > 0 ? engine::generate(s, p, n, a.sampling) : engine::generate_greedy(s, p, n);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.model = model.config.name;
  r.plan = plan.name;
  r.has_tokenizer = !model.tokenizer.empty();
  if (r.has_tokenizer) r.text = model.tokenizer.decode(r.tokens);
  r.positions = static_cast<int>(s.position());
  return r;
}

Fields fields(const GenerateResult& r) {
  return {{"model", r.model},
          {"plan", r.plan},
          {"positions", r.positions},
          {"tokens", r.tokens},
          {"text", r.text}};
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
