// `lpemu proposal FORMAT[.toml] [--datapath D] [--model M] --out DIR` and
// `lpemu proposal verify DIR --results FILE.csv`: parse, call lpemu/app/proposal.hpp, print.
#include <iostream>

#include "cli/commands.hpp"
#include "lpemu/app/proposal.hpp"

namespace lpemu::cli {
namespace {

namespace fs = std::filesystem;

struct ProposalArgs {
  app::ProposalRequest req;
  app::VerifyRequest verify;
  std::size_t show = 20;
  bool json = false, verify_json = false;
};

void run_proposal(Context& ctx, const ProposalArgs& a) {
  ctx.apply_threads();
  app::ProposalRequest req = a.req;
  req.progress = [](const std::string& line) { std::cerr << "lpemu: accuracy" << line << "\n"; };
  const app::ProposalResult r = app::proposal(ctx, req);
  if (a.json) {
    print_json(app::fields(r));
    return;
  }
  std::cout << "lpemu: proposal for '" << r.format << "'"
            << (r.datapath.empty() ? std::string() : " on " + r.datapath) << " written to "
            << fs::absolute(r.out).string() << "\n";
  for (const auto& f : r.files) std::cout << "  " << fs::relative(f, r.out).generic_string() << "\n";
}

int run_verify(Context& ctx, const ProposalArgs& a) {
  const experiment::VerifyReport rep = app::verify(ctx, a.verify);
  if (a.verify_json) {
    print_json(app::fields(rep));
    return rep.ok() ? 0 : 1;
  }
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
  app::ProposalRequest& r = args.req;
  auto* sub =
      app.add_subcommand("proposal", "write a format proposal package a hardware team can verify against");
  sub->add_option("FORMAT", r.format, "element or block format: a name or a .toml file");
  sub->add_option("--out", r.out, "output directory");
  sub->add_flag("--force", r.force, "replace the files of an existing package");
  sub->add_option("--seed", r.seed, "seed of the random part of the vectors")
      ->capture_default_str()
      ->check(seed_value());
  sub->add_option(
      "--datapath", r.datapath,
      "datapath name or .toml: dot-product vectors (inputs replaced by the proposed element format)");
  sub->add_option("--model", r.model,
                  "model name or path: accuracy and cost vs bf16 and mxfp8 in summary.md");
  sub->add_option("--text", r.text, "text to score (default: paragraph.txt beside the model)")
      ->check(CLI::ExistingFile);
  sub->add_option("--target", r.target, "cost-model hardware target (\"\" for none)")->capture_default_str();
  sub->add_option("--core", r.core, "also run the plans' GEMMs on this compute core (docs/core-model.md)");
  sub->add_option("--shape", r.shape, "cost-model model shape")->capture_default_str();
  sub->add_option("--phase", r.phase, "decode | prefill")
      ->capture_default_str()
      ->check(CLI::IsMember({"decode", "prefill"}));
  sub->add_option("--batch", r.batch, "cost-model batch")->capture_default_str()->check(at_least(1));
  sub->add_option("--context", r.context, "cost-model context length")
      ->capture_default_str()
      ->check(at_least(1));
  sub->add_option("--max-tokens", r.max_tokens, "score at most this many tokens (0: all)")
      ->capture_default_str()
      ->check(at_least(0));
  sub->add_flag("--json", args.json, "print JSON (the files written) instead of a list");
  auto* ver = sub->add_subcommand(
      "verify", "compare a vendor's results CSV (file,row,code|scales|packed|decoded|result)");
  ver->add_option("DIR", args.verify.dir, "proposal directory")->required()->check(CLI::ExistingDirectory);
  ver->add_option("--results", args.verify.results, "results CSV: file,row and the fields computed (hex)")
      ->required()
      ->check(CLI::ExistingFile);
  ver->add_option("--show", args.show, "problems to print")->capture_default_str();
  ver->add_flag("--json", args.verify_json, "print JSON (every problem) instead of a summary");
  ver->callback([&ctx] {
    const int rc = run_verify(ctx, args);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
  sub->callback([&ctx, sub, ver] {
    if (sub->got_subcommand(ver)) return;
    run_proposal(ctx, args);
  });
}

}  // namespace lpemu::cli
