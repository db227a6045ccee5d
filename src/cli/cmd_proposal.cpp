// `lpemu proposal FORMAT[.toml] --out DIR` and `lpemu proposal verify DIR --results FILE.csv`.
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/proposal.hpp"

namespace lpemu::cli {
namespace {

struct ProposalArgs {
  std::string format;
  std::string out;
  bool force = false;
  std::uint64_t seed = 1;
  std::string verify_dir;
  std::string results;
  std::size_t show = 20;
};

void run_proposal(Context& ctx, const ProposalArgs& a) {
  if (a.format.empty()) throw Error("proposal: give a FORMAT name or .toml file (or use `proposal verify`)");
  if (a.out.empty()) throw Error("proposal: --out DIR is required");
  experiment::ProposalRequest req;
  const std::filesystem::path p(a.format);
  if (p.extension() == ".toml") {
    std::ifstream in(p, std::ios::binary);
    if (!in) throw IoError(a.format + ": cannot open format file");
    std::ostringstream s;
    s << in.rdbuf();
    req.format_toml = s.str();
    req.format = format::parse_format_toml(req.format_toml, a.format);
  } else {
    req.format = ctx.formats().get(a.format);
  }
  req.out = a.out;
  req.force = a.force;
  req.seed = a.seed;
  const auto files = experiment::write_proposal(req);
  std::cout << "lpemu: proposal for '" << req.format.name << "' written to " << std::filesystem::absolute(req.out).string()
            << "\n";
  for (const auto& f : files) std::cout << "  " << f.filename().string() << "\n";
}

int run_verify(const ProposalArgs& a) {
  const auto rep = experiment::verify_proposal(a.verify_dir, a.results);
  std::cout << "checked " << rep.checked << " rows; " << rep.problems.size() << " problems; " << rep.missing
            << " vector rows without a result\n";
  for (std::size_t i = 0; i < rep.problems.size() && i < a.show; ++i) std::cout << "  " << rep.problems[i] << "\n";
  if (rep.problems.size() > a.show) std::cout << "  ... " << rep.problems.size() - a.show << " more\n";
  return rep.ok() ? 0 : 1;
}

}  // namespace

void register_proposal(CLI::App& app, Context& ctx) {
  static ProposalArgs args;
  auto* sub = app.add_subcommand("proposal", "write a format proposal package a hardware team can verify against");
  sub->add_option("FORMAT", args.format, "format name or path to a format .toml file");
  sub->add_option("--out", args.out, "output directory");
  sub->add_flag("--force", args.force, "replace the files of an existing package");
  sub->add_option("--seed", args.seed, "seed of the random part of the vectors")->capture_default_str();
  auto* ver = sub->add_subcommand("verify", "compare a vendor's results CSV (file,row,code) with a package");
  ver->add_option("DIR", args.verify_dir, "proposal directory")->required();
  ver->add_option("--results", args.results, "results CSV with columns file,row,code (hex)")->required();
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
