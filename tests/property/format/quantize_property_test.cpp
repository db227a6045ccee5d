// Invariants of quantize / encode / decode, on random bit patterns so that
// subnormals, huge values, Inf and NaN all occur. Built-in formats and user formats (odd
// biases, no subnormals, unsigned, fnuz, zero mantissa bits, integers of 2..32 bits).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <tbb/global_control.h>
#include <catch2/catch.hpp>

#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "support/format_cartesian.hpp"
#include "support/test_support.hpp"

namespace {

using namespace lpemu::format;
using lpemu::test::hex32;
using lpemu::test::same_bits_or_nan;

constexpr std::uint64_t kSeed = 20261202;

std::vector<Format> formats_under_test() {
  std::vector<Format> out;
  lpemu::test::for_each_builtin_format([&](const Format& f) { out.push_back(f); });
  out.push_back(make_float("e3m3_bias5", 3, 3, 5, Specials::ieee));
  out.push_back(make_float("e4m2_bias3_nosub", 4, 2, 3, Specials::fn, false));
  out.push_back(make_float("ue4m3_unsigned", 4, 3, 7, Specials::none, true, false));
  out.push_back(make_float("ue5m3_fn_unsigned", 5, 3, 20, Specials::fn, false, false));
  out.push_back(make_float("e5m4_fnuz_bias20", 5, 4, 20, Specials::fnuz));
  out.push_back(make_float("e2m5_bias_minus1", 2, 5, -1, Specials::none));
  out.push_back(make_float("e3m0_nosub", 3, 0, 2, Specials::none, false));
  out.push_back(make_float("e6m9_bias40", 6, 9, 40, Specials::ieee, false));
  out.push_back(make_float("e11m20_wide", 11, 20, 1023, Specials::ieee));
  out.push_back(make_int("int2", 2));
  out.push_back(make_int("uint3", 3, false));
  out.push_back(make_int("int12_f5", 12, true, 5));
  out.push_back(make_int("int8_fm2_sym", 8, true, -2, true));
  out.push_back(make_int("int32_f16", 32, true, 16));
  out.push_back(make_int("uint32", 32, false));
  return out;
}

// Random float32 bit patterns, as doubles (so float and double paths see the same inputs).
std::vector<double> random_inputs(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> out(n);
  for (auto& x : out) x = static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  return out;
}

ConvertOptions with(RoundingMode m, Overflow p = Overflow::native) {
  ConvertOptions o;
  o.rounding = m;
  o.overflow = p;
  o.seed = 42;
  return o;
}

bool deterministic(RoundingMode m) { return m != RoundingMode::stochastic; }

TEST_CASE("quantize is monotone for every deterministic mode", "[format][property]") {
  auto xs = random_inputs(20000, kSeed);
  xs.erase(std::remove_if(xs.begin(), xs.end(), [](double x) { return std::isnan(x); }), xs.end());
  std::sort(xs.begin(), xs.end());
  for (const auto& f : formats_under_test()) {
    for (const auto mode : kAllRoundingModes) {
      if (!deterministic(mode)) continue;
      for (const auto policy : kAllOverflowPolicies) {
        double prev = -std::numeric_limits<double>::infinity();
        double prev_x = 0;
        int bad = 0;
        for (const double x : xs) {
          const double q = quantize(f, x, with(mode, policy));
          if (std::isnan(q)) continue;  // NaN outcomes (unsigned negatives, fn overflow) are unordered
          if (q < prev && bad++ < 3) {
            FAIL_CHECK(f.name << " " << to_string(mode) << " " << to_string(policy) << ": q(" << prev_x
                              << ") = " << prev << " > q(" << x << ") = " << q);
          }
          prev = q;
          prev_x = x;
        }
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("quantize is idempotent and decode(encode(x)) equals quantize(x)", "[format][property]") {
  const auto xs = random_inputs(20000, kSeed + 1);
  for (const auto& f : formats_under_test()) {
    for (const auto mode : kAllRoundingModes) {
      for (const auto policy : kAllOverflowPolicies) {
        const auto o = with(mode, policy);
        int bad = 0;
        for (std::size_t i = 0; i < xs.size(); ++i) {
          const double q = quantize(f, xs[i], o, i);
          const double qq = quantize(f, q, o, i + 7);
          const double dq = decode(f, encode(f, xs[i], o, i));
          const bool ok =
              same_bits_or_nan(q, qq) && (same_bits_or_nan(q, dq) || (std::isnan(q) && std::isnan(dq)));
          if (!ok && bad++ < 3) {
            FAIL_CHECK(f.name << " " << to_string(mode) << " " << to_string(policy) << ": x = " << xs[i]
                              << ", q = " << q << ", q(q) = " << qq << ", decode(encode) = " << dq);
          }
        }
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("quantize is sign-symmetric for symmetric modes and q_up(-x) = -q_down(x)", "[format][property]") {
  const auto xs = random_inputs(20000, kSeed + 2);
  for (const auto& f : formats_under_test()) {
    // Two's complement ranges are asymmetric (int8: -128..127) and unsigned formats have no negatives.
    if (!f.is_signed || (f.kind == Kind::integer && !f.symmetric)) continue;
    int bad = 0;
    for (const auto policy : kAllOverflowPolicies) {
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const double x = xs[i];
        if (std::isnan(x)) continue;
        for (const auto mode : {RoundingMode::nearest_even, RoundingMode::nearest_away,
                                RoundingMode::toward_zero, RoundingMode::stochastic}) {
          const double a = quantize(f, -x, with(mode, policy), i);
          const double b = quantize(f, x, with(mode, policy), i);
          // Compared as values: fnuz has no -0 (and a single NaN).
          if (!((a == -b) || (std::isnan(a) && std::isnan(b))) && bad++ < 3) {
            FAIL_CHECK(f.name << " " << to_string(mode) << " " << to_string(policy) << ": q(-x) = " << a
                              << ", q(x) = " << b << ", x = " << x);
          }
        }
        const double up = quantize(f, -x, with(RoundingMode::toward_positive, policy));
        const double down = quantize(f, x, with(RoundingMode::toward_negative, policy));
        if (!((up == -down) || (std::isnan(up) && std::isnan(down))) && bad++ < 3) {
          FAIL_CHECK(f.name << " " << to_string(policy) << ": q_up(-x) = " << up << ", q_down(x) = " << down
                            << ", x = " << x);
        }
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("q_down(x) <= x <= q_up(x) and they are adjacent values", "[format][property]") {
  const auto xs = random_inputs(20000, kSeed + 3);
  const auto sat = [](RoundingMode m) { return with(m, Overflow::saturate); };
  for (const auto& f : formats_under_test()) {
    int bad = 0;
    int in_range = 0;
    for (const double x : xs) {
      if (std::isnan(x) || x > f.max_finite || x < f.lowest) continue;
      if (!f.has_zero && x < f.min_normal) continue;  // the minimum absorbs underflow (e8m0)
      ++in_range;
      const double down = quantize(f, x, sat(RoundingMode::toward_negative));
      const double up = quantize(f, x, sat(RoundingMode::toward_positive));
      bool ok = down <= x && x <= up;
      if (ok && down < up) {
        // Adjacent: the smallest value above `down` is `up`.
        const double next = quantize(f, std::nextafter(down, std::numeric_limits<double>::infinity()),
                                     sat(RoundingMode::toward_positive));
        ok = next == up;
      }
      if (ok && down == up) ok = down == x;
      if (!ok && bad++ < 3) FAIL_CHECK(f.name << ": x = " << x << ", q_down = " << down << ", q_up = " << up);
    }
    CHECK(bad == 0);
    CHECK(in_range > 0);
  }
}

TEST_CASE("stochastic rounding returns only the two neighbours", "[format][property]") {
  const auto xs = random_inputs(5000, kSeed + 4);
  for (const auto& f : formats_under_test()) {
    int bad = 0;
    for (const int r : {1, 4, 32}) {
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const double x = xs[i];
        if (std::isnan(x)) continue;
        auto o = with(RoundingMode::stochastic, Overflow::saturate);
        o.sr_bits = r;
        const double down = quantize(f, x, with(RoundingMode::toward_negative, Overflow::saturate));
        const double up = quantize(f, x, with(RoundingMode::toward_positive, Overflow::saturate));
        for (std::uint64_t k = 0; k < 8; ++k) {
          o.seed = k;
          const double q = quantize(f, x, o, i * 8 + k);
          if (q != down && q != up && bad++ < 3) {
            FAIL_CHECK(f.name << " sr_bits " << r << ": x = " << x << " gave " << q << ", neighbours " << down
                              << ", " << up);
          }
        }
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("stochastic rounding is unbiased within 5 standard deviations (seeded frequency test)",
          "[format][property]") {
  // P(round up) must be floor(frac * 2^r) / 2^r, frac = (|x| - |q_down|) / gap.
  const auto& reg = Registry::builtin();
  constexpr std::size_t kTrials = 1 << 18;
  struct Case {
    const char* format;
    float x;
    int sr_bits;
  };
  for (const Case& c :
       {Case{"fp8_e4m3", 1.3F, 32}, Case{"fp8_e4m3", -0.0047F, 32}, Case{"fp8_e5m2", 3000.7F, 32},
        Case{"fp4_e2m1", 2.3F, 3}, Case{"fp6_e2m3", -0.3F, 2}, Case{"bf16", 1.00390625F * 1.3F, 32},
        Case{"int8", 17.9F, 8}, Case{"fp8_e4m3", 1.3F, 1}}) {
    const Format& f = reg.get(c.format);
    const double down = quantize(f, c.x, with(RoundingMode::toward_zero, Overflow::saturate));
    const double up = quantize(
        f, c.x,
        with(c.x < 0 ? RoundingMode::toward_negative : RoundingMode::toward_positive, Overflow::saturate));
    REQUIRE(up != down);
    const double frac = (std::fabs(static_cast<double>(c.x)) - std::fabs(down)) / std::fabs(up - down);
    const double p = std::floor(std::ldexp(frac, c.sr_bits)) / std::ldexp(1.0, c.sr_bits);
    std::vector<float> in(kTrials, c.x);
    std::vector<float> out(kTrials);
    ConvertOptions o = with(RoundingMode::stochastic, Overflow::saturate);
    o.sr_bits = c.sr_bits;
    o.seed = 0xC0FFEE;
    quantize(f, std::span<const float>(in), std::span<float>(out), o);
    std::size_t ups = 0;
    for (const float q : out) {
      REQUIRE((static_cast<double>(q) == up || static_cast<double>(q) == down));
      ups += static_cast<double>(q) == up ? 1 : 0;
    }
    const double phat = static_cast<double>(ups) / kTrials;
    const double sigma = std::sqrt(std::max(p * (1 - p), 1e-12) / kTrials);
    INFO(c.format << " x = " << c.x << " sr_bits " << c.sr_bits << ": p = " << p << ", observed " << phat);
    CHECK(std::fabs(phat - p) <= 5 * sigma + 1e-9);
  }
}

TEST_CASE("stochastic rounding is reproducible and depends on seed and index only", "[format][property]") {
  const auto& f = Registry::builtin().get("fp8_e4m3");
  const auto xs = random_inputs(100000, kSeed + 5);
  std::vector<float> in(xs.size());
  std::transform(xs.begin(), xs.end(), in.begin(), [](double x) { return static_cast<float>(x); });
  auto o = with(RoundingMode::stochastic);
  o.seed = 1234;
  o.index_offset = 77;
  std::vector<std::uint8_t> a(in.size()), b(in.size()), c(in.size()), halves(in.size());
  encode(f, std::span<const float>(in), std::span<std::uint8_t>(a), o);
  encode(f, std::span<const float>(in), std::span<std::uint8_t>(b), o);
  CHECK(a == b);
  // Element i uses index index_offset + i: two halves with shifted offsets give the same codes,
  // and so does the scalar call with the explicit index.
  const std::size_t h = in.size() / 2 + 3;
  encode(f, std::span<const float>(in.data(), h), std::span<std::uint8_t>(halves.data(), h), o);
  auto o2 = o;
  o2.index_offset = o.index_offset + h;
  encode(f, std::span<const float>(in.data() + h, in.size() - h),
         std::span<std::uint8_t>(halves.data() + h, in.size() - h), o2);
  CHECK(a == halves);
  int bad = 0;
  for (std::size_t i = 0; i < in.size(); i += 97)
    bad += encode(f, in[i], o, o.index_offset + i) != a[i] ? 1 : 0;
  CHECK(bad == 0);
  o.seed = 1235;
  encode(f, std::span<const float>(in), std::span<std::uint8_t>(c), o);
  CHECK(a != c);
}

TEST_CASE("bulk results are bit-identical with 1 and 2 threads", "[format][property]") {
  const auto xs = random_inputs(1 << 20, kSeed + 6);  // 32 chunks of the bulk kernels
  std::vector<float> in(xs.size());
  std::transform(xs.begin(), xs.end(), in.begin(), [](double x) { return static_cast<float>(x); });
  const auto& reg = Registry::builtin();
  for (const char* name : {"fp8_e4m3", "fp4_e2m1", "bf16", "e8m0", "int8"}) {
    const Format& f = reg.get(name);
    for (const auto mode : {RoundingMode::stochastic, RoundingMode::nearest_even}) {
      auto o = with(mode);
      o.seed = 9;
      o.sr_bits = 11;
      std::vector<std::uint16_t> c1(in.size()), c2(in.size());
      std::vector<float> v1(in.size()), v2(in.size());
      {
        const tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
        encode(f, std::span<const float>(in), std::span<std::uint16_t>(c1), o);
        quantize(f, std::span<const float>(in), std::span<float>(v1), o);
      }
      {
        const tbb::global_control two(tbb::global_control::max_allowed_parallelism, 2);
        encode(f, std::span<const float>(in), std::span<std::uint16_t>(c2), o);
        quantize(f, std::span<const float>(in), std::span<float>(v2), o);
      }
      INFO(name << " " << to_string(mode));
      CHECK(c1 == c2);
      CHECK(std::memcmp(v1.data(), v2.data(), v1.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("bulk float paths equal the scalar paths for user formats on random bit patterns",
          "[format][property]") {
  const auto xs = random_inputs(1 << 16, kSeed + 7);
  std::vector<float> in(xs.size());
  std::transform(xs.begin(), xs.end(), in.begin(), [](double x) { return static_cast<float>(x); });
  for (const auto& f : formats_under_test()) {
    if (f.bits > 32) continue;
    for (const auto mode : kAllRoundingModes) {
      for (const auto policy : kAllOverflowPolicies) {
        auto o = with(mode, policy);
        o.sr_bits = 9;
        o.flush_subnormal_outputs = mode == RoundingMode::toward_zero;
        std::vector<std::uint32_t> codes(in.size());
        std::vector<float> vals(in.size());
        encode(f, std::span<const float>(in), std::span<std::uint32_t>(codes), o);
        const bool float_out = fits_in_float(f);
        if (float_out) quantize(f, std::span<const float>(in), std::span<float>(vals), o);
        int bad = 0;
        for (std::size_t i = 0; i < in.size(); ++i) {
          const std::uint64_t want = encode(f, in[i], o, i);
          const double want_v = quantize(f, in[i], o, i);
          bool ok = codes[i] == want;
          if (float_out) ok = ok && same_bits_or_nan(static_cast<double>(vals[i]), want_v);
          if (!ok && bad++ < 3) {
            FAIL_CHECK(f.name << " " << to_string(mode) << " " << to_string(policy) << ": input "
                              << hex32(in[i]) << ": scalar code " << want << " bulk " << codes[i]
                              << ", scalar value " << want_v << " bulk " << vals[i]);
          }
        }
        CHECK(bad == 0);
      }
    }
  }
}

}  // namespace
