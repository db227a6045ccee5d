#include "lpemu/app/proposal.hpp"

#include "lpemu/core/core.hpp"
#include "lpemu/cost/catalog.hpp"
#include "lpemu/engine/model.hpp"
#include "lpemu/error.hpp"

namespace lpemu::app {

namespace fs = std::filesystem;

ProposalResult proposal(experiment::Context& ctx, const ProposalRequest& a) {
  if (a.format.empty())
    throw SpecError("proposal: give a FORMAT name or .toml file (or use `proposal verify`)");
  if (a.out.empty()) throw SpecError("proposal: --out DIR is required");
  if (a.phase != "decode" && a.phase != "prefill")
    throw SpecError("proposal: phase \"" + a.phase + "\": expected decode or prefill");
  const bool want_model = !a.model.empty();
  experiment::ProposalRequest req = experiment::proposal_request(ctx, a.format, a.datapath, want_model);
  if (want_model) {
    experiment::AccuracyRequest acc;
    acc.formats = experiment::proposal_accuracy_formats(ctx, req);
    acc.gemm = req.datapath ? req.datapath->name : "";
    acc.model = a.model;
    // Everything the accuracy run needs is checked before a file is written.
    const fs::path model_file = engine::resolve_model_path(a.model, ctx.data_dirs);
    if (a.text.empty()) {
      acc.text = model_file.parent_path() / "paragraph.txt";
      if (!fs::exists(acc.text)) {
        throw IoError("proposal: --model " + a.model + " has no paragraph.txt beside " + model_file.string() +
                      "; give --text FILE");
      }
    } else {
      acc.text = a.text;
    }
    acc.cost.target = a.target;
    acc.cost.shape = a.shape;
    acc.cost.core = a.core;
    acc.cost.cluster.phase = a.phase;
    acc.cost.cluster.batch = a.batch;
    acc.cost.cluster.context = a.context;
    acc.max_tokens = a.max_tokens;
    if (!a.target.empty()) {
      ctx.costs().target(a.target);  // unknown names throw here, listing the closest ones
      ctx.costs().shape(a.shape);
      if (!a.core.empty()) core::load_core(a.core, ctx.formats_dirs);  // as is an unknown core
    }
    acc.tools = &ctx.toolbox();
    acc.on_progress = a.progress;
    req.accuracy = std::move(acc);
  }
  req.out = a.out;
  req.force = a.force;
  req.seed = a.seed;
  ProposalResult r;
  r.files = experiment::write_proposal(req);
  r.format = req.block ? req.block->name : req.format.name;
  r.datapath = req.datapath ? req.datapath->name : "";
  r.out = req.out;
  return r;
}

Fields fields(const ProposalResult& r) {
  Fields files = Fields::array();
  for (const auto& f : r.files) files.push_back(fs::relative(f, r.out).generic_string());
  return {{"format", r.format}, {"datapath", r.datapath}, {"out", r.out.string()}, {"files", files}};
}

ProposalRequest proposal_request(const Fields& f) {
  ProposalRequest r;
  FieldReader in(f, "proposal");
  in.read("format", r.format);
  in.read("out", r.out);
  in.read("force", r.force);
  in.read("seed", r.seed);
  in.read("datapath", r.datapath);
  in.read("model", r.model);
  in.read("text", r.text);
  in.read("target", r.target);
  in.read("core", r.core);
  in.read("shape", r.shape);
  in.read("phase", r.phase);
  in.read("batch", r.batch);
  in.read("context", r.context);
  in.read("max_tokens", r.max_tokens);
  in.finish();
  if (r.batch < 1) throw SpecError("proposal: batch = " + std::to_string(r.batch) + ": expected >= 1");
  if (r.context < 1) throw SpecError("proposal: context = " + std::to_string(r.context) + ": expected >= 1");
  if (r.max_tokens < 0)
    throw SpecError("proposal: max_tokens = " + std::to_string(r.max_tokens) + ": expected >= 0");
  return r;
}

experiment::VerifyReport verify(experiment::Context& /*ctx*/, const VerifyRequest& a) {
  return experiment::verify_proposal(a.dir, a.results);
}

Fields fields(const experiment::VerifyReport& r) {
  Fields per_file = Fields::object();
  for (const auto& [file, counts] : r.per_file)
    per_file[file] = {{"checked", counts.first}, {"missing", counts.second}};
  return {{"ok", r.ok()},
          {"checked", r.checked},
          {"missing", r.missing},
          {"per_file", per_file},
          {"problems", r.problems}};
}

VerifyRequest verify_request(const Fields& f) {
  VerifyRequest r;
  FieldReader in(f, "proposal verify");
  in.read("dir", r.dir);
  in.read("results", r.results);
  in.finish();
  if (r.dir.empty() || r.results.empty())
    throw SpecError("proposal verify: dir (a proposal directory) and results (a CSV file) are required");
  return r;
}

}  // namespace lpemu::app
