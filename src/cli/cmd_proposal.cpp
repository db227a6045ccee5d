// `lpemu proposal FORMAT[.toml] [--datapath D] [--model M] --out DIR` and
// `lpemu proposal verify DIR --results FILE.csv`.
#include <iostream>

#include "cli/commands.hpp"
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

void run_proposal(Context& ctx, const ProposalArgs& a) {
  if (a.format.empty()) throw Error("proposal: give a FORMAT name or .toml file (or use `proposal verify`)");
  if (a.out.empty()) throw Error("proposal: --out DIR is required");
  ctx.apply_threads();
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
        throw Error("proposal: --model " + a.model + " has no paragraph.txt beside " + model_file.string() +
                    "; give --text FILE");
      }
    } else {
      acc.text = a.text;
    }
    acc.cost.target = a.target;
    acc.cost.shape = a.shape;
    acc.cost.cluster.phase = a.phase;
    acc.cost.cluster.batch = a.batch;
    acc.cost.cluster.context = a.context;
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
    std::cout << "  " << file << ": " << counts.first << " checked, " << counts.second
              << " without a result\n";
  }
  for (std::size_t i = 0; i < rep.problems.size() && i < a.show; ++i)
    std::cout << "  " << rep.problems[i] << "\n";
  if (rep.problems.size() > a.show) std::cout << "  ... " << rep.problems.size() - a.show << " more\n";
  return rep.ok() ? 0 : 1;
}

}  // namespace

void register_proposal(CLI::App& app, Context& ctx) {
  static ProposalArgs args;
  auto* sub =
      app.add_subcommand("proposal", "write a format proposal package a hardware team can verify against");
  sub->add_option("FORMAT", args.format, "element or block format: a name or a .toml file");
  sub->add_option("--out", args.out, "output directory");
  sub->add_flag("--force", args.force, "replace the files of an existing package");
  sub->add_option("--seed", args.seed, "seed of the random part of the vectors")->capture_default_str();
  sub->add_option(
      "--datapath", args.datapath,
      "datapath name or .toml: dot-product vectors (inputs replaced by the proposed element format)");
  sub->add_option("--model", args.model,
                  "model name or path: accuracy and cost vs bf16 and mxfp8 in summary.md");
  sub->add_option("--text", args.text, "text to score (default: paragraph.txt beside the model)")
      ->check(CLI::ExistingFile);
  sub->add_option("--target", args.target, "cost-model hardware target (\"\" for none)")
      ->capture_default_str();
  sub->add_option("--shape", args.shape, "cost-model model shape")->capture_default_str();
  sub->add_option("--phase", args.phase, "decode | prefill")
      ->capture_default_str()
      ->check(CLI::IsMember({"decode", "prefill"}));
  sub->add_option("--batch", args.batch, "cost-model batch")->capture_default_str()->check(at_least(1));
  sub->add_option("--context", args.context, "cost-model context length")
      ->capture_default_str()
      ->check(at_least(1));
  sub->add_option("--max-tokens", args.max_tokens, "score at most this many tokens (0: all)")
      ->capture_default_str()
      ->check(at_least(0));
  auto* ver = sub->add_subcommand(
      "verify", "compare a vendor's results CSV (file,row,code|scales|packed|decoded|result)");
  ver->add_option("DIR", args.verify_dir, "proposal directory")->required()->check(CLI::ExistingDirectory);
  ver->add_option("--results", args.results, "results CSV: file,row and the fields computed (hex)")
      ->required()
      ->check(CLI::ExistingFile);
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
