// `lpemu dot`, `lpemu datapath-error`, `lpemu datapath list|show`: thin wrappers over
// lpemu::datapath.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/commands.hpp"
#include "lpemu/datapath/dot.hpp"
#include "lpemu/datapath/dot_cases.hpp"
#include "lpemu/datapath/exact.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/datapath_error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::cli {
namespace {

std::string hex(std::uint64_t v) { return io::format_hex(v, 1, false); }

struct DotArgs {
  std::string datapath, cases, inputs, out;
  bool force = false;
};

void run_dot(Context& ctx, const DotArgs& a) {
  ctx.apply_threads();
  const std::string& in_path = a.cases;
  const std::string& out_path = a.out;
  datapath::Datapath dp = ctx.datapaths().get(a.datapath);
  if (!a.inputs.empty()) dp.a = dp.b = ctx.formats().get(a.inputs);
  std::ifstream in = io::open_input(in_path);
  std::unique_ptr<io::AtomicFile> out_file;
  if (!out_path.empty())
    out_file = std::make_unique<io::AtomicFile>(out_path, io::OutputPolicy{a.force, {in_path}});
  std::ostream& out = out_path.empty() ? std::cout : out_file->stream();
  std::size_t cases = 0;
  std::size_t mismatches = 0;
  datapath::DotCaseColumns cols;
  // The case file is parsed by datapath::read_dot_cases (every code checked against its format).
  datapath::read_dot_cases(
      in, in_path, dp,
      [&](const datapath::DotCaseColumns& c) {
        cols = c;
        out << "a,b,c," << (c.scaled ? "scale_a,scale_b," : "") << "d,d_value,exact"
            << (c.expected ? ",match" : "") << "\n";
      },
      [&](const datapath::DotCase& k) {
        const datapath::BlockScales scales = k.scales();
        const std::uint64_t d = datapath::dot(dp, k.a, k.b, k.c, scales, k.row.value_or(cases));
        const datapath::ExactValue ex = datapath::exact_dot(dp, k.a, k.b, k.c, scales);
        out << k.a_text << ',' << k.b_text << ',' << k.c_text << ',';
        if (cols.scaled) out << k.scale_a_text << ',' << k.scale_b_text << ',';
        out << hex(d) << ',' << format_real(format::decode(dp.output(), d)) << ',' << ex.to_string(25);
        if (k.expected) {
          const bool match = *k.expected == d;
          mismatches += match ? 0 : 1;
          out << ',' << (match ? "yes" : "no");
        }
        out << '\n';
        ++cases;
      });
  if (out_file) out_file->commit();
  if (!out_path.empty()) std::cout << "wrote " << cases << " results to " << out_path << "\n";
  if (cols.expected) {
    std::cout << cases - mismatches << " of " << cases << " results match expected_result\n";
    if (mismatches != 0)
      throw Error(in_path + ": " + std::to_string(mismatches) + " results differ from expected_result");
  }
}

struct ErrorArgs {
  std::vector<std::string> datapaths{"h100_e4m3_fp32", "h100_e4m3_fp32_promote128", "ideal"};
  std::vector<std::size_t> ks{16, 64, 256, 1024, 4096};
  std::string dist = "normal";
  std::string inputs;
  int trials = 100;
  std::uint64_t seed = 1;
  std::string out_dir;
};

void run_error(Context& ctx, const ErrorArgs& f) {
  ctx.apply_threads();
  experiment::DatapathErrorConfig c;
  for (const auto& n : f.datapaths) {
    datapath::Datapath dp = ctx.datapaths().get(n);
    if (!f.inputs.empty()) dp.a = dp.b = ctx.formats().get(f.inputs);
    c.datapaths.push_back(std::move(dp));
  }
  c.ks = f.ks;
  c.dist = f.dist;
  c.trials = f.trials;
  c.seed = f.seed;
  const experiment::DatapathErrorResult r = experiment::datapath_error(c);
  std::cout << experiment::datapath_error_table(r);
  if (!f.out_dir.empty()) {
    for (const auto& file : experiment::write_datapath_error_files(f.out_dir, r)) {
      std::cout << "wrote " << file.string() << "\n";
    }
  }
}

void show_datapath(Context& ctx, const std::string& name) {
  const auto& reg = ctx.datapaths();
  const datapath::Datapath& d = reg.get(name);
  std::cout << "name:        " << d.name << "\n"
            << "defined in:  " << reg.origin(name) << "\n"
            << "description: " << d.description << "\n"
            << "source:      " << d.source << "\n"
            << "summary:     " << d.summary() << "\n";
  for (const auto& o : d.open) std::cout << "open:        " << o << "\n";
}

}  // namespace

void register_datapath(CLI::App& app, Context& ctx) {
  static DotArgs dot_args;
  auto* dot = app.add_subcommand("dot", "bit-exact dot products d = c + sum a_i*b_i under a datapath");
  dot->add_option("--datapath", dot_args.datapath, "datapath name (see `lpemu datapath list`)")->required();
  dot->add_option(
         "--cases", dot_args.cases,
         "CSV with columns a, b (hex codes separated by ';' or spaces), c (hex); optional scale_a, "
         "scale_b (per-block scales), row, expected_result: the dot.csv of `lpemu proposal` reads as is")
      ->required()
      ->check(CLI::ExistingFile);
  dot->add_option("--inputs", dot_args.inputs, "override the datapath's input format (a and b)");
  dot->add_option("--out", dot_args.out, "output CSV (default: standard output)");
  dot->add_flag("--force", dot_args.force, "replace --out if it exists (never the --cases file)");
  dot->callback([&ctx] { run_dot(ctx, dot_args); });

  static ErrorArgs error_args;
  auto* err = app.add_subcommand("datapath-error",
                                 "relative error of datapaths versus K against the exact dot product");
  err->add_option("--datapath", error_args.datapaths, "comma-separated datapath names")
      ->capture_default_str()
      ->delimiter(',')
      ->transform([](const std::string& name) { return io::trim(name); });
  err->add_option("--k", error_args.ks, "comma-separated dot-product lengths")
      ->capture_default_str()
      ->delimiter(',')
      ->transform([](const std::string& k) { return io::trim(k); })
      ->check(at_least(1));
  err->add_option("--dist", error_args.dist, "normal | uniform | lognormal")->capture_default_str();
  err->add_option("--trials", error_args.trials, "random dot products per K")
      ->capture_default_str()
      ->check(at_least(1));
  err->add_option("--seed", error_args.seed, "random seed")->capture_default_str();
  err->add_option("--inputs", error_args.inputs, "override the input format of every datapath");
  err->add_option("--out", error_args.out_dir, "directory for datapath_error.csv and datapath_error.svg");
  err->callback([&ctx] { run_error(ctx, error_args); });

  auto* dpc = app.add_subcommand("datapath", "list or show datapaths");
  dpc->require_subcommand(1);
  auto* list = dpc->add_subcommand("list", "list datapaths");
  list->callback([&ctx] {
    const auto& reg = ctx.datapaths();
    for (const auto& n : reg.names()) std::cout << n << "  " << reg.get(n).summary() << "\n";
  });
  static std::string show_name;
  auto* show = dpc->add_subcommand("show", "show one datapath");
  show->add_option("name", show_name, "datapath name")->required();
  show->callback([&ctx] { show_datapath(ctx, show_name); });
}

}  // namespace lpemu::cli
