// Datapath part of a proposal: the datapath section of spec.md and dot.csv, dot-product
// vectors whose expected result bits come from lpemu::datapath::dot (checked against the published
// tensor-core models' golden vectors and exact-arithmetic properties in lpemu's tests) and whose
// exact value comes from datapath::exact_dot (Boost.Multiprecision).
#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "experiment/proposal_detail.hpp"
#include "lpemu/datapath/dot.hpp"
#include "lpemu/datapath/exact.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::experiment {
namespace {

using detail::hex;
using detail::hex_list;
using detail::real;

/// Builds the rows of dot.csv from values: codes are chosen by exact encoding.
class DotCases {
 public:
  DotCases(const datapath::Datapath& dp, std::uint64_t seed) : dp_(dp), rng_(seed) {
    sat_.overflow = format::Overflow::saturate;
    n_ = dp.fused_terms > 0 ? dp.fused_terms : 16;
    ea_max_ = std::ilogb(dp.a.max_finite);
    eb_max_ = std::ilogb(dp.b.max_finite);
    ea_min_ = std::ilogb(dp.a.min_subnormal);
    eb_min_ = std::ilogb(dp.b.min_subnormal);
    big_ = ea_max_ + eb_max_ - 1;
    f_ = dp.alignment == datapath::Alignment::exact ? 24 : dp.fraction_bits;
  }

  /// Adds a row from products given as (value of a, value of b) pairs, c as a value.
  void add(std::string name, const std::vector<std::pair<double, double>>& terms, double c,
           std::vector<std::int32_t> sa = {}, std::vector<std::int32_t> sb = {}) {
    std::vector<std::uint64_t> a;
    std::vector<std::uint64_t> b;
    for (const auto& [x, y] : terms) {
      a.push_back(format::encode(dp_.a, x, sat_));
      b.push_back(format::encode(dp_.b, y, sat_));
    }
    add_codes(std::move(name), std::move(a), std::move(b), format::encode(dp_.output(), c), std::move(sa),
              std::move(sb));
  }

  /// Adds a row from codes.
  void add_codes(std::string name, std::vector<std::uint64_t> a, std::vector<std::uint64_t> b,
                 std::uint64_t c, std::vector<std::int32_t> sa = {}, std::vector<std::int32_t> sb = {}) {
    if (dp_.scale_application != datapath::ScaleApplication::none && sa.empty()) {
      const std::size_t blocks = (a.size() + dp_.scale_block - 1) / dp_.scale_block;
      sa.assign(blocks, 0);
      sb.assign(blocks, 0);
    }
    DotVector v;
    v.row = rows_.size();
    v.name = std::move(name);
    v.a = std::move(a);
    v.b = std::move(b);
    v.c = c;
    v.scale_a = std::move(sa);
    v.scale_b = std::move(sb);
    const datapath::BlockScales scales{v.scale_a, v.scale_b};
    v.expected = datapath::dot(dp_, v.a, v.b, v.c, scales, v.row);
    v.exact = datapath::exact_dot(dp_, v.a, v.b, v.c, scales).to_string(25);
    rows_.push_back(std::move(v));
  }

  /// A product of exactly 2^t·m (m in [1, 2)) split over a and b, or false if out of range.
  bool product(int t, double m, std::pair<double, double>& out) const {
    const int ta = std::clamp(t - eb_max_, ea_min_, ea_max_ - 1);
    const int tb = t - ta;
    if (tb < eb_min_ || tb > eb_max_) return false;
    const double a = std::ldexp(m, ta);
    const double b = std::ldexp(1.0, tb);
    if (format::quantize(dp_.a, a) != a || format::quantize(dp_.b, b) != b) {
      // m needs more bits than a has at that exponent: put the significand on b instead.
      const double a2 = std::ldexp(1.0, ta);
      const double b2 = std::ldexp(m, tb);
      if (format::quantize(dp_.a, a2) != a2 || format::quantize(dp_.b, b2) != b2) return false;
      out = {a2, b2};
      return true;
    }
    out = {a, b};
    return true;
  }

  /// A random finite code of `f` (not NaN or Inf).
  std::uint64_t random_code(const format::Format& f) {
    for (;;) {
      const std::uint64_t c = rng_() & f.code_mask();
      if (std::isfinite(format::decode(f, c))) return c;
    }
  }

  void build() {
    const double one = 1.0;
    add("zero", std::vector<std::pair<double, double>>(n_, {0.0, one}), 0.0);
    add("negative_zeros", std::vector<std::pair<double, double>>(n_, {-0.0, one}), -0.0);
    {
      std::vector<std::pair<double, double>> t;
      for (int i = 0; i < n_; ++i) t.push_back({static_cast<double>(i % 4), i % 3 == 0 ? -one : one});
      add("exact_small_integers", t, 1.0);
    }
    alignment();
    // Cancellation: the largest products cancel; the small ones, aligned below them, remain.
    for (const double m : {1.0, 1.5}) {
      std::pair<double, double> big;
      std::pair<double, double> small;
      const int t_small = std::ilogb(dp_.a.min_normal) + std::ilogb(dp_.b.min_normal);
      if (!product(big_, 1.75, big) || !product(t_small, m, small)) continue;
      std::vector<std::pair<double, double>> t{big, {-big.first, big.second}};
      while (static_cast<int>(t.size()) < n_) t.push_back(small);
      add("cancellation_m" + real(m), t, 0.0);
    }
    boundaries();
    subnormals();
    addend();
    specials();
    scales();
    for (int r = 0; r < 24; ++r) {
      const int ks[] = {1, 3, n_, 2 * n_ + 3, 64, 128};
      const int k = ks[r % 6];
      std::vector<std::uint64_t> a(k);
      std::vector<std::uint64_t> b(k);
      for (int i = 0; i < k; ++i) {
        a[i] = random_code(dp_.a);
        b[i] = random_code(dp_.b);
      }
      add_codes("random", std::move(a), std::move(b), r % 2 ? random_code(dp_.output()) : 0, random_scales(k),
                random_scales(k));
    }
  }

  std::vector<DotVector> rows() && { return std::move(rows_); }

 private:
  // Terms at and around the alignment quantum 2^(E−F) below the largest term 2^E: the small
  // terms are products near the bottom of the normal range, the big term a product where the
  // product range allows, else one scaled up by a block scale (when one fused block holds two
  // scale blocks), and c where the addend is fused. Signed variants show truncation toward zero.
  void alignment() {
    const int t_small = std::ilogb(dp_.a.min_normal) + std::ilogb(dp_.b.min_normal) + 1;
    const bool scaled =
        dp_.scale_application != datapath::ScaleApplication::none && n_ >= 2 * dp_.scale_block;
    std::pair<double, double> top;
    const int t_top = ea_max_ + eb_max_ - 1;
    const bool have_top = product(t_top, 1.0, top);
    for (int d = -3; d <= 3; ++d) {
      const int e = t_small + f_ - d;
      const std::string tag = "_d" + std::to_string(d);
      for (const double m : {1.0, 1.5, 1.75}) {
        std::pair<double, double> small;
        if (!product(t_small, m, small)) continue;
        const std::string name = tag + "_m" + real(m);
        std::pair<double, double> big;
        if (product(e, 1.0, big)) {
          std::vector<std::pair<double, double>> t{big};
          while (static_cast<int>(t.size()) < n_) t.push_back(small);
          add("alignment" + name, t, 0.0);
          for (std::size_t i = 1; i < t.size(); i += 2) t[i].first = -t[i].first;
          add("truncation_signed" + name, t, 0.0);
        } else if (scaled && have_top && e - t_top <= 127) {
          // Block 0: the big product, scaled by 2^(e − t_top); block 1: the small products.
          const int sb = dp_.scale_block;
          std::vector<std::pair<double, double>> t(2 * sb, {0.0, 1.0});
          t[0] = top;
          for (int i = sb; i < 2 * sb; ++i) t[i] = {i % 2 ? -small.first : small.first, small.second};
          add("alignment_scaled" + name, t, 0.0, {e - t_top, 0}, {0, 0});
        }
        if (dp_.addend == datapath::Addend::fused) {
          std::vector<std::pair<double, double>> only(n_, small);
          add("alignment_to_c" + name, only, std::ldexp(1.0, e));
          for (auto& x : only) x.first = -x.first;  // c − Σ: truncation toward zero vs toward −∞
          add("truncation_signed_to_c" + name, only, std::ldexp(1.0, e));
        }
      }
    }
  }

  // K around the fused-term block size n and the promotion interval.
  void boundaries() {
    std::vector<int> ks{n_ - 1, n_, n_ + 1, 2 * n_ - 1, 2 * n_, 2 * n_ + 1};
    if (dp_.promote_every > 0) {
      const int p = dp_.promote_every;
      for (const int k : {p - 1, p, p + 1, 2 * p, 2 * p + 1}) ks.push_back(k);
    }
    for (const int k : ks) {
      if (k < 1) continue;
      std::vector<std::uint64_t> a(k);
      std::vector<std::uint64_t> b(k);
      // Positive values of mixed magnitude: every block's rounding shows in the chain.
      for (int i = 0; i < k; ++i) {
        a[i] = format::encode(dp_.a, std::ldexp(1.0 + (i % 7) / 8.0, (i * 5) % 7 - 3), sat_);
        b[i] = format::encode(dp_.b, 1.0 + (i % 3) / 4.0, sat_);
      }
      const std::string tag = dp_.promote_every > 0 && k % dp_.promote_every <= 1 && k >= dp_.promote_every
                                  ? "promotion_k"
                                  : "fused_boundary_k";
      add_codes(tag + std::to_string(k), a, b, format::encode(dp_.output(), 1000.0), random_scales(k),
                random_scales(k));
    }
  }

  void subnormals() {
    const format::Format& fa = dp_.a;
    if (fa.kind != format::Kind::floating || !fa.subnormals) return;
    const double sub = fa.min_subnormal;
    add("subnormal_inputs", std::vector<std::pair<double, double>>(n_, {sub, 1.0}), 0.0);
    add("subnormal_times_subnormal", std::vector<std::pair<double, double>>(n_, {sub, dp_.b.min_subnormal}),
        0.0);
    add("subnormal_with_normal", {{sub * 3, 1.0}, {fa.min_normal, 1.0}, {-sub, 1.0}}, 0.0);
    const format::Format& o = dp_.output();
    if (o.kind == format::Kind::floating && o.subnormals) {
      add("subnormal_addend", {{sub, dp_.b.min_subnormal}}, o.min_subnormal * 3);
      add("subnormal_addend_only", {{0.0, 1.0}}, -o.min_subnormal);
    }
  }

  void addend() {
    std::vector<std::pair<double, double>> small(n_, {1.0, 1.0});
    add("addend_large", small, std::ldexp(1.0, big_ + f_ + 2));
    add("addend_cancels", small, -static_cast<double>(n_));
    add("addend_half_ulp", small, std::ldexp(1.0, f_) + 0.5);
    add("addend_negative", small, -std::ldexp(1.5, 10));
  }

  void specials() {
    const format::Format& fa = dp_.a;
    const format::Format& fb = dp_.b;
    const double nan = std::nan("");
    const double inf = HUGE_VAL;
    std::vector<std::pair<double, double>> t(n_, {1.0, 1.0});
    if (fa.has_nan()) {
      t[1] = {nan, 1.0};
      add("nan_input", t, 0.0);
      t[1] = {1.0, 1.0};
    }
    if (fa.has_inf()) {
      t[2] = {inf, 1.0};
      add("inf_input", t, 0.0);
      t[3] = {-inf, 1.0};
      add("inf_minus_inf", t, 0.0);
      t[2] = {inf, 0.0};
      t[3] = {1.0, 1.0};
      add("inf_times_zero", t, 0.0);
      t[2] = {1.0, 1.0};
    }
    const format::Format& o = dp_.output();
    if (o.has_nan()) add("nan_addend", t, nan);
    if (o.has_inf()) add("inf_addend", t, inf);
    add("overflow", std::vector<std::pair<double, double>>(n_, {fa.max_finite, fb.max_finite}), o.max_finite);
    add("overflow_negative", std::vector<std::pair<double, double>>(n_, {-fa.max_finite, fb.max_finite}),
        -o.max_finite);
  }

  std::vector<std::int32_t> random_scales(int k) {
    if (dp_.scale_application == datapath::ScaleApplication::none) return {};
    const std::size_t blocks = (static_cast<std::size_t>(k) + dp_.scale_block - 1) / dp_.scale_block;
    std::vector<std::int32_t> s(blocks);
    for (auto& e : s) e = static_cast<std::int32_t>(rng_() % 21) - 10;
    return s;
  }

  void scales() {
    if (dp_.scale_application == datapath::ScaleApplication::none) return;
    const int k = 2 * dp_.scale_block;
    std::vector<std::pair<double, double>> t;
    for (int i = 0; i < k; ++i) t.push_back({1.0 + (i % 4) / 4.0, i % 5 == 0 ? -1.0 : 1.0});
    add("scales_zero", t, 0.0, {0, 0}, {0, 0});
    add("scales_differ", t, 0.0, {-3, 5}, {2, -7});
    add("scales_extreme_high", t, 0.0, {127, 127}, {127, 0});
    add("scales_extreme_low", t, 0.0, {-127, -127}, {-127, 0});
    add("scales_nan", t, 0.0, {datapath::kNanScale, 0}, {0, 0});
  }

  const datapath::Datapath& dp_;
  std::mt19937_64 rng_;
  format::ConvertOptions sat_;
  int n_ = 16;
  int ea_max_ = 0, eb_max_ = 0, ea_min_ = 0, eb_min_ = 0;
  int big_ = 0;  ///< exponent of the largest product used
  int f_ = 24;   ///< alignment fraction bits (24 stands in for "exact")
  std::vector<DotVector> rows_;
};

std::string rounding_words(const datapath::ResultRounding& r) {
  std::string s(format::to_string(r.mode));
  if (r.mode == format::RoundingMode::stochastic) s += " (" + std::to_string(r.sr_bits) + " random bits)";
  return s;
}

std::string join_ints(std::span<const std::int32_t> v) {
  std::string out;
  for (const auto e : v)
    out += (out.empty() ? "" : " ") + (e == datapath::kNanScale ? std::string("nan") : std::to_string(e));
  return out;
}

}  // namespace

std::vector<DotVector> dot_vectors(const datapath::Datapath& dp, std::uint64_t seed) {
  DotCases cases(dp, seed);
  cases.build();
  return std::move(cases).rows();
}

datapath::Datapath retarget_datapath(const datapath::Datapath& dp, const format::Format& element) {
  if (dp.a.name == element.name && dp.b.name == element.name) return dp;
  return datapath::with_inputs(
      datapath::with_name(dp, dp.name + "." + element.name,
                          dp.description + " — inputs " + element.name + " (proposed; preset inputs " +
                              dp.a.name + " x " + dp.b.name + ")"),
      element, element);
}

namespace detail {

std::string datapath_spec_markdown(const datapath::Datapath& dp) {
  std::ostringstream s;
  s << "## Datapath: " << dp.name << "\n\n" << dp.description << "\n\n";
  if (!dp.source.empty()) s << "Source: " << dp.source << "\n\n";
  s << "d = c + Σ a_i·b_i as a block fused multiply-add: exact products, alignment of every term to the "
       "quantum 2^(E−F) below the block's largest exponent E, an exact fixed-point sum, one normalisation "
       "and one "
       "rounding per block, blocks chained along K.\n\n| parameter | value |\n|---|---|\n";
  s << "| inputs | a: " << dp.a.name << ", b: " << dp.b.name
    << (dp.flush_subnormal_inputs ? " (subnormals flushed)" : "") << " |\n";
  if (dp.scale_application != datapath::ScaleApplication::none) {
    s << "| block scales | power of two per " << dp.scale_block << " products, applied "
      << (dp.scale_application == datapath::ScaleApplication::product ? "to each product's exponent"
                                                                      : "to each group's exact sum")
      << " |\n";
  }
  s << "| products | " << (dp.product_format ? dp.product_format->name + " (rounded)" : std::string("exact"))
    << " |\n";
  s << "| fused terms n | "
    << (dp.fused_terms == 0 ? std::string("all of K") : std::to_string(dp.fused_terms)) << " |\n";
  s << "| addend c | "
    << (dp.addend == datapath::Addend::fused ? "fused into the aligned sum"
                                             : "added after the block sum, second rounding")
    << " |\n";
  s << "| alignment | " << datapath::to_string(dp.alignment);
  if (dp.alignment != datapath::Alignment::exact) s << ", F = " << dp.fraction_bits << " bits below E";
  if (dp.exponent_floor) s << ", E ≥ " << *dp.exponent_floor;
  if (dp.sticky) s << ", one sticky bit per term";
  s << " |\n";
  s << "| accumulator | " << dp.accumulator.name;
  if (dp.accumulator_fraction_bits > 0) s << " keeping " << dp.accumulator_fraction_bits << " fraction bits";
  s << ", " << rounding_words(dp.accumulator_rounding)
    << (dp.flush_subnormal_outputs ? ", subnormal results flushed" : "") << " |\n";
  s << "| overflow | "
    << (dp.overflow == datapath::OverflowRule::infinity ? "infinity (±Inf whatever the rounding)"
        : dp.overflow == datapath::OverflowRule::ieee   ? "IEEE 754 §7.4"
                                                        : "saturate")
    << " |\n";
  if (dp.promote_every > 0 && dp.promotion_format) {
    s << "| promotion | every " << dp.promote_every << " products into " << dp.promotion_format->name << ", "
      << rounding_words(dp.promotion_rounding) << " |\n";
  }
  s << "| order along K | " << datapath::to_string(dp.order) << " |\n";
  s << "| output (c, d) | " << dp.output().name << " |\n";
  for (const auto& o : dp.open) s << "\nOpen: " << o << "\n";
  s << "\nStochastic rounding (if any) uses stream index = the row number of `dot.csv`.\n";
  return s.str();
}

std::filesystem::path write_dot_vectors(const std::filesystem::path& dir, const datapath::Datapath& dp,
                                        std::uint64_t seed) {
  const auto rows = dot_vectors(dp, seed);
  std::filesystem::path p = dir / "dot.csv";
  std::ostringstream out;
  out << "row,case,k,a,b,c,scale_a,scale_b,expected_result,expected_value,exact_value\n";
  const int da = (dp.a.bits + 3) / 4;
  const int db = (dp.b.bits + 3) / 4;
  const int dout = (dp.output().bits + 3) / 4;
  for (const auto& v : rows) {
    out << v.row << ',' << v.name << ',' << v.a.size() << ','
        << hex_list(std::span<const std::uint64_t>(v.a), da) << ','
        << hex_list(std::span<const std::uint64_t>(v.b), db) << ',' << hex(v.c, dout) << ','
        << join_ints(v.scale_a) << ',' << join_ints(v.scale_b) << ',' << hex(v.expected, dout) << ','
        << real(format::decode(dp.output(), v.expected)) << ',' << v.exact << '\n';
  }
  write_text(p, out.str());
  return p;
}

}  // namespace detail

std::string retarget_datapath_toml(std::string_view text, std::string_view origin,
                                   const datapath::Datapath& dp) {
  (void)text;  // the record itself carries every field of the file it was read from
  return "# " + dp.name + ": written by `lpemu proposal` from " + std::string(origin) +
         " with the inputs replaced.\n" + datapath::to_toml(dp);
}

}  // namespace lpemu::experiment
