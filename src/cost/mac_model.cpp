#include "lpemu/cost/mac_model.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "cost/toml_read.hpp"
#include "lpemu/error.hpp"

namespace lpemu::cost {
namespace {

int clog2(int x) {
  int r = 0;
  while ((1 << r) < x) ++r;
  return r;
}

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

double MacCost::part(const std::string& name) const {
  for (const auto& p : parts) {
    if (p.name == name) return p.fa;
  }
  return 0;
}

MacCost mac_cost(const CostFormat& a, const CostFormat& b, const MacDatapath& dp) {
  MacCost c;
  c.a_format = a.name;
  c.b_format = b.name;
  c.datapath = dp.name;
  const int n = dp.fused_terms;
  const double per_step = 1.0 / n;               // share of per-step hardware per lane
  const double tree_share = (n - 1.0) / n;       // an n-term tree has n-1 adders
  const bool floating = a.element.is_float || b.element.is_float;
  const int sa = a.element.significand_bits;
  const int sb = b.element.significand_bits;

  c.parts.push_back({"multiplier", static_cast<double>(sa) * sb, num(sa) + " x " + num(sb)});

  int tree_w = 0;
  if (floating) {
    const int emax = std::max(a.element.exponent_bits, b.element.exponent_bits);
    const int ep = emax + 2;
    const double exp_fa = (emax + 1) + ep * (2.0 * n - 1.0) / n;
    c.parts.push_back({"exponent", exp_fa, num(emax + 1) + " + " + num(ep) + " x (2n-1)/n"});
    const int w = dp.alignment_bits;
    c.parts.push_back({"alignment", kMuxFa * w * clog2(w), num(kMuxFa) + " x " + num(w) + " x " + num(clog2(w))});
    tree_w = w;
  } else {
    c.parts.push_back({"exponent", 0, "integer inputs"});
    c.parts.push_back({"alignment", 0, "integer inputs"});
    tree_w = sa + sb;
  }
  c.parts.push_back({"adder_tree", tree_share * (tree_w + clog2(n)),
                     "(n-1)/n x (" + num(tree_w) + " + " + num(clog2(n)) + ")"});

  if (dp.acc.is_float) {
    const int acc_sig = dp.acc.significand_bits;
    const int aw = acc_sig + 3;  // guard, round, sticky
    const double shifter = kMuxFa * aw * clog2(aw);
    c.parts.push_back({"accumulator", (aw + shifter + kFlopFa * dp.acc.bits) * per_step,
                       "(" + num(aw) + " + " + num(shifter) + " + " + num(kFlopFa * dp.acc.bits) + ") / n"});
    c.parts.push_back({"normalisation", (shifter + aw / 2.0 + acc_sig) * per_step,
                       "(" + num(shifter) + " + " + num(aw / 2.0) + " + " + num(acc_sig) + ") / n"});
  } else {
    const int aw = dp.acc.bits;
    c.parts.push_back({"accumulator", (aw + kFlopFa * aw) * per_step,
                       "(" + num(aw) + " + " + num(kFlopFa * aw) + ") / n"});
    c.parts.push_back({"normalisation", 0, "integer accumulator"});
  }

  double scale_fa = 0;
  std::string scale_formula = "no block scale";
  const int ka = a.block_size;
  const int kb = b.block_size;
  if (ka > 0 || kb > 0) {
    const int k = (ka > 0 && kb > 0) ? std::min(ka, kb) : std::max(ka, kb);
    const int se = std::max(ka > 0 ? a.scale.exponent_bits : 0, kb > 0 ? b.scale.exponent_bits : 0);
    const int ssa = ka > 0 ? a.scale.significand_bits : 1;
    const int ssb = kb > 0 ? b.scale.significand_bits : 1;
    double per_block = se + 1;  // add the two scale exponents (and apply to the block's sum)
    std::string f = num(se + 1);
    if (ssa > 1 || ssb > 1) {
      const int acc_sig = dp.acc.is_float ? dp.acc.significand_bits : dp.acc.bits;
      const double mul = (ssa > 1 && ssb > 1) ? static_cast<double>(ssa) * ssb : 0.0;
      const double apply = static_cast<double>(acc_sig) * (ssa + ssb - 1);
      per_block += mul + apply;
      f += " + " + num(mul) + " + " + num(apply);
    }
    scale_fa = per_block / k;
    scale_formula = "(" + f + ") / " + num(k);
  }
  c.parts.push_back({"block_scale", scale_fa, scale_formula});

  for (const auto& p : c.parts) c.total_fa += p.fa;
  return c;
}

long long iso_area_count(const MacCost& x, const MacCost& y, long long n_y) {
  return static_cast<long long>(std::floor(static_cast<double>(n_y) * y.total_fa / x.total_fa));
}

MacDatapath parse_datapath_toml(std::string_view text, std::string_view origin, const format::Registry& formats) {
  const toml::table t = detail::parse(text, origin);
  const detail::Reader r{t, origin, ""};
  r.only({"name", "source", "description", "fused_terms", "alignment_bits", "accumulator", "unverified"});
  MacDatapath d;
  d.name = r.str("name", true);
  d.source = r.str("source", true);
  d.fused_terms = static_cast<int>(r.integer("fused_terms", true, 0, 1, 4096, "an integer in 1..4096"));
  d.alignment_bits = static_cast<int>(r.integer("alignment_bits", true, 0, 0, 512, "an integer in 0..512"));
  d.accumulator = r.str("accumulator", true);
  const format::Format* acc = formats.find(d.accumulator);
  // Integer accumulators wider than the element registry's integers: "int16", "int32", "int48".
  if (acc == nullptr && d.accumulator.size() > 3 && d.accumulator.rfind("int", 0) == 0 &&
      d.accumulator.find_first_not_of("0123456789", 3) == std::string::npos) {
    const int bits = std::stoi(d.accumulator.substr(3));
    if (bits >= 8 && bits <= 128) {
      d.acc = ElementWidth{false, bits, 0, bits};
      d.unverified = r.boolean("unverified", false);
      return d;
    }
  }
  if (acc == nullptr) {
    std::string hint;
    for (const auto& s : format::closest_names(d.accumulator, formats.names())) hint += (hint.empty() ? "" : ", ") + s;
    detail::fail(origin, t.get("accumulator"), "accumulator", '"' + d.accumulator + '"',
                 "an element format name (closest: " + hint + ")");
  }
  d.acc = element_width(*acc);
  if (d.acc.is_float && d.alignment_bits < 2) {
    detail::fail(origin, t.get("alignment_bits"), "alignment_bits", std::to_string(d.alignment_bits),
                 "at least 2 for a floating-point accumulator");
  }
  d.unverified = r.boolean("unverified", false);
  return d;
}

}  // namespace lpemu::cost
