#include "lpemu/app/evaluate.hpp"

#include <chrono>
#include <cmath>

#include "lpemu/engine/session.hpp"
#include "lpemu/engine/tokenizer.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/npy.hpp"
#include "lpemu/io/output.hpp"

namespace lpemu::app {
namespace {

std::vector<std::vector<int>> documents(const engine::Model& model, const EvalRequest& a,
                                        std::vector<std::string>& names) {
  std::vector<std::vector<int>> docs;
  if (!a.tokens.empty()) {
    for (const auto& f : a.tokens) {
      names.push_back(f.string());
      docs.push_back(engine::load_token_ids(f, model.config.vocab_size));
    }
    return docs;
  }
  for (const auto& f : a.texts) {
    if (model.tokenizer.empty())
      throw IoError(model.path.string() + ": model file has no tokenizer (use tokens)");
    std::string text = io::read_input(f, std::size_t{64} << 20);  // bounded: /dev/zero cannot hang
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    names.push_back(f.string());
    docs.push_back(model.tokenizer.encode(text));
  }
  return docs;
}

}  // namespace

Fields fields(const metrics::ErrorStats& s) {
  return {{"sqnr_db", s.sqnr_db}, {"mse", s.mse}, {"max_abs", s.max_abs}};
}

Fields fields(const experiment::EvalTiming& t) {
  return {{"plan_prepare_s", t.plan_prepare_s},
          {"plan_forward_s", t.plan_forward_s},
          {"reference_prepare_s", t.reference_prepare_s},
          {"reference_forward_s", t.reference_forward_s},
          {"hooks_s", t.hooks_s}};
}

namespace {

// Load, session building and forward times of a report, then the whole call's.
Fields timing_fields(const EvalReport& r) {
  Fields t = {{"load_s", r.load_s}};
  t.update(fields(r.timing));
  t["total_s"] = r.total_s;
  return t;
}

}  // namespace

Fields fields(const experiment::EvalResult& e) {
  Fields j = {{"mean_nll", e.mean_nll},
              {"perplexity", e.perplexity},
              {"ref_mean_nll", e.ref_mean_nll},
              {"ref_perplexity", e.ref_perplexity},
              {"mean_kl", e.mean_kl},
              {"max_kl", e.max_kl},
              {"top1_agreement", e.top1_agreement},
              {"logits", fields(e.logits)}};
  j["residual"] = Fields::object();
  for (const auto& [name, st] : e.residual) j["residual"][name] = fields(st);
  j["points"] = Fields::object();
  for (const auto& [name, st] : e.points) j["points"][name] = fields(st);
  return j;
}

EvalReport evaluate(experiment::Context& ctx, const EvalRequest& a) {
  if (a.texts.empty() && a.tokens.empty())
    throw SpecError("eval: give texts (--text FILE...) or tokens (--tokens FILE.npy...)");
  if (!a.texts.empty() && !a.tokens.empty()) throw SpecError("eval: texts and tokens exclude each other");
  if (a.context < 0 || a.stride < 0 || a.batch_tokens < 1)
    throw SpecError("eval: context and stride must be >= 1 (or 0 for the default), batch_tokens >= 1");
  io::OutputPolicy policy{a.force, a.texts};
  policy.inputs.insert(policy.inputs.end(), a.tokens.begin(), a.tokens.end());
  if (!a.logits_out.empty()) io::check_output(a.logits_out, policy);
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const auto t0 = Clock::now();
  const engine::Model model = ctx.load_model(a.model);
  const double load_s = since(t0);
  const engine::PrecisionPlan plan = ctx.load_plan(a.plan);
  const engine::PrecisionPlan ref = ctx.load_plan(a.reference);
  EvalReport out{model.config.name, plan.name, ref.name, std::nullopt, {}, {}, load_s, {}, 0};
  std::vector<std::string> names;
  const std::vector<std::vector<int>> docs = documents(model, a, names);
  bool sliding = docs.size() > 1 || a.context > 0 || a.stride > 0;
  for (const auto& d : docs) sliding = sliding || static_cast<int>(d.size()) > model.config.seq_len;
  if (!sliding) {
    out.single = experiment::evaluate(model, plan, ref, docs.front(), ctx.quantizers(), ctx.gemms());
    const experiment::EvalResult& r = *out.single;
    out.timing = r.timing;
    for (std::size_t t = 1; t < r.tokens.size(); ++t)
      out.pieces.push_back(model.tokenizer.empty() ? std::string() : model.tokenizer.piece(r.tokens[t]));
    if (!a.logits_out.empty()) {
      io::write_npy_floats(a.logits_out,
                           {std::size_t(r.plan_logits.rows()), std::size_t(r.plan_logits.cols())},
                           r.plan_logits.data(), policy);
    }
    out.total_s = since(t0);
    return out;
  }
  if (!a.logits_out.empty())
    throw SpecError("eval: logits_out needs one sequence within the model's context");
  // Long or several documents: sliding-window perplexity under the plan and the reference, one
  // session each for every document, windows run in batches.
  metrics::PerplexityOptions po;
  po.context = a.context;
  po.stride = a.stride;
  po.batch_tokens = a.batch_tokens;
  engine::SessionOptions so;
  so.quantizers = &ctx.quantizers();
  so.gemms = &ctx.gemms();
  so.max_tokens = metrics::perplexity_cache_tokens(model, docs, po);
  const auto score = [&](const engine::PrecisionPlan& p, double& prepare_s, double& forward_s) {
    if (a.progress) {
      po.progress = [&](std::size_t done, std::size_t all, double secs) {
        a.progress({"plan " + p.name + ", " + std::to_string(docs.size()) + " document(s)", done, all, secs});
      };
    }
    const auto t1 = Clock::now();
    engine::Session s(model, p, so);
    prepare_s = since(t1);
    const auto t2 = Clock::now();
    auto scores = metrics::sliding_perplexity(s, docs, po);
    forward_s = since(t2);
    return scores;
  };
  const auto r = score(plan, out.timing.plan_prepare_s, out.timing.plan_forward_s);
  const auto rr = score(ref, out.timing.reference_prepare_s, out.timing.reference_forward_s);
  for (std::size_t i = 0; i < docs.size(); ++i)
    out.documents.push_back({names[i], docs[i].size(), r[i], rr[i]});
  out.total_s = since(t0);
  return out;
}

Fields fields(const EvalReport& r) {
  Fields j = {{"model", r.model}, {"plan", r.plan}, {"reference", r.reference}};
  if (!r.single) {
    std::size_t total = 0;
    double sum = 0, ref_sum = 0;
    Fields docs = Fields::array();
    for (const auto& d : r.documents) {
      total += d.plan.nll.size();
      sum += d.plan.mean_nll * double(d.plan.nll.size());
      ref_sum += d.reference.mean_nll * double(d.reference.nll.size());
      docs.push_back({{"name", d.name},
                      {"tokens", d.tokens},
                      {"windows", d.plan.windows},
                      {"mean_nll", d.plan.mean_nll},
                      {"perplexity", d.plan.perplexity},
                      {"ref_mean_nll", d.reference.mean_nll},
                      {"ref_perplexity", d.reference.perplexity}});
    }
    const double mean = sum / double(total), ref_mean = ref_sum / double(total);
    j["documents"] = docs;
    j["scored"] = total;
    j["mean_nll"] = mean;
    j["perplexity"] = std::exp(mean);
    j["ref_mean_nll"] = ref_mean;
    j["ref_perplexity"] = std::exp(ref_mean);
    j["timing"] = timing_fields(r);
    return j;
  }
  const experiment::EvalResult& e = *r.single;
  j["tokens"] = e.tokens.size();
  j.update(fields(e));
  j["per_token"] = Fields::array();
  for (std::size_t t = 0; t < e.nll.size(); ++t) {
    j["per_token"].push_back({{"token", e.tokens[t + 1]},
                              {"piece", r.pieces[t]},
                              {"nll", e.nll[t]},
                              {"ref_nll", e.ref_nll[t]},
                              {"kl", e.kl[t]},
                              {"top1_agree", e.top1_agree[t]}});
  }
  j["timing"] = timing_fields(r);
  return j;
}

EvalRequest eval_request(const Fields& f) {
  EvalRequest r;
  FieldReader in(f, "eval");
  in.read("model", r.model);
  in.read("plan", r.plan);
  in.read("reference", r.reference);
  in.read("texts", r.texts);
  in.read("tokens", r.tokens);
  in.read("context", r.context);
  in.read("stride", r.stride);
  in.read("batch_tokens", r.batch_tokens);
  in.read("logits_out", r.logits_out);
  in.read("force", r.force);
  in.finish();
  return r;
}

}  // namespace lpemu::app
