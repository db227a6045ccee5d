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
#include "lpemu/datapath/exact.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/experiment/datapath_error.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/io/text.hpp"

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

std::string hex(std::uint64_t v) { return io::format_hex(v, 1, false); }

// One hex code of format f from a CSV field; errors name file:row, the column and the value.
std::uint64_t parse_hex(const std::string& text, const format::Format& f, const std::string& where,
                        const std::string& column) {
  std::string t = trim(text);
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) t = t.substr(2);
  std::uint64_t v = 0;
  bool ok = !t.empty() && t.size() <= 16;
  for (const char ch : t) {
    int d = -1;
    if (ch >= '0' && ch <= '9') d = ch - '0';
    else if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
    else if (ch >= 'A' && ch <= 'F') d = ch - 'A' + 10;
    if (d < 0) ok = false;
    else v = (v << 4) | static_cast<std::uint64_t>(d);
  }
  if (!ok) {
    throw Error(where + ": column '" + column + "' = '" + text + "': expected hex codes of " + f.name);
  }
  if ((v & ~f.code_mask()) != 0) {
    throw Error(where + ": column '" + column + "' = '" + text + "': code wider than format '" + f.name + "' (" +
                std::to_string(f.bits) + " bits)");
  }
  return v;
}

// Codes in one CSV field, separated by ';' or spaces (as `lpemu proposal` writes dot.csv).
std::vector<std::string> code_fields(const std::string& field) {
  std::string t = field;
  std::replace(t.begin(), t.end(), ';', ' ');
  std::vector<std::string> out;
  std::istringstream in(t);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

// Block scales of one row: decimal exponents (E8M0, as dot.csv holds them) or 0x-prefixed codes
// of the datapath's scale format, split into exponent and integer significand for datapath::dot.
void parse_scales(const std::string& field, const datapath::Datapath& dp, const std::string& where,
                  const std::string& column, std::vector<std::int32_t>& exps, std::vector<std::uint32_t>& sigs) {
  for (const auto& w : code_fields(field)) {
    if (!dp.scale) throw Error(where + ": column '" + column + "' = '" + w + "': datapath '" + dp.name + "' has no block scales");
    if (w.size() > 2 && w[0] == '0' && (w[1] == 'x' || w[1] == 'X')) {
      const double v = format::decode(*dp.scale, parse_hex(w, *dp.scale, where, column));
      if (std::isnan(v)) {
        exps.push_back(datapath::kNanScale);
        sigs.push_back(1);
      } else if (v == 0.0) {
        exps.push_back(0);
        sigs.push_back(0);
      } else {
        const int e = std::ilogb(v) - dp.scale->mantissa_bits;
        exps.push_back(e);
        sigs.push_back(static_cast<std::uint32_t>(std::ldexp(std::fabs(v), -e)));
      }
      continue;
    }
    if (w == "nan" || w == "NaN") {
      exps.push_back(datapath::kNanScale);
      sigs.push_back(1);
      continue;
    }
    std::size_t used = 0;
    long e = 0;
    try {
      e = std::stol(w, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != w.size() || e < -100000 || e > 100000) {
      throw Error(where + ": column '" + column + "' = '" + w + "': expected a decimal scale exponent, nan, or a 0x code of " +
                  dp.scale->name);
    }
    exps.push_back(static_cast<std::int32_t>(e));
    sigs.push_back(1);
  }
}

void run_dot(Context& ctx, const std::string& name, const std::string& inputs, const std::string& in_path,
             const std::string& out_path, bool force) {
  ctx.apply_threads();
  datapath::Datapath dp = ctx.datapaths().get(name);
  if (!inputs.empty()) dp.a = dp.b = ctx.formats().get(inputs);
  std::ifstream in = io::open_input(in_path);
  std::string line;
  if (!std::getline(in, line)) throw IoError(in_path + ": empty file: expected a header row with columns a,b,c");
  const auto header = split(trim(line), ',');
  std::map<std::string, std::size_t> col;
  for (std::size_t i = 0; i < header.size(); ++i) col[trim(header[i])] = i;
  for (const char* need : {"a", "b", "c"}) {
    if (col.find(need) == col.end()) {
      throw IoError(in_path + ":1: header has no column '" + need + "' (expected columns a,b,c)");
    }
  }
  const bool scaled = col.count("scale_a") != 0 || col.count("scale_b") != 0;
  const bool expected = col.count("expected_result") != 0;
  std::unique_ptr<io::AtomicFile> out_file;
  if (!out_path.empty()) out_file = std::make_unique<io::AtomicFile>(out_path, io::OutputPolicy{force, {in_path}});
  std::ostream& out = out_path.empty() ? std::cout : out_file->stream();
  out << "a,b,c," << (scaled ? "scale_a,scale_b," : "") << "d,d_value,exact" << (expected ? ",match" : "") << "\n";
  std::size_t row = 1;
  std::size_t cases = 0;
  std::size_t mismatches = 0;
  while (std::getline(in, line)) {
    ++row;
    if (trim(line).empty()) continue;
    const std::string where = in_path + ":" + std::to_string(row);
    const auto fields = split(line, ',');
    if (fields.size() != header.size()) {
      throw Error(where + ": " + std::to_string(fields.size()) + " fields, expected " +
                  std::to_string(header.size()) + " (one per header column)");
    }
    const auto field = [&](const char* c) { return col.count(c) != 0 ? trim(fields[col[c]]) : std::string(); };
    std::vector<std::uint64_t> a, b;
    for (const auto& s : code_fields(field("a"))) a.push_back(parse_hex(s, dp.a, where, "a"));
    for (const auto& s : code_fields(field("b"))) b.push_back(parse_hex(s, dp.b, where, "b"));
    if (a.size() != b.size()) {
      throw Error(where + ": column 'a' has " + std::to_string(a.size()) + " codes but 'b' has " +
                  std::to_string(b.size()));
    }
    const std::uint64_t c = parse_hex(field("c"), dp.output(), where, "c");
    std::vector<std::int32_t> ea, eb;
    std::vector<std::uint32_t> ma, mb;
    parse_scales(field("scale_a"), dp, where, "scale_a", ea, ma);
    parse_scales(field("scale_b"), dp, where, "scale_b", eb, mb);
    const auto all_one = [](const std::vector<std::uint32_t>& v) {
      return std::all_of(v.begin(), v.end(), [](std::uint32_t x) { return x == 1; });
    };
    if (all_one(ma)) ma.clear();
    if (all_one(mb)) mb.clear();
    const datapath::BlockScales scales{ea, eb, ma, mb};
    const std::uint64_t index = col.count("row") != 0 ? parse_code(field("row"), where + ": column 'row'") : cases;
    const std::uint64_t d = datapath::dot(dp, a, b, c, scales, index);
    const datapath::ExactValue ex = datapath::exact_dot(dp, a, b, c, scales);
    out << field("a") << ',' << field("b") << ',' << field("c") << ',';
    if (scaled) out << field("scale_a") << ',' << field("scale_b") << ',';
    out << hex(d) << ',' << format_real(format::decode(dp.output(), d)) << ',' << ex.to_string(25);
    if (expected) {
      const bool match = parse_hex(field("expected_result"), dp.output(), where, "expected_result") == d;
      mismatches += match ? 0 : 1;
      out << ',' << (match ? "yes" : "no");
    }
    out << '\n';
    ++cases;
  }
  if (out_file) out_file->commit();
  if (!out_path.empty()) std::cout << "wrote " << cases << " results to " << out_path << "\n";
  if (expected) {
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

void run_error(Context& ctx, const ErrorFlags& f) {
  ctx.apply_threads();
  experiment::DatapathErrorConfig c;
  for (const auto& n : split(f.datapaths, ',')) {
    datapath::Datapath dp = ctx.datapaths().get(trim(n));
    if (!f.inputs.empty()) dp.a = dp.b = ctx.formats().get(f.inputs);
    c.datapaths.push_back(std::move(dp));
  }
  c.ks.clear();
  for (const auto& s : split(f.ks, ',')) c.ks.push_back(static_cast<std::size_t>(parse_code(trim(s), "--k")));
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
