// `lpemu dot`, `lpemu datapath-error`, `lpemu datapath list|show`: thin wrappers over
// lpemu::datapath (issue 4).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

#include <tbb/parallel_for.h>

#include "cli/commands.hpp"
#include "lpemu/datapath/dot.hpp"
#include "lpemu/datapath/dot_cases.hpp"
#include "lpemu/datapath/exact.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/experiment/figures.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/io/svg_plot.hpp"

namespace lpemu::cli {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(v));
  return buf;
}

void run_dot(Context& ctx, const std::string& name, const std::string& inputs, const std::string& in_path,
             const std::string& out_path, bool force) {
  ctx.apply_threads();
  datapath::Datapath dp = ctx.datapaths().get(name);
  if (!inputs.empty()) dp.a = dp.b = ctx.formats().get(inputs);
  std::ifstream in = io::open_input(in_path);
  std::unique_ptr<io::AtomicFile> out_file;
  if (!out_path.empty()) out_file = std::make_unique<io::AtomicFile>(out_path, io::OutputPolicy{force, {in_path}});
  std::ostream& out = out_path.empty() ? std::cout : out_file->stream();
  std::size_t cases = 0;
  std::size_t mismatches = 0;
  datapath::DotCaseColumns cols;
  // The case file is parsed by datapath::read_dot_cases (every code checked against its format).
  datapath::read_dot_cases(
      in, in_path, dp,
      [&](const datapath::DotCaseColumns& c) {
        cols = c;
        out << "a,b,c," << (c.scaled ? "scale_a,scale_b," : "") << "d,d_value,exact" << (c.expected ? ",match" : "")
            << "\n";
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
    if (mismatches != 0) throw Error(in_path + ": " + std::to_string(mismatches) + " results differ from expected_result");
  }
}

struct ErrorFlags {
  std::string datapaths = "h100_e4m3_fp32,h100_e4m3_fp32_promote128,ideal";
  std::string ks = "16,64,256,1024,4096";
  std::string dist = "normal";
  std::string inputs;
  int trials = 100;
  std::uint64_t seed = 1;
  std::string out_dir;
};

double draw(std::mt19937_64& rng, const std::string& dist) {
  if (dist == "uniform") return std::uniform_real_distribution<double>(-1.0, 1.0)(rng);
  if (dist == "lognormal") {
    const double m = std::lognormal_distribution<double>(0.0, 1.0)(rng);
    return (rng() & 1) != 0 ? -m : m;
  }
  return std::normal_distribution<double>(0.0, 1.0)(rng);
}

void run_error(Context& ctx, const ErrorFlags& f) {
  ctx.apply_threads();
  if (f.dist != "normal" && f.dist != "uniform" && f.dist != "lognormal") {
    throw Error("--dist '" + f.dist + "': expected normal, uniform or lognormal");
  }
  if (f.trials < 1) throw Error("--trials " + std::to_string(f.trials) + ": expected a positive count");
  std::vector<datapath::Datapath> dps;
  for (const auto& n : split(f.datapaths, ',')) {
    datapath::Datapath dp = ctx.datapaths().get(trim(n));
    if (!f.inputs.empty()) dp.a = dp.b = ctx.formats().get(f.inputs);
    if (dp.scale_application != datapath::ScaleApplication::none) {
      throw Error("datapath '" + dp.name + "' is block-scaled: datapath-error does not draw block scales yet");
    }
    dps.push_back(std::move(dp));
  }
  std::vector<std::size_t> ks;
  for (const auto& s : split(f.ks, ',')) ks.push_back(static_cast<std::size_t>(parse_code(trim(s), "--k")));
  // mean and max relative error per (datapath, K)
  std::vector<std::vector<double>> mean(dps.size(), std::vector<double>(ks.size()));
  std::vector<std::vector<double>> worst(dps.size(), std::vector<double>(ks.size()));
  for (std::size_t ki = 0; ki < ks.size(); ++ki) {
    const std::size_t k = ks[ki];
    std::vector<std::vector<double>> err(dps.size(), std::vector<double>(static_cast<std::size_t>(f.trials)));
    tbb::parallel_for(0, f.trials, [&](int t) {
      // Each trial's stream depends only on (seed, K, trial): thread count cannot change results.
      std::mt19937_64 rng(f.seed * 0x9E3779B97F4A7C15ULL + k * 1000003ULL + static_cast<std::uint64_t>(t));
      std::vector<double> x(k), y(k);
      for (std::size_t i = 0; i < k; ++i) x[i] = draw(rng, f.dist), y[i] = draw(rng, f.dist);
      for (std::size_t d = 0; d < dps.size(); ++d) {
        std::vector<std::uint64_t> a(k), b(k);
        for (std::size_t i = 0; i < k; ++i) {
          a[i] = format::encode(dps[d].a, x[i]);
          b[i] = format::encode(dps[d].b, y[i]);
        }
        const std::uint64_t c0 = 0;
        const double got = format::decode(dps[d].output(), datapath::dot(dps[d], a, b, c0, {}, static_cast<std::uint64_t>(t)));
        const double ex = datapath::exact_dot(dps[d], a, b, c0).to_double();
        err[d][static_cast<std::size_t>(t)] = ex == 0.0 ? (got == 0.0 ? 0.0 : HUGE_VAL) : std::fabs(got - ex) / std::fabs(ex);
      }
    });
    for (std::size_t d = 0; d < dps.size(); ++d) {
      double s = 0, m = 0;
      for (const double e : err[d]) s += e, m = std::max(m, e);
      mean[d][ki] = s / f.trials;
      worst[d][ki] = m;
    }
  }
  std::printf("relative error |d - exact| / |exact|, %s inputs, %d trials, mean (max)\n", f.dist.c_str(), f.trials);
  std::printf("%-8s", "K");
  for (const auto& dp : dps) std::printf("  %-28s", dp.name.c_str());
  std::printf("\n");
  for (std::size_t ki = 0; ki < ks.size(); ++ki) {
    std::printf("%-8zu", ks[ki]);
    for (std::size_t d = 0; d < dps.size(); ++d) {
      char cell[64];
      std::snprintf(cell, sizeof cell, "%.3e (%.2e)", mean[d][ki], worst[d][ki]);
      std::printf("  %-28s", cell);
    }
    std::printf("\n");
  }
  if (!f.out_dir.empty()) {
    std::filesystem::create_directories(f.out_dir);
    const std::string csv = f.out_dir + "/datapath_error.csv";
    io::AtomicFile o_file(csv, io::OutputPolicy{true, {}});  // the --out folder is the command's own
    std::ostream& o = o_file.stream();
    o << "datapath,k,dist,trials,mean_rel_error,max_rel_error\n";
    for (std::size_t d = 0; d < dps.size(); ++d) {
      for (std::size_t ki = 0; ki < ks.size(); ++ki) {
        char line[256];
        std::snprintf(line, sizeof line, "%s,%zu,%s,%d,%.17g,%.17g\n", dps[d].name.c_str(), ks[ki], f.dist.c_str(),
                      f.trials, mean[d][ki], worst[d][ki]);
        o << line;
      }
    }
    const std::string svg = f.out_dir + "/datapath_error.svg";
    std::vector<std::string> names;
    for (const auto& dp : dps) names.push_back(dp.name);
    io::write_svg(svg, experiment::datapath_error_plot(names, ks, mean, f.dist));
    o_file.commit();
    std::cout << "wrote " << csv << "\nwrote " << svg << "\n";
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
  auto* dot = app.add_subcommand("dot", "bit-exact dot products d = c + sum a_i*b_i under a datapath");
  auto dot_name = std::make_shared<std::string>();
  auto dot_in = std::make_shared<std::string>();
  auto dot_out = std::make_shared<std::string>();
  auto dot_inputs = std::make_shared<std::string>();
  dot->add_option("--datapath", *dot_name, "datapath name (see `lpemu datapath list`)")->required();
  dot->add_option("--cases", *dot_in,
                  "CSV with columns a, b (hex codes separated by ';' or spaces), c (hex); optional scale_a, "
                  "scale_b (per-block scales), row, expected_result: the dot.csv of `lpemu proposal` reads as is")
      ->required();
  dot->add_option("--inputs", *dot_inputs, "override the datapath's input format (a and b)");
  auto dot_force = std::make_shared<bool>(false);
  dot->add_option("--out", *dot_out, "output CSV (default: standard output)");
  dot->add_flag("--force", *dot_force, "replace --out if it exists (never the --cases file)");
  dot->callback([&ctx, dot_name, dot_inputs, dot_in, dot_out, dot_force] {
    run_dot(ctx, *dot_name, *dot_inputs, *dot_in, *dot_out, *dot_force);
  });

  auto* err = app.add_subcommand("datapath-error", "relative error of datapaths versus K against the exact dot product");
  auto flags = std::make_shared<ErrorFlags>();
  err->add_option("--datapath", flags->datapaths, "comma-separated datapath names")->capture_default_str();
  err->add_option("--k", flags->ks, "comma-separated dot-product lengths")->capture_default_str();
  err->add_option("--dist", flags->dist, "normal | uniform | lognormal")->capture_default_str();
  err->add_option("--trials", flags->trials, "random dot products per K")->capture_default_str();
  err->add_option("--seed", flags->seed, "random seed")->capture_default_str();
  err->add_option("--inputs", flags->inputs, "override the input format of every datapath");
  err->add_option("--out", flags->out_dir, "directory for datapath_error.csv and datapath_error.svg");
  err->callback([&ctx, flags] { run_error(ctx, *flags); });

  auto* dpc = app.add_subcommand("datapath", "list or show datapaths");
  dpc->require_subcommand(1);
  auto* list = dpc->add_subcommand("list", "list datapaths");
  list->callback([&ctx] {
    const auto& reg = ctx.datapaths();
    for (const auto& n : reg.names()) std::cout << n << "  " << reg.get(n).summary() << "\n";
  });
  auto* show = dpc->add_subcommand("show", "show one datapath");
  auto show_name = std::make_shared<std::string>();
  show->add_option("name", *show_name, "datapath name")->required();
  show->callback([&ctx, show_name] { show_datapath(ctx, *show_name); });
}

}  // namespace lpemu::cli
