#include "lpemu/datapath/dot_cases.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <sstream>
#include <string_view>

#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::datapath {
namespace {

using io::split;
using io::trim;

// "where: column 'c' = 'v': expected ..." as a SpecError.
[[noreturn]] void bad(const std::string& where, const std::string& column, const std::string& value,
                      const std::string& expected) {
  throw SpecError(where + ": column '" + column + "' = '" + value + "': expected " + expected);
}

// One hex code of format f (0x optional); a code wider than f is an error, never masked.
std::uint64_t parse_hex(const std::string& text, const format::Format& f, const std::string& where,
                        const std::string& column) {
  std::string t = trim(text);
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) t = t.substr(2);
  std::uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v, 16);
  if (t.empty() || t.size() > 16 || ec != std::errc() || ptr != t.data() + t.size()) {
    bad(where, column, text, "hex codes of " + f.name);
  }
  format::require_code_fits(f, v, where + ": column '" + column + "' = '" + text + "'");
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

// Block scales of one row: decimal exponents (E8M0, as dot.csv holds them), nan, or 0x-prefixed
// codes of the datapath's scale format, split into exponent and integer significand.
void parse_scales(const std::string& field, const Datapath& dp, const std::string& where,
                  const std::string& column, std::vector<std::int32_t>& exps,
                  std::vector<std::uint32_t>& sigs) {
  for (const auto& w : code_fields(field)) {
    if (!dp.scale) bad(where, column, w, "no block scales (datapath '" + dp.name + "' has none)");
    if (w.size() > 2 && w[0] == '0' && (w[1] == 'x' || w[1] == 'X')) {
      const double v = format::decode(*dp.scale, parse_hex(w, *dp.scale, where, column));
      if (std::isnan(v)) {
        exps.push_back(kNanScale);
        sigs.push_back(1);
      } else if (v == 0.0) {
        exps.push_back(0);
        sigs.push_back(0);
      } else if (std::isinf(v)) {
        bad(where, column, w, "a finite block scale or NaN");
      } else {
        const int e = std::ilogb(v) - dp.scale->mantissa_bits;
        exps.push_back(e);
        sigs.push_back(static_cast<std::uint32_t>(std::ldexp(std::fabs(v), -e)));
      }
      continue;
    }
    if (w == "nan" || w == "NaN") {
      exps.push_back(kNanScale);
      sigs.push_back(1);
      continue;
    }
    long e = 0;
    const auto [ptr, ec] = std::from_chars(w.data(), w.data() + w.size(), e, 10);
    if (ec != std::errc() || ptr != w.data() + w.size() || e < -100000 || e > 100000) {
      bad(where, column, w,
          "a decimal scale exponent in -100000..100000, nan, or a 0x code of " + dp.scale->name);
    }
    exps.push_back(static_cast<std::int32_t>(e));
    sigs.push_back(1);
  }
}

// An unsigned integer (decimal, 0x hex or 0b binary).
std::uint64_t parse_index(const std::string& text, const std::string& where, const std::string& column) {
  const auto v = io::parse_unsigned(text);
  if (!v) bad(where, column, text, "an unsigned integer (decimal, 0x hex or 0b binary)");
  return *v;
}

}  // namespace

DotCaseColumns read_dot_cases(std::istream& in, const std::string& name, const Datapath& dp,
                              const std::function<void(const DotCaseColumns&)>& on_header,
                              const std::function<void(const DotCase&)>& on_case) {
  std::string line;
  if (!std::getline(in, line))
    throw SpecError(name + ": empty file: expected a header row with columns a,b,c");
  const auto header = split(trim(line), ',');
  std::map<std::string, std::size_t> col;
  for (std::size_t i = 0; i < header.size(); ++i) {
    const std::string h = trim(header[i]);
    if (!col.emplace(h, i).second) throw SpecError(name + ":1: header names column '" + h + "' twice");
  }
  for (const char* need : {"a", "b", "c"}) {
    if (col.find(need) == col.end()) {
      throw SpecError(name + ":1: header has no column '" + need + "' (expected columns a,b,c)");
    }
  }
  DotCaseColumns cols;
  cols.scaled = col.count("scale_a") != 0 || col.count("scale_b") != 0;
  cols.expected = col.count("expected_result") != 0;
  if (on_header) on_header(cols);
  std::size_t row = 1;
  while (std::getline(in, line)) {
    ++row;
    if (trim(line).empty()) continue;
    const std::string where = name + ":" + std::to_string(row);
    const auto fields = split(line, ',');
    if (fields.size() != header.size()) {
      throw SpecError(where + ": " + std::to_string(fields.size()) + " fields, expected " +
                      std::to_string(header.size()) + " (one per header column)");
    }
    const auto field = [&](const char* c) {
      const auto it = col.find(c);
      return it != col.end() ? trim(fields[it->second]) : std::string();
    };
    DotCase k;
    k.line = row;
    k.a_text = field("a");
    k.b_text = field("b");
    k.c_text = field("c");
    k.scale_a_text = field("scale_a");
    k.scale_b_text = field("scale_b");
    for (const auto& s : code_fields(k.a_text)) k.a.push_back(parse_hex(s, dp.a, where, "a"));
    for (const auto& s : code_fields(k.b_text)) k.b.push_back(parse_hex(s, dp.b, where, "b"));
    if (k.a.size() != k.b.size()) {
      throw SpecError(where + ": column 'a' has " + std::to_string(k.a.size()) + " codes but 'b' has " +
                      std::to_string(k.b.size()) + "; expected as many");
    }
    k.c = parse_hex(k.c_text, dp.output(), where, "c");
    parse_scales(k.scale_a_text, dp, where, "scale_a", k.scale_a_exp, k.scale_a_sig);
    parse_scales(k.scale_b_text, dp, where, "scale_b", k.scale_b_exp, k.scale_b_sig);
    const auto all_one = [](const std::vector<std::uint32_t>& v) {
      return std::all_of(v.begin(), v.end(), [](std::uint32_t x) { return x == 1; });
    };
    if (all_one(k.scale_a_sig)) k.scale_a_sig.clear();
    if (all_one(k.scale_b_sig)) k.scale_b_sig.clear();
    if (cols.expected)
      k.expected = parse_hex(field("expected_result"), dp.output(), where, "expected_result");
    if (col.count("row") != 0) k.row = parse_index(field("row"), where, "row");
    on_case(k);
  }
  if (in.bad()) throw IoError(name + ": read error");
  return cols;
}

}  // namespace lpemu::datapath
