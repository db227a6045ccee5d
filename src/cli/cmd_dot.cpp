// `lpemu dot`, `lpemu datapath-error`, `lpemu datapath list|show`: parse, call
// lpemu/app/datapath.hpp, print (CSV, tables, records, or --json).
#include <iostream>

#include "cli/commands.hpp"
#include "lpemu/app/datapath.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/datapath_error.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::cli {
namespace {

struct DotArgs {
  app::DotRequest req;
  bool json = false;
};

void run_dot(Context& ctx, const DotArgs& a) {
  ctx.apply_threads();
  const app::DotResult r = app::dot(ctx, a.req);
  if (a.json) {
    print_json(app::fields(r));
  } else {
    if (r.out.empty()) std::cout << app::dot_csv(r);
    if (!r.out.empty()) std::cout << "wrote " << r.rows.size() << " results to " << r.out << "\n";
    if (r.expected)
      std::cout << r.rows.size() - r.mismatches << " of " << r.rows.size()
                << " results match expected_result\n";
  }
  if (r.mismatches != 0)
    throw Error(r.cases + ": " + std::to_string(r.mismatches) + " results differ from expected_result");
}

struct ErrorArgs {
  app::DatapathErrorRequest req;
  bool json = false;
};

void run_error(Context& ctx, const ErrorArgs& a) {
  ctx.apply_threads();
  const app::DatapathErrorReport r = app::datapath_error(ctx, a.req);
  if (a.json) {
    print_json(app::fields(r));
    return;
  }
  std::cout << experiment::datapath_error_table(r.result);
  for (const auto& file : r.files) std::cout << "wrote " << file.string() << "\n";
}

}  // namespace

void register_datapath(CLI::App& app, Context& ctx) {
  static DotArgs dot_args;
  app::DotRequest& dr = dot_args.req;
  auto* dot = app.add_subcommand("dot", "bit-exact dot products d = c + sum a_i*b_i under a datapath");
  dot->add_option("--datapath", dr.datapath, "datapath name (see `lpemu datapath list`)")->required();
  dot->add_option(
         "--cases", dr.cases,
         "CSV with columns a, b (hex codes separated by ';' or spaces), c (hex); optional scale_a, "
         "scale_b (per-block scales), row, expected_result: the dot.csv of `lpemu proposal` reads as is")
      ->required()
      ->check(CLI::ExistingFile);
  dot->add_option("--inputs", dr.inputs, "override the datapath's input format (a and b)");
  dot->add_option("--out", dr.out, "output CSV (default: standard output)");
  dot->add_flag("--force", dr.force, "replace --out if it exists (never the --cases file)");
  dot->add_flag("--json", dot_args.json, "print the results as JSON instead of CSV and counts");
  dot->callback([&ctx] { run_dot(ctx, dot_args); });

  static ErrorArgs error_args;
  app::DatapathErrorRequest& er = error_args.req;
  auto* err = app.add_subcommand("datapath-error",
                                 "relative error of datapaths versus K against the exact dot product");
  err->add_option("--datapath", er.datapath, "comma-separated datapath names")
      ->capture_default_str()
      ->delimiter(',')
      ->transform([](const std::string& name) { return io::trim(name); });
  err->add_option("--k", er.k, "comma-separated dot-product lengths")
      ->capture_default_str()
      ->delimiter(',')
      ->transform([](const std::string& k) { return io::trim(k); })
      ->check(in_range(1, static_cast<long long>(experiment::kMaxDatapathErrorK)));
  err->add_option("--dist", er.dist, "normal | uniform | lognormal")->capture_default_str();
  err->add_option("--trials", er.trials, "random dot products per K")
      ->capture_default_str()
      ->check(in_range(1, experiment::kMaxDatapathErrorTrials));
  err->add_option("--seed", er.seed, "random seed")->capture_default_str()->check(seed_value());
  err->add_option("--inputs", er.inputs, "override the input format of every datapath");
  err->add_option("--out", er.out, "directory for datapath_error.csv and datapath_error.svg");
  err->add_flag("--json", error_args.json, "print JSON instead of a table");
  err->callback([&ctx] { run_error(ctx, error_args); });

  auto* dpc = app.add_subcommand("datapath", "list or show datapaths");
  dpc->require_subcommand(1);
  static bool list_json = false;
  auto* list = dpc->add_subcommand("list", "list datapaths");
  list->add_flag("--json", list_json, "print JSON instead of a list");
  list->callback([&ctx] {
    const app::DatapathListResult r = app::datapath_list(ctx, {});
    if (list_json) {
      print_json(app::fields(r));
      return;
    }
    for (const auto& [name, summary] : r.datapaths) std::cout << name << "  " << summary << "\n";
  });
  static app::DatapathShowRequest show_req;
  static bool show_json = false;
  auto* show = dpc->add_subcommand("show", "show one datapath");
  show->add_option("name", show_req.name, "datapath name")->required();
  show->add_flag("--json", show_json, "print JSON instead of the record");
  show->callback([&ctx] {
    const app::DatapathShowResult d = app::datapath_show(ctx, show_req);
    if (show_json) {
      print_json(app::fields(d));
      return;
    }
    std::cout << "name:        " << d.name << "\n"
              << "defined in:  " << d.origin << "\n"
              << "description: " << d.description << "\n"
              << "source:      " << d.source << "\n"
              << "summary:     " << d.summary << "\n";
    for (const auto& o : d.open) std::cout << "open:        " << o << "\n";
  });
}

}  // namespace lpemu::cli
