// The bit-exact block fused multiply-add engine (the BFMA model of lpemu/datapath/datapath.hpp).
// All sums are formed exactly in integers (__int128, Boost cpp_int when wider); nothing is
// computed in floating point except decoding codes, which format::decode does exactly.
#include "lpemu/datapath/dot.hpp"

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <string>

#include <boost/multiprecision/cpp_int.hpp>

#include "datapath/engine.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::datapath {
namespace detail {
namespace {

using boost::multiprecision::cpp_int;
using format::RoundingMode;

int bit_width128(u128 x) {
  const auto hi = static_cast<std::uint64_t>(x >> 64);
  if (hi != 0) return 64 + static_cast<int>(std::bit_width(hi));
  return static_cast<int>(std::bit_width(static_cast<std::uint64_t>(x)));
}

/// A term of a block: value = ±mag·2^lsb, aligned by exponent e.
struct Term {
  u128 mag;
  int lsb;
  int e;
  bool neg;
};

/// A signed exact sum, reduced to at most 120 significant bits with the dropped bits jammed into
/// the last bit (safe: every rounding below keeps at most 64 bits).
struct Sum {
  u128 mag = 0;
  int qexp = 0;
  bool neg = false;
};

constexpr int kKeepBits = 120;

Sum from_i128(i128 s, int qexp) {
  Sum out;
  out.neg = s < 0;
  out.mag = out.neg ? static_cast<u128>(-s) : static_cast<u128>(s);
  out.qexp = qexp;
  const int w = bit_width128(out.mag);
  if (w > kKeepBits) {
    const int ex = w - kKeepBits;
    const bool sticky = (out.mag & ((u128{1} << ex) - 1)) != 0;
    out.mag = (out.mag >> ex) | (sticky ? 1 : 0);
    out.qexp += ex;
  }
  return out;
}

Sum from_cpp(const cpp_int& s, int qexp) {
  Sum out;
  out.neg = s < 0;
  cpp_int m = out.neg ? cpp_int(-s) : s;
  out.qexp = qexp;
  if (m == 0) return out;
  const int w = static_cast<int>(boost::multiprecision::msb(m)) + 1;
  if (w > kKeepBits) {
    const int ex = w - kKeepBits;
    const bool sticky = static_cast<int>(boost::multiprecision::lsb(m)) < ex;
    m >>= ex;
    if (sticky) m |= 1;
    out.qexp += ex;
  }
  u128 r = 0;
  for (int i = 1; i >= 0; --i) {
    r = (r << 64) | static_cast<std::uint64_t>((m >> (64 * i)) & cpp_int(~std::uint64_t{0}));
  }
  out.mag = r;
  return out;
}

/// Alignment of one term to quantum 2^q (the BFMA model for `truncate`): the signed
/// integer multiple of 2^q (times 2 plus a sticky bit when `sticky`).
i128 align_term(const Term& t, int q, Alignment mode, bool sticky) {
  const int s = q - t.lsb;
  u128 base = 0;
  bool rem_nonzero = false;
  if (s <= 0) {
    base = t.mag << (-s);
  } else {
    u128 rem = 0;
    if (s >= 128) {
      rem = t.mag;
    } else {
      base = t.mag >> s;
      rem = t.mag & ((u128{1} << s) - 1);
    }
    rem_nonzero = rem != 0;
    switch (mode) {
      case Alignment::exact:
      case Alignment::truncate: break;
      case Alignment::nearest_even: {
        if (s <= 128) {
          const u128 half = u128{1} << (s - 1);
          if (rem > half || (rem == half && (base & 1) != 0)) ++base;
        }
        break;
      }
      case Alignment::round_down:
        if (t.neg && rem_nonzero) ++base;
        break;
    }
  }
  if (sticky) base = (base << 1) | (rem_nonzero ? 1 : 0);
  const i128 v = static_cast<i128>(base);
  return t.neg ? -v : v;
}

struct AlignSpec {
  Alignment mode = Alignment::exact;
  int fraction_bits = 0;
  std::optional<int> floor;
  bool sticky = false;
};

/// Σ terms, exactly after alignment (the BFMA model): E = max(e_i, E_floor),
/// quantum 2^(E−F); `exact` keeps every bit.
Sum sum_terms(std::span<const Term> terms, const AlignSpec& spec) {
  if (terms.empty()) return {};
  const int nbits = static_cast<int>(std::bit_width(terms.size())) + 1;
  if (spec.mode == Alignment::exact) {
    int q = INT_MAX;
    int top = INT_MIN;
    for (const Term& t : terms) {
      q = std::min(q, t.lsb);
      top = std::max(top, t.lsb + bit_width128(t.mag));
    }
    if (top - q + nbits <= 126) {
      i128 s = 0;
      for (const Term& t : terms) {
        const i128 v = static_cast<i128>(t.mag << (t.lsb - q));
        s += t.neg ? -v : v;
      }
      return from_i128(s, q);
    }
    cpp_int s = 0;
    for (const Term& t : terms) {
      cpp_int v = cpp_int(static_cast<std::uint64_t>(t.mag >> 64)) << 64;
      v |= cpp_int(static_cast<std::uint64_t>(t.mag));
      v <<= (t.lsb - q);
      if (t.neg)
        s -= v;
      else
        s += v;
    }
    return from_cpp(s, q);
  }
  // BFMA model: E = max(e_i, e_c), then E = max(E, E_floor).
  int e_max = INT_MIN;
  for (const Term& t : terms) e_max = std::max(e_max, t.e);
  if (spec.floor) e_max = std::max(e_max, *spec.floor);
  // Step 5 (docs/tensor-core-model.md): quantum q = 2^(E−F); with a sticky bit one more position below it.
  const int q = e_max - spec.fraction_bits;
  const int qsum = spec.sticky ? q - 1 : q;
  // Every term is below 2^(E+2) (products' significands lie in [1, 4)), so aligned terms have
  // at most F + 3 bits; the sum needs log2(n) more.
  if (spec.fraction_bits + 4 + nbits <= 126) {
    i128 s = 0;
    for (const Term& t : terms) s += align_term(t, q, spec.mode, spec.sticky);
    return from_i128(s, qsum);
  }
  cpp_int s = 0;
  for (const Term& t : terms) {
    const i128 v = align_term(t, q, spec.mode, spec.sticky);
    const u128 m = v < 0 ? static_cast<u128>(-v) : static_cast<u128>(v);
    cpp_int c = (cpp_int(static_cast<std::uint64_t>(m >> 64)) << 64) | cpp_int(static_cast<std::uint64_t>(m));
    if (v < 0)
      s -= c;
    else
      s += c;
  }
  return from_cpp(s, qsum);
}

/// A value rounded to a fixed quantum: ±R·2^q.
struct Rounded {
  u128 r = 0;
  int q = 0;
  bool neg = false;
};

/// Rounds ±mag·2^qexp to a multiple of 2^q with `mode`; `rand` feeds stochastic rounding.
u128 round_at(bool neg, u128 mag, int qexp, int q, const ResultRounding& rr, std::uint32_t rand) {
  const int sh = q - qexp;
  if (sh <= 0) return mag << (-sh);
  u128 base = 0;
  u128 rem = mag;
  if (sh < 128) {
    base = mag >> sh;
    rem = mag & ((u128{1} << sh) - 1);
  }
  if (rem == 0) return base;
  // rem compared with half = 2^(sh−1); for sh > 128 rem is below half.
  int cmp = -1;
  if (sh <= 128) {
    const u128 half = u128{1} << (sh - 1);
    cmp = rem > half ? 1 : rem == half ? 0 : -1;
  }
  bool up = false;
  switch (rr.mode) {
    case RoundingMode::nearest_even: up = cmp > 0 || (cmp == 0 && (base & 1) != 0); break;
    case RoundingMode::nearest_away: up = cmp >= 0; break;
    case RoundingMode::toward_zero: break;
    case RoundingMode::toward_positive: up = !neg; break;
    case RoundingMode::toward_negative: up = neg; break;
    case RoundingMode::stochastic: {
      // The format layer's definition: the r leading bits of the discarded fraction plus r random
      // bits; a carry rounds away (probability floor(frac·2^r)/2^r).
      const int r = rr.sr_bits;
      u128 frac = 0;
      if (sh >= 128) {
        frac = sh - r >= 128 ? 0 : rem >> (sh - r);
      } else {
        frac = sh >= r ? rem >> (sh - r) : rem << (r - sh);
      }
      up = format::sr_carries(static_cast<std::uint64_t>(frac), r, rand);
      break;
    }
  }
  return base + (up ? 1 : 0);
}

/// Rounds ±mag·2^qexp to p fraction bits, exponent range unbounded above and subnormal
/// quantum 2^(emin−p) below (the BFMA model).
Rounded round_float(bool neg, u128 mag, int qexp, int p, int emin, const ResultRounding& rr,
                    std::uint32_t rand) {
  Rounded out;
  out.neg = neg;
  if (mag == 0) return out;
  const int e = qexp + bit_width128(mag) - 1;
  out.q = std::max(e, emin) - p;
  out.r = round_at(neg, mag, qexp, out.q, rr, rand);
  if (bit_width128(out.r) > p + 1) {
    out.r >>= 1;
    ++out.q;
  }
  return out;
}

std::uint64_t zero_code(const format::Format& f, bool neg) {
  if (f.kind == format::Kind::floating && neg && f.has_negative_zero()) return f.sign_bit();
  return 0;
}

std::uint64_t nan_code(const format::Format& f) {
  if (f.has_nan()) return f.nan_code();
  return 0;
}

std::uint64_t overflow_code(const format::Format& f, bool neg, OverflowRule rule, RoundingMode mode) {
  const std::uint64_t sign = neg ? f.sign_bit() : 0;
  bool to_max = rule == OverflowRule::saturate || (!f.has_inf() && !f.has_nan());
  if (rule == OverflowRule::ieee) {
    // IEEE 754 §7.4: roundTowardZero and the directed rounding toward the other sign give ±max.
    to_max = to_max || mode == RoundingMode::toward_zero || (mode == RoundingMode::toward_positive && neg) ||
             (mode == RoundingMode::toward_negative && !neg);
  }
  if (to_max) return sign | f.max_code;
  if (f.has_inf()) return sign | f.inf_code();
  if (f.specials == format::Specials::fnuz) return f.nan_code();
  return sign | f.nan_code();
}

struct OutSpec {
  const format::Format* fmt;
  int p;  ///< fraction bits kept (floats)
  ResultRounding rounding;
  OverflowRule overflow;
  bool ftz;
};

/// Rounds an exact sum into a code of spec.fmt.
std::uint64_t round_to_code(const Sum& s, bool zero_neg, const OutSpec& o, std::uint32_t rand) {
  const format::Format& f = *o.fmt;
  if (f.kind == format::Kind::integer) {
    // Fixed-point accumulator: value = code·2^−fraction_bits; saturates (overflow left open).
    const u128 r = s.mag == 0 ? 0 : round_at(s.neg, s.mag, s.qexp, -f.fraction_bits, o.rounding, rand);
    const std::uint64_t maxv = f.is_signed ? (std::uint64_t{1} << (f.bits - 1)) - 1 : f.code_mask();
    const std::uint64_t minv = f.is_signed ? (f.symmetric ? maxv : maxv + 1) : 0;
    if (s.neg) {
      const std::uint64_t v = r > minv ? minv : static_cast<std::uint64_t>(r);
      return (~v + 1) & f.code_mask();
    }
    const std::uint64_t v = r > maxv ? maxv : static_cast<std::uint64_t>(r);
    return v;
  }
  if (s.mag == 0) return zero_code(f, zero_neg);
  const Rounded r = round_float(s.neg, s.mag, s.qexp, o.p, f.emin, o.rounding, rand);
  if (r.r == 0) return zero_code(f, s.neg);
  const std::uint64_t sign = r.neg ? f.sign_bit() : 0;
  const u128 hidden = u128{1} << o.p;
  const int shift = f.mantissa_bits - o.p;
  if (r.r < hidden) {  // subnormal, quantum 2^(emin − p)
    if (!f.subnormals || o.ftz) return zero_code(f, r.neg);
    return sign | (static_cast<std::uint64_t>(r.r) << shift);
  }
  const int ev = r.q + o.p;
  if (ev > f.emax) return overflow_code(f, r.neg, o.overflow, o.rounding.mode);
  const std::uint64_t field = static_cast<std::uint64_t>(ev + f.bias);
  const std::uint64_t mag_code =
      (field << f.mantissa_bits) | (static_cast<std::uint64_t>(r.r - hidden) << shift);
  if (mag_code > f.max_code) return overflow_code(f, r.neg, o.overflow, o.rounding.mode);
  return sign | mag_code;
}

/// Random bits for the `event`-th rounding of output element `index` under `rr`.
std::uint32_t draw(const ResultRounding& rr, std::uint64_t index, std::uint64_t event) {
  if (rr.mode != RoundingMode::stochastic) return 0;
  return format::sr_random_bits(rr.seed, (index << 24) ^ event);
}

/// Special-value bookkeeping of one sum (the BFMA model: NaN in gives NaN, +Inf and −Inf
/// together give NaN, otherwise ±Inf).
struct Specials {
  bool nan = false;
  bool pinf = false;
  bool ninf = false;
  bool any() const { return nan || pinf || ninf; }
  void add_inf(bool neg) { (neg ? ninf : pinf) = true; }
  std::uint64_t code(const format::Format& f) const {
    if (nan || (pinf && ninf)) return nan_code(f);
    return overflow_code(f, ninf, OverflowRule::infinity, RoundingMode::nearest_even);
  }
};

Term to_term(const Operand& o) { return Term{o.mag, o.lsb, o.e, o.neg}; }

/// Runs one dot product through the datapath's structure.
class Engine {
 public:
  Engine(const Datapath& dp, std::span<const Operand> a, std::span<const Operand> b,
         const BlockScales& scales, std::uint64_t index)
      : dp_(dp),
        a_(a),
        b_(b),
        sa_(scales.a),
        sb_(scales.b),
        ma_(scales.a_significand),
        mb_(scales.b_significand),
        index_(index) {
    acc_.fmt = &dp.accumulator;
    acc_.p = dp.accumulator.kind == format::Kind::floating ? dp.accumulator_fraction_bits : 0;
    acc_.rounding = dp.accumulator_rounding;
    acc_.overflow = dp.overflow;
    acc_.ftz = dp.flush_subnormal_outputs;
    align_.mode = dp.alignment;
    align_.fraction_bits = dp.fraction_bits;
    align_.floor = dp.exponent_floor;
    align_.sticky = dp.sticky;
    terms_.reserve(static_cast<std::size_t>(std::max(dp.fused_terms, 1)) + 1);
  }

  std::uint64_t run(std::uint64_t c_code) {
    const std::size_t k = a_.size();
    if (dp_.promote_every <= 0) return run_order(0, k, c_code);
    // Promotion ([DSV3] §3.3.2): every N products the partial sum (started from +0) is added
    // into the wider accumulator, which holds c.
    const format::Format& pf = *dp_.promotion_format;
    OutSpec po{&pf, pf.kind == format::Kind::floating ? pf.mantissa_bits : 0, dp_.promotion_rounding,
               dp_.overflow, dp_.flush_subnormal_outputs};
    std::uint64_t acc = c_code;
    const auto step = static_cast<std::size_t>(dp_.promote_every);
    for (std::size_t s = 0; s < k; s += step) {
      const std::uint64_t part = run_order(s, std::min(k, s + step), zero_code(dp_.accumulator, false));
      acc = add2(pf, acc, dp_.accumulator, part, po);
    }
    return acc;
  }

 private:
  std::uint64_t run_order(std::size_t lo, std::size_t hi, std::uint64_t c_code) {
    const std::size_t len = hi - lo;
    const std::size_t n =
        dp_.fused_terms <= 0 ? std::max<std::size_t>(len, 1) : static_cast<std::size_t>(dp_.fused_terms);
    const std::uint64_t zero = zero_code(dp_.accumulator, false);
    switch (dp_.order) {
      case Order::sequential: {
        // BFMA model: consecutive blocks of n, c_{j+1} = d_j.
        std::uint64_t d = c_code;
        if (len == 0) return block(lo, lo, d);
        for (std::size_t s = lo; s < hi; s += n) d = block(s, std::min(hi, s + n), d);
        return d;
      }
      case Order::pairwise: {
        std::vector<std::uint64_t> parts;
        for (std::size_t s = lo; s < hi; s += n) parts.push_back(block(s, std::min(hi, s + n), zero));
        while (parts.size() > 1) {
          std::vector<std::uint64_t> next;
          for (std::size_t i = 0; i + 1 < parts.size(); i += 2) {
            next.push_back(add2(dp_.accumulator, parts[i], dp_.accumulator, parts[i + 1], acc_));
          }
          if (parts.size() % 2 == 1) next.push_back(parts.back());
          parts.swap(next);
        }
        if (parts.empty()) return block(lo, lo, c_code);
        return add2(dp_.accumulator, c_code, dp_.accumulator, parts[0], acc_);
      }
      case Order::split_k: {
        const auto chunks = static_cast<std::size_t>(std::max(dp_.split_chunks, 1));
        std::size_t size = (len + chunks - 1) / chunks;
        size = std::max<std::size_t>((size + n - 1) / n * n, n);
        std::uint64_t acc = c_code;
        if (len == 0) return block(lo, lo, c_code);
        for (std::size_t s = lo; s < hi; s += size) {
          const std::size_t e = std::min(hi, s + size);
          std::uint64_t d = zero;
          for (std::size_t t = s; t < e; t += n) d = block(t, std::min(e, t + n), d);
          acc = add2(dp_.accumulator, acc, dp_.accumulator, d, acc_);
        }
        return acc;
      }
    }
    return c_code;
  }

  int scale_of(std::span<const std::int32_t> s, std::size_t k) const {
    if (s.empty() || dp_.scale_block <= 0) return 0;
    return s[k / static_cast<std::size_t>(dp_.scale_block)];
  }

  // The product of a's and b's scale significands at k (1 for power-of-two scales).
  u128 significand_of(std::size_t k) const {
    if (dp_.scale_block <= 0) return 1;
    const std::size_t i = k / static_cast<std::size_t>(dp_.scale_block);
    return static_cast<u128>(ma_.empty() ? 1U : ma_[i]) * (mb_.empty() ? 1U : mb_[i]);
  }

  /// One block: d = c + Σ_{k in [lo, hi)} a_k·b_k (the BFMA model).
  std::uint64_t block(std::size_t lo, std::size_t hi, std::uint64_t c_code) {
    const format::Format& af = dp_.accumulator;
    Specials sp;
    terms_.clear();
    bool all_zero_neg = true;
    // Group scale application: exact sum per scale group, then scaled ([MMA-Sim] mxf4nvf4).
    const bool grouped = dp_.scale_application == ScaleApplication::group && dp_.group_size > 0;
    std::vector<Term>& group = group_;
    group.clear();
    std::size_t group_id = SIZE_MAX;
    auto flush_group = [&]() {
      if (group.empty()) return;
      const Sum g = sum_terms(group, AlignSpec{});
      group.clear();
      if (g.mag == 0) return;
      const std::size_t first = group_id * static_cast<std::size_t>(dp_.group_size);
      const int s = scale_of(sa_, first) + scale_of(sb_, first);
      // Non-power-of-two scales (NVFP4's E4M3): the exact group sum times both significands.
      const u128 mag = g.mag * significand_of(first);
      if (mag == 0) return;
      const int lsb = g.qexp + s;
      terms_.push_back(Term{mag, lsb, lsb + bit_width128(mag) - 1, g.neg});
    };
    for (std::size_t k = lo; k < hi; ++k) {
      const Operand& x = a_[k];
      const Operand& y = b_[k];
      const bool neg = x.neg != y.neg;
      if (x.kind == Kind::nan || y.kind == Kind::nan) {
        sp.nan = true;
        continue;
      }
      if (x.kind == Kind::inf || y.kind == Kind::inf) {
        if (x.kind == Kind::zero || y.kind == Kind::zero)
          sp.nan = true;  // Inf·0
        else
          sp.add_inf(neg);
        continue;
      }
      const int sa = scale_of(sa_, k);
      const int sb = scale_of(sb_, k);
      if (sa == kNanScale || sb == kNanScale) {
        sp.nan = true;
        continue;
      }
      // Step 1 (docs/tensor-core-model.md): products with a zero factor are dropped.
      if (x.kind == Kind::zero || y.kind == Kind::zero) {
        all_zero_neg = all_zero_neg && neg;
        continue;
      }
      all_zero_neg = false;
      // Step 2 (docs/tensor-core-model.md): exact product, exponent e_a + e_b, significand not renormalised.
      Term t{static_cast<u128>(x.mag) * y.mag, x.lsb + y.lsb, x.e + y.e, neg};
      if (dp_.product_format) {
        const format::Format& pf = *dp_.product_format;
        ResultRounding pr;
        pr.mode = dp_.product_rounding;
        const Rounded r = round_float(t.neg, t.mag, t.lsb, pf.mantissa_bits, pf.emin, pr, 0);
        if (r.r == 0) continue;
        if (r.q + bit_width128(r.r) - 1 > pf.emax) {
          sp.add_inf(t.neg);
          continue;
        }
        t = Term{r.r, r.q, std::max(r.q + bit_width128(r.r) - 1, pf.emin), r.neg};
      }
      if (grouped) {
        const std::size_t g = k / static_cast<std::size_t>(dp_.group_size);
        if (g != group_id) {
          flush_group();
          group_id = g;
        }
        group.push_back(t);
        continue;
      }
      if (dp_.scale_application == ScaleApplication::product) {
        // OCP MX v1.0 §6 / [MMA-Sim] mxf8f6f4: scale exponents added to the product exponent.
        t.lsb += sa + sb;
        t.e += sa + sb;
        if (const u128 sig = significand_of(k); sig != 1) {
          // A non-power-of-two scale: the exact product times both significands, renormalised.
          t.mag *= sig;
          if (t.mag == 0) continue;
          t.e = std::max(t.e, t.lsb + bit_width128(t.mag) - 1);
        }
      }
      terms_.push_back(t);
    }
    flush_group();

    const Operand c = decode_operand(af, c_code, false, dp_.addend_emin);
    if (c.kind == Kind::nan) sp.nan = true;
    if (c.kind == Kind::inf) sp.add_inf(c.neg);
    if (sp.any()) return sp.code(af);
    const bool c_zero_neg = c.kind == Kind::zero ? c.neg : false;
    if (dp_.addend == Addend::fused) {
      // Step 3 (docs/tensor-core-model.md): c joins the alignment unless it is zero.
      if (c.kind == Kind::finite) terms_.push_back(to_term(c));
      const Sum s = sum_terms(terms_, align_);
      return round_to_code(s, all_zero_neg && (c.kind != Kind::finite && c_zero_neg), acc_,
                           draw(acc_.rounding, index_, event_++));
    }
    // Late addend: round the product sum, then add c with a second rounding.
    const Sum s = sum_terms(terms_, align_);
    const std::uint64_t p = round_to_code(s, all_zero_neg, acc_, draw(acc_.rounding, index_, event_++));
    OutSpec late = acc_;
    late.rounding = dp_.late_rounding;
    return add2(af, c_code, af, p, late);
  }

  /// Exact x + y rounded by `o` (promotion, pairwise and split-K combination, late addend).
  std::uint64_t add2(const format::Format& fx, std::uint64_t x, const format::Format& fy, std::uint64_t y,
                     const OutSpec& o) {
    const Operand ox = decode_operand(fx, x, false);
    const Operand oy = decode_operand(fy, y, false);
    Specials sp;
    for (const Operand* op : {&ox, &oy}) {
      if (op->kind == Kind::nan) sp.nan = true;
      if (op->kind == Kind::inf) sp.add_inf(op->neg);
    }
    if (sp.any()) return sp.code(*o.fmt);
    Term t[2];
    std::size_t n = 0;
    if (ox.kind == Kind::finite) t[n++] = to_term(ox);
    if (oy.kind == Kind::finite) t[n++] = to_term(oy);
    const bool zero_neg = ox.kind == Kind::zero && oy.kind == Kind::zero && ox.neg && oy.neg;
    const Sum s = sum_terms(std::span<const Term>(t, n), AlignSpec{});
    const bool cancel_neg = n > 0 && s.mag == 0 && o.rounding.mode == RoundingMode::toward_negative;
    return round_to_code(s, zero_neg || cancel_neg, o, draw(o.rounding, index_, event_++));
  }

  const Datapath& dp_;
  std::span<const Operand> a_;
  std::span<const Operand> b_;
  std::span<const std::int32_t> sa_;
  std::span<const std::int32_t> sb_;
  std::span<const std::uint32_t> ma_;
  std::span<const std::uint32_t> mb_;
  std::uint64_t index_;
  std::uint64_t event_ = 0;
  OutSpec acc_{};
  AlignSpec align_;
  std::vector<Term> terms_;
  std::vector<Term> group_;
};

}  // namespace

Operand decode_operand(const format::Format& f, std::uint64_t code, bool flush, int e_clamp) {
  Operand o;
  const double x = format::decode(f, code);
  o.neg = std::signbit(x);
  if (std::isnan(x)) {
    o.kind = Kind::nan;
    return o;
  }
  if (std::isinf(x)) {
    o.kind = Kind::inf;
    return o;
  }
  if (x == 0.0 || (flush && f.kind == format::Kind::floating && std::fabs(x) < f.min_normal)) {
    o.kind = Kind::zero;
    return o;
  }
  o.kind = Kind::finite;
  const double ax = std::fabs(x);
  if (f.kind == format::Kind::integer) {
    o.lsb = -f.fraction_bits;
    o.mag = static_cast<std::uint64_t>(std::ldexp(ax, f.fraction_bits));
    o.e = o.lsb + static_cast<int>(std::bit_width(o.mag)) - 1;
    return o;
  }
  // BFMA model: e(x) = max(floor(log2|x|), emin); ilogb is exact.
  const int ex = std::ilogb(ax);
  const int e_fmt = std::max(ex, f.emin);
  o.lsb = e_fmt - f.mantissa_bits;
  o.mag = static_cast<std::uint64_t>(std::ldexp(ax, -o.lsb));
  o.e = std::max(ex, e_clamp);
  return o;
}

Operand decode_operand(const format::Format& f, std::uint64_t code, bool flush) {
  return decode_operand(f, code, flush, f.kind == format::Kind::floating ? f.emin : INT_MIN / 4);
}

void require_operand_fits(const format::Format& f, std::uint64_t code, const char* what, std::size_t index) {
  if ((code & ~f.code_mask()) == 0) return;
  try {
    format::require_code_fits(f, code, std::string(what) + "[" + std::to_string(index) + "]");
  } catch (const SpecError& e) {
    throw ShapeError(e.what());
  }
}

std::uint64_t finish_block(const Datapath& dp, i128 s, int qexp, bool zero_neg, std::uint64_t c_code,
                           bool add_c) {
  OutSpec o{&dp.accumulator, dp.accumulator.kind == format::Kind::floating ? dp.accumulator_fraction_bits : 0,
            dp.accumulator_rounding, dp.overflow, dp.flush_subnormal_outputs};
  if (!add_c) return round_to_code(from_i128(s, qexp), zero_neg, o, 0);
  const Operand c = decode_operand(dp.accumulator, c_code, false);
  if (c.kind == Kind::finite) {
    const u128 m = s < 0 ? static_cast<u128>(-s) : static_cast<u128>(s);
    const Term t[2] = {Term{m, qexp, 0, s < 0}, to_term(c)};
    const std::size_t n = m == 0 ? 1 : 2;
    return round_to_code(sum_terms(std::span<const Term>(t + (2 - n), n), AlignSpec{}), false, o, 0);
  }
  return round_to_code(from_i128(s, qexp), zero_neg && c.neg, o, 0);
}

std::uint64_t dot_decoded(const Datapath& dp, std::span<const Operand> a, std::span<const Operand> b,
                          std::uint64_t c_code, const BlockScales& scales, std::uint64_t index) {
  Engine e(dp, a, b, scales, index);
  return e.run(c_code);
}

}  // namespace detail

std::uint64_t dot(const Datapath& dp, std::span<const std::uint64_t> a, std::span<const std::uint64_t> b,
                  std::uint64_t c, const BlockScales& scales, std::uint64_t index) {
  if (a.size() != b.size()) {
    throw ShapeError("dot: a has " + std::to_string(a.size()) + " elements but b has " +
                     std::to_string(b.size()));
  }
  const std::size_t nscales = dp.scale_block > 0 ? (a.size() + static_cast<std::size_t>(dp.scale_block) - 1) /
                                                       static_cast<std::size_t>(dp.scale_block)
                                                 : 0;
  for (const std::size_t given :
       {scales.a.size(), scales.b.size(), scales.a_significand.size(), scales.b_significand.size()}) {
    if (given != 0 && given != nscales) {
      throw ShapeError("dot: " + std::to_string(given) + " block scales given, expected " +
                       std::to_string(nscales) + " (one per " + std::to_string(dp.scale_block) +
                       " elements)");
    }
  }
  detail::require_operand_fits(dp.output(), c, "c", 0);
  std::vector<detail::Operand> da(a.size());
  std::vector<detail::Operand> db(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    detail::require_operand_fits(dp.a, a[i], "a", i);
    detail::require_operand_fits(dp.b, b[i], "b", i);
    da[i] = detail::decode_operand(dp.a, a[i], dp.flush_subnormal_inputs);
    db[i] = detail::decode_operand(dp.b, b[i], dp.flush_subnormal_inputs);
  }
  return detail::dot_decoded(dp, da, db, c, scales, index);
}

}  // namespace lpemu::datapath
