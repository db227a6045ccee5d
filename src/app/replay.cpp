#include "lpemu/app/replay.hpp"

#include "lpemu/app/evaluate.hpp"
#include "lpemu/error.hpp"

namespace lpemu::app {
ReplayReport replay(experiment::Context& ctx, const ReplayRequest& a) {
  if (a.activations.empty()) throw SpecError("replay: an activations file is required (--activations)");
  ReplayReport out;
  const engine::PrecisionPlan plan = ctx.load_plan(a.plan);
  out.plan = plan.name;
  // A model-independent file (/linear/<name>) needs no model; the stories260K schema does.
  if (experiment::is_linear_activations(a.activations)) {
    out.model = "(recorded linear layers)";
    out.rows = experiment::replay_linear(a.activations, plan, ctx.quantizers(), ctx.gemms());
    return out;
  }
  const engine::Model model = ctx.load_model(a.model);
  out.model = model.config.name;
  out.rows = experiment::replay(a.activations, model, plan, ctx.quantizers(), ctx.gemms());
  return out;
}

Fields fields(const ReplayReport& r) {
  Fields rows = Fields::array();
  for (const auto& x : r.rows) {
    rows.push_back({{"layer", x.layer},
                    {"tensor", x.tensor},
                    {"role", x.role},
                    {"input", x.input},
                    {"input_format", x.input_format},
                    {"weight_format", x.weight_format},
                    {"gemm", x.gemm},
                    {"input_error", fields(x.input_error)},
                    {"weight_error", fields(x.weight_error)},
                    {"output_error", fields(x.output_error)}});
  }
  return {{"model", r.model}, {"plan", r.plan}, {"rows", rows}};
}

ReplayRequest replay_request(const Fields& f) {
  ReplayRequest r;
  FieldReader in(f, "replay");
  in.read("model", r.model);
  in.read("plan", r.plan);
  in.read("activations", r.activations);
  in.finish();
  return r;
}

}  // namespace lpemu::app
