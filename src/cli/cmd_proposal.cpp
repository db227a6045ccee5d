// `lpemu proposal FORMAT[.toml] [--datapath D] [--model M] --out DIR` and
// `lpemu proposal verify DIR --results FILE.csv` (issue 8).
#include <iostream>


#include "cli/commands.hpp"
#include "io/toml_util.hpp"
#include "lpemu/detail/embedded.hpp"
#include "lpemu/detail/named_registry.hpp"
#include "lpemu/engine/model.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/proposal.hpp"

namespace lpemu::cli {
namespace {

namespace fs = std::filesystem;

struct ProposalArgs {
  std::string format;
  std::string out;
  bool force = false;
  std::uint64_t seed = 1;
  std::string datapath;
  std::string model;
  std::string text;
  std::string target = "h100_sxm";
  std::string shape = "llama3_8b";
  std::string phase = "decode";
  long long batch = 8;
  long long context = 4096;
  int max_tokens = 0;
  std::string verify_dir;
  std::string results;
  std::size_t show = 20;
};

using lpemu::detail::spec_text;

bool is_toml_path(const std::string& s) { return fs::path(s).extension() == ".toml"; }

void run_proposal(Context& ctx, const ProposalArgs& a) {
  if (a.format.empty()) throw Error("proposal: give a FORMAT name or .toml file (or use `proposal verify`)");
  if (a.out.empty()) throw Error("proposal: --out DIR is required");
  ctx.apply_threads();
  experiment::ProposalRequest req;
  const bool want_model = !a.model.empty();
  // The proposed format: an element or block format, by name or file.
  if (is_toml_path(a.format)) {
    req.format_toml = lpemu::detail::read_spec_file(a.format, "format");
    const toml::table t = io::detail::parse(req.format_toml, a.format);
    if (t.contains("element")) {
      req.block = block::parse_block_format_toml(req.format_toml, a.format, ctx.formats());
      if (want_model && ctx.blocks().find(req.block->name) == nullptr) ctx.add_block(*req.block, a.format);
    } else {
      req.format = format::parse_format_toml(req.format_toml, a.format);
      if (want_model && ctx.formats().find(req.format.name) == nullptr) ctx.add_format(req.format, a.format);
    }
  } else if (const block::BlockFormat* b = ctx.blocks().find(a.format)) {
    req.block = *b;
    req.format_toml = spec_text(ctx.blocks().origin(b->name));
  } else if (ctx.formats().find(a.format) == nullptr) {
    std::vector<std::string> known = ctx.formats().names();
    for (const auto& n : ctx.blocks().names()) known.push_back(n);
    std::string hint;
    for (const auto& n : format::closest_names(a.format, known)) hint += (hint.empty() ? "" : ", ") + n;
    throw UnknownNameError("unknown element or block format '" + a.format + "'; closest: " + hint +
                           " (see `lpemu formats list`)");
  } else {
    req.format = ctx.formats().get(a.format);
    req.format_toml = spec_text(ctx.formats().origin(req.format.name));
  }
  if (req.block) {
    req.format = req.block->element;
    if (const format::Format* e = ctx.formats().find(req.format.name)) {
      req.element_toml = spec_text(ctx.formats().origin(e->name));
    }
  }
  // The datapath, with its inputs replaced by the proposed element format where they differ.
  if (!a.datapath.empty()) {
    datapath::Datapath dp;
    std::string text;
    std::string origin;
    if (is_toml_path(a.datapath)) {
      text = lpemu::detail::read_spec_file(a.datapath, "datapath");
      origin = a.datapath;
      dp = datapath::parse_datapath_toml(text, origin, ctx.formats());
    } else {
      dp = ctx.datapaths().get(a.datapath);
      origin = ctx.datapaths().origin(dp.name);
      text = spec_text(origin);
    }
    req.datapath = experiment::retarget_datapath(dp, req.format);
    req.datapath_toml = req.datapath->name == dp.name || text.empty()
                            ? text
                            : experiment::retarget_datapath_toml(text, origin, *req.datapath);
    if (want_model && ctx.datapaths().find(req.datapath->name) == nullptr) ctx.add_datapath(*req.datapath, origin);
  }
  if (want_model) {
    experiment::AccuracyRequest acc;
    if (req.block) {
      acc.formats = {req.block->name};
    } else {
      // The element format alone, and with one FP32 scale per tensor (most formats need one).
      acc.formats = {req.format.name};
      const std::string scaled = req.format.name + "_per_tensor";
      if (ctx.blocks().find(scaled) == nullptr) {
        block::BlockFormat pt = ctx.blocks().get("fp8_e4m3_per_tensor");
        pt.name = scaled;
        pt.aliases.clear();
        pt.element = req.format;
        pt.description = req.format.name + " elements with one FP32 scale per tensor (amax / max), written by proposal";
        pt.validate();
        ctx.add_block(std::move(pt), "proposal");
      }
      acc.formats.push_back(scaled);
    }
    acc.gemm = req.datapath ? req.datapath->name : "";
    acc.model = a.model;
    // Everything the accuracy run needs is checked before a file is written.
    const fs::path model_file = engine::resolve_model_path(a.model, ctx.data_dirs);
    if (a.text.empty()) {
      acc.text = model_file.parent_path() / "paragraph.txt";
      if (!fs::exists(acc.text)) {
        throw Error("proposal: --model " + a.model + " has no paragraph.txt beside " + model_file.string() +
                    "; give --text FILE");
      }
    } else {
      acc.text = a.text;
      if (!fs::is_regular_file(acc.text)) throw IoError("proposal: --text " + a.text + ": no such file");
    }
    if (a.phase != "decode" && a.phase != "prefill") {
      throw Error("proposal: --phase '" + a.phase + "': expected decode or prefill");
    }
    if (a.batch < 1 || a.context < 1) throw Error("proposal: --batch and --context must be at least 1");
    acc.cost.target = a.target;
    acc.cost.shape = a.shape;
    acc.cost.phase = a.phase;
    acc.cost.batch = a.batch;
    acc.cost.context = a.context;
    acc.max_tokens = a.max_tokens;
    if (!a.target.empty()) {
      ctx.costs().target(a.target);  // unknown names throw here, listing the closest ones
      ctx.costs().shape(a.shape);
    }
    acc.tools = &ctx.toolbox();
    acc.on_progress = [](const std::string& line) { std::cerr << "lpemu: accuracy" << line << "\n"; };
    req.accuracy = std::move(acc);
  }
  req.out = a.out;
  req.force = a.force;
  req.seed = a.seed;
  const auto files = experiment::write_proposal(req);
  std::cout << "lpemu: proposal for '" << (req.block ? req.block->name : req.format.name) << "'"
            << (req.datapath ? " on " + req.datapath->name : std::string()) << " written to "
            << fs::absolute(req.out).string() << "\n";
  for (const auto& f : files) std::cout << "  " << fs::relative(f, req.out).generic_string() << "\n";
}

int run_verify(const ProposalArgs& a) {
  const auto rep = experiment::verify_proposal(a.verify_dir, a.results);
  std::cout << "checked " << rep.checked << " rows; " << rep.problems.size() << " problems; " << rep.missing
            << " vector rows without a result\n";
  for (const auto& [file, counts] : rep.per_file) {
    std::cout << "  " << file << ": " << counts.first << " checked, " << counts.second << " without a result\n";
  }
  for (std::size_t i = 0; i < rep.problems.size() && i < a.show; ++i) std::cout << "  " << rep.problems[i] << "\n";
  if (rep.problems.size() > a.show) std::cout << "  ... " << rep.problems.size() - a.show << " more\n";
  return rep.ok() ? 0 : 1;
}

}  // namespace

void register_proposal(CLI::App& app, Context& ctx) {
  static ProposalArgs args;
  auto* sub = app.add_subcommand("proposal", "write a format proposal package a hardware team can verify against");
  sub->add_option("FORMAT", args.format, "element or block format: a name or a .toml file");
  sub->add_option("--out", args.out, "output directory");
  sub->add_flag("--force", args.force, "replace the files of an existing package");
  sub->add_option("--seed", args.seed, "seed of the random part of the vectors")->capture_default_str();
  sub->add_option("--datapath", args.datapath,
                  "datapath name or .toml: dot-product vectors (inputs replaced by the proposed element format)");
  sub->add_option("--model", args.model, "model name or path: accuracy and cost vs bf16 and mxfp8 in summary.md");
  sub->add_option("--text", args.text, "text to score (default: paragraph.txt beside the model)");
  sub->add_option("--target", args.target, "cost-model hardware target (\"\" for none)")->capture_default_str();
  sub->add_option("--shape", args.shape, "cost-model model shape")->capture_default_str();
  sub->add_option("--phase", args.phase, "decode | prefill")->capture_default_str();
  sub->add_option("--batch", args.batch, "cost-model batch")->capture_default_str();
  sub->add_option("--context", args.context, "cost-model context length")->capture_default_str();
  sub->add_option("--max-tokens", args.max_tokens, "score at most this many tokens (0: all)")->capture_default_str();
  auto* ver = sub->add_subcommand("verify", "compare a vendor's results CSV (file,row,code|scales|packed|decoded|result)");
  ver->add_option("DIR", args.verify_dir, "proposal directory")->required();
  ver->add_option("--results", args.results, "results CSV: file,row and the fields computed (hex)")->required();
  ver->add_option("--show", args.show, "problems to print")->capture_default_str();
  ver->callback([] {
    const int rc = run_verify(args);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
  sub->callback([&ctx, sub, ver] {
    if (sub->got_subcommand(ver)) return;
    run_proposal(ctx, args);
  });
}

}  // namespace lpemu::cli
