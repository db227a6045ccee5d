#include "lpemu/cost/mac_model.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "lpemu/datapath/datapath.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::cost {
namespace {

int clog2(int x) {
  int r = 0;
  while ((1 << r) < x) ++r;
  return r;
}

std::string num(double v) { return io::format_number(v, io::NumberStyle::significant, 6); }

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
  const double per_step = 1.0 / n;          // share of per-step hardware per lane
  const double tree_share = (n - 1.0) / n;  // an n-term tree has n-1 adders
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
    c.parts.push_back(
        {"alignment", kMuxFa * w * clog2(w), num(kMuxFa) + " x " + num(w) + " x " + num(clog2(w))});
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
    c.parts.push_back(
        {"accumulator", (aw + kFlopFa * aw) * per_step, "(" + num(aw) + " + " + num(kFlopFa * aw) + ") / n"});
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

  // Promotion (DeepSeek-V3 sec. 3.3.2): every N products the partial sum is added into a wider
  // accumulator: one more aligning adder and register of that width, amortised over N.
  if (dp.promote_every > 0) {
    const int pw = dp.promotion.is_float ? dp.promotion.significand_bits + 3 : dp.promotion.bits;
    const double shifter = dp.promotion.is_float ? kMuxFa * pw * clog2(pw) : 0.0;
    c.parts.push_back({"promotion", (pw + shifter + kFlopFa * dp.promotion.bits) / dp.promote_every,
                       "(" + num(pw) + " + " + num(shifter) + " + " + num(kFlopFa * dp.promotion.bits) +
                           ") / " + num(dp.promote_every)});
  }

  for (const auto& p : c.parts) c.total_fa += p.fa;
  return c;
}

long long iso_area_count(const MacCost& x, const MacCost& y, long long n_y) {
  return static_cast<long long>(std::floor(static_cast<double>(n_y) * y.total_fa / x.total_fa));
}

MacDatapath mac_datapath(const datapath::Datapath& dp) {
  MacDatapath m;
  m.name = dp.name;
  m.source = dp.source;
  m.unverified = !dp.open.empty();
  const auto input = [&](const format::Format& f) {
    CostFormat c;
    c.name = f.name;
    c.element_name = f.name;
    c.element = element_width(f);
    if (dp.scale_application != datapath::ScaleApplication::none && dp.scale) {
      c.block_size = dp.scale_block;
      c.scale_name = dp.scale->name;
      c.scale = element_width(*dp.scale);
    }
    return c;
  };
  m.a = input(dp.a);
  m.b = input(dp.b);
  // n = 0 (all of K in one exact block) is a reference, not a design: priced as the widest tree a
  // truncating record may have (64 terms).
  m.fused_terms = dp.fused_terms == 0 ? 64 : dp.fused_terms;
  if (dp.alignment == datapath::Alignment::exact) {
    // Every product kept exactly: the span from the smallest to the largest product, both significands.
    const auto span = [](const format::Format& f) {
      if (f.kind != format::Kind::floating) return 0;
      const int lowest = f.subnormals ? f.emin - f.mantissa_bits : f.emin;
      return f.emax - lowest;
    };
    m.alignment_bits = span(dp.a) + span(dp.b) + dp.a.precision() + dp.b.precision();
  } else {
    m.alignment_bits =
        dp.fraction_bits + 1 + (dp.sticky ? 1 : 0);  // the integer bit, F fraction bits, sticky
  }
  m.accumulator = dp.accumulator.name;
  m.acc = element_width(dp.accumulator);
  if (m.acc.is_float) m.acc.significand_bits = dp.accumulator_fraction_bits + 1;
  if (dp.promote_every > 0 && dp.promotion_format) {
    m.promote_every = dp.promote_every;
    m.promotion = element_width(*dp.promotion_format);
  }
  return m;
}

MacCost mac_cost(const MacDatapath& dp) { return mac_cost(dp.a, dp.b, dp); }

}  // namespace lpemu::cost
