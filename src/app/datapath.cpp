#include "lpemu/app/datapath.hpp"

#include <fstream>
#include <sstream>

#include "lpemu/datapath/dot.hpp"
#include "lpemu/datapath/dot_cases.hpp"
#include "lpemu/datapath/exact.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::app {
namespace {

std::string hex(std::uint64_t v) { return io::format_hex(v, 1, false); }

}  // namespace

DotResult dot(experiment::Context& ctx, const DotRequest& a) {
  datapath::Datapath dp = ctx.datapaths().get(a.datapath);
  if (!a.inputs.empty()) dp.a = dp.b = ctx.formats().get(a.inputs);
  std::ifstream in = io::open_input(a.cases);
  if (!a.out.empty()) io::check_output(a.out, io::OutputPolicy{a.force, {a.cases}});
  DotResult r;
  r.datapath = dp.name;
  r.cases = a.cases;
  r.out = a.out;
  // The case file is parsed by datapath::read_dot_cases (every code checked against its format).
  datapath::read_dot_cases(
      in, a.cases, dp,
      [&](const datapath::DotCaseColumns& c) {
        r.scaled = c.scaled;
        r.expected = c.expected;
      },
      [&](const datapath::DotCase& k) {
        const datapath::BlockScales scales = k.scales();
        DotRow row;
        row.d = datapath::dot(dp, k.a, k.b, k.c, scales, k.row.value_or(r.rows.size()));
        row.d_value = format::decode(dp.output(), row.d);
        row.exact = datapath::exact_dot(dp, k.a, k.b, k.c, scales).to_string(25);
        row.a = k.a_text;
        row.b = k.b_text;
        row.c = k.c_text;
        row.scale_a = k.scale_a_text;
        row.scale_b = k.scale_b_text;
        if (k.expected) {
          row.match = *k.expected == row.d;
          r.mismatches += *row.match ? 0 : 1;
        }
        r.rows.push_back(std::move(row));
      });
  if (!a.out.empty()) {
    io::AtomicFile out(a.out, io::OutputPolicy{a.force, {a.cases}});
    out.stream() << dot_csv(r);
    out.commit();
  }
  return r;
}

std::string dot_csv(const DotResult& r) {
  std::ostringstream out;
  out << "a,b,c," << (r.scaled ? "scale_a,scale_b," : "") << "d,d_value,exact" << (r.expected ? ",match" : "")
      << "\n";
  for (const auto& k : r.rows) {
    out << k.a << ',' << k.b << ',' << k.c << ',';
    if (r.scaled) out << k.scale_a << ',' << k.scale_b << ',';
    out << hex(k.d) << ',' << io::format_number(k.d_value, io::NumberStyle::shortest) << ',' << k.exact;
    if (k.match) out << ',' << (*k.match ? "yes" : "no");
    out << '\n';
  }
  return out.str();
}

Fields fields(const DotResult& r) {
  Fields rows = Fields::array();
  for (const auto& k : r.rows) {
    Fields row = {{"a", k.a}, {"b", k.b}, {"c", k.c}};
    if (r.scaled) {
      row["scale_a"] = k.scale_a;
      row["scale_b"] = k.scale_b;
    }
    row["d"] = hex(k.d);
    row["d_value"] = k.d_value;
    row["exact"] = k.exact;
    if (k.match) row["match"] = *k.match;
    rows.push_back(row);
  }
  Fields f = {{"datapath", r.datapath}, {"cases", r.cases}};
  if (!r.out.empty()) f["out"] = r.out;
  f["results"] = r.rows.size();
  if (r.expected) f["mismatches"] = r.mismatches;
  f["rows"] = rows;
  return f;
}

DotRequest dot_request(const Fields& f) {
  DotRequest r;
  FieldReader in(f, "dot");
  in.read("datapath", r.datapath);
  in.read("cases", r.cases);
  in.read("inputs", r.inputs);
  in.read("out", r.out);
  in.read("force", r.force);
  in.finish();
  if (r.datapath.empty()) throw SpecError("dot: datapath (a datapath name) is required");
  if (r.cases.empty()) throw SpecError("dot: cases (a CSV file of cases) is required");
  return r;
}

DatapathErrorReport datapath_error(experiment::Context& ctx, const DatapathErrorRequest& a) {
  experiment::DatapathErrorConfig c;
  for (const auto& n : a.datapath) {
    datapath::Datapath dp = ctx.datapaths().get(n);
    if (!a.inputs.empty()) dp.a = dp.b = ctx.formats().get(a.inputs);
    c.datapaths.push_back(std::move(dp));
  }
  for (const std::size_t k : a.k) {
    if (k < 1) throw SpecError("datapath-error: k = 0: expected an integer >= 1");
  }
  c.ks = a.k;
  c.dist = a.dist;
  c.trials = a.trials;
  c.seed = a.seed;
  DatapathErrorReport r;
  r.result = experiment::datapath_error(c);
  if (!a.out.empty()) r.files = experiment::write_datapath_error_files(a.out, r.result);
  return r;
}

Fields fields(const DatapathErrorReport& r) {
  const experiment::DatapathErrorConfig& c = r.result.config;
  Fields rows = Fields::array();
  for (std::size_t d = 0; d < c.datapaths.size(); ++d) {
    for (std::size_t i = 0; i < c.ks.size(); ++i) {
      rows.push_back({{"datapath", c.datapaths[d].name},
                      {"k", c.ks[i]},
                      {"mean_rel_error", r.result.mean[d][i]},
                      {"max_rel_error", r.result.max[d][i]}});
    }
  }
  Fields files = Fields::array();
  for (const auto& p : r.files) files.push_back(p.string());
  return {{"dist", c.dist}, {"trials", c.trials}, {"seed", c.seed}, {"rows", rows}, {"files", files}};
}

DatapathErrorRequest datapath_error_request(const Fields& f) {
  DatapathErrorRequest r;
  FieldReader in(f, "datapath-error");
  in.read("datapath", r.datapath);
  std::vector<std::uint64_t> k(r.k.begin(), r.k.end());
  in.read("k", k);
  r.k.assign(k.begin(), k.end());
  in.read("dist", r.dist);
  in.read("trials", r.trials);
  in.read("seed", r.seed);
  in.read("inputs", r.inputs);
  in.read("out", r.out);
  in.finish();
  return r;
}

DatapathListResult datapath_list(experiment::Context& ctx, const DatapathListRequest& /*request*/) {
  DatapathListResult r;
  const auto& reg = ctx.datapaths();
  for (const auto& n : reg.names()) r.datapaths.emplace_back(n, reg.get(n).summary());
  return r;
}

Fields fields(const DatapathListResult& r) {
  Fields list = Fields::array();
  for (const auto& [name, summary] : r.datapaths) list.push_back({{"name", name}, {"summary", summary}});
  return {{"datapaths", list}};
}

DatapathListRequest datapath_list_request(const Fields& f) {
  FieldReader(f, "datapath list").finish();
  return {};
}

DatapathShowResult datapath_show(experiment::Context& ctx, const DatapathShowRequest& a) {
  const auto& reg = ctx.datapaths();
  const datapath::Datapath& d = reg.get(a.name);
  return {d.name, reg.origin(a.name), d.description, d.source, d.summary(), d.open};
}

Fields fields(const DatapathShowResult& r) {
  return {{"name", r.name},     {"defined_in", r.origin}, {"description", r.description},
          {"source", r.source}, {"summary", r.summary},   {"open", r.open}};
}

DatapathShowRequest datapath_show_request(const Fields& f) {
  DatapathShowRequest r;
  FieldReader in(f, "datapath show");
  in.read("name", r.name);
  in.finish();
  if (r.name.empty()) throw SpecError("datapath show: name (a datapath name) is required");
  return r;
}

}  // namespace lpemu::app
