// Every code of every built-in format of at most 16 bits, against the field-formula reference.
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/format/codec.hpp"
#include "support/format_cartesian.hpp"
#include "support/reference/element_reference.hpp"
#include "support/test_support.hpp"

namespace {

using namespace lpemu::format;
using lpemu::test::for_each_builtin_format;
using lpemu::test::ref::Table;

std::string code_text(const Format& f, std::uint64_t c) {
  return hex_code(f, c) + " (" + fielded_binary(f, c) + ")";
}

TEST_CASE("every code decodes to its field-formula value", "[format][exhaustive]") {
  for_each_builtin_format([](const Format& f) {
    if (f.bits > 16) return;
    const Table t(f);
    int bad = 0;
    for (std::uint64_t c = 0; c < (std::uint64_t{1} << f.bits); ++c) {
      const double want = t.value(c);
      const double got = decode(f, c);
      bool ok = false;
      if (std::isnan(want)) {
        // NaN keeps its sign, except fnuz's single, unsigned NaN.
        ok = std::isnan(got) && (f.specials == Specials::fnuz || std::signbit(got) == std::signbit(want));
      } else {
        ok = lpemu::test::same_bits_or_nan(got, want);
      }
      if (!ok && bad++ < 5) {
        FAIL_CHECK(f.name << " code " << code_text(f, c) << ": expected " << want << ", got " << got);
      }
      if (is_nan_code(f, c) != t.is_nan(c) || is_inf_code(f, c) != t.is_inf(c)) {
        if (bad++ < 5) FAIL_CHECK(f.name << " code " << code_text(f, c) << ": NaN/Inf class differs");
      }
    }
    CHECK(bad == 0);
  });
}

TEST_CASE("bulk decode equals the field-formula value of every code", "[format][exhaustive]") {
  for_each_builtin_format([](const Format& f) {
    if (f.bits > 16 || !fits_in_float(f)) return;
    const Table t(f);
    const std::size_t n = std::size_t{1} << f.bits;
    std::vector<float> out(n);
    std::vector<float> out_small(3);
    if (f.bits <= 8) {
      std::vector<std::uint8_t> in(n);
      for (std::size_t c = 0; c < n; ++c) in[c] = static_cast<std::uint8_t>(c);
      decode(f, std::span<const std::uint8_t>(in), std::span<float>(out));
      // Short spans take the per-element path rather than the table.
      decode(f, std::span<const std::uint8_t>(in.data() + n - 3, 3), std::span<float>(out_small));
    } else {
      std::vector<std::uint16_t> in(n);
      for (std::size_t c = 0; c < n; ++c) in[c] = static_cast<std::uint16_t>(c);
      decode(f, std::span<const std::uint16_t>(in), std::span<float>(out));
      decode(f, std::span<const std::uint16_t>(in.data() + n - 3, 3), std::span<float>(out_small));
    }
    int bad = 0;
    for (std::size_t c = 0; c < n; ++c) {
      const double want = t.value(c);
      const bool ok = std::isnan(want) ? std::isnan(out[c])
                                       : std::bit_cast<std::uint32_t>(static_cast<float>(want)) ==
                                             std::bit_cast<std::uint32_t>(out[c]);
      if (!ok && bad++ < 5) FAIL_CHECK(f.name << " code " << code_text(f, c) << ": bulk decode " << out[c]);
    }
    for (std::size_t k = 0; k < 3; ++k) {
      CHECK(std::bit_cast<std::uint32_t>(out_small[k]) == std::bit_cast<std::uint32_t>(out[n - 3 + k]));
    }
    CHECK(bad == 0);
  });
}

TEST_CASE("encode(decode(c)) == c for every canonical non-NaN code in every mode and policy",
          "[format][exhaustive]") {
  for_each_builtin_format([](const Format& f) {
    if (f.bits > 16) return;
    const Table t(f);
    int bad = 0;
    for (const auto mode : kAllRoundingModes) {
      for (const auto policy : kAllOverflowPolicies) {
        ConvertOptions o;
        o.rounding = mode;
        o.overflow = policy;
        o.seed = 7;
        for (std::uint64_t c = 0; c < (std::uint64_t{1} << f.bits); ++c) {
          if (t.is_nan(c)) continue;
          const double v = decode(f, c);
          // Non-canonical codes (unused subnormal codes of formats without subnormals, the
          // excluded most-negative code of a symmetric integer) re-encode to their canonical code.
          const std::uint64_t want = t.is_canonical(c) ? c : t.round(t.value(c), {});
          // Inf under saturate becomes max (OCP saturating conversion).
          const std::uint64_t expect_sat = t.is_inf(c) && policy == Overflow::saturate
                                               ? t.round(v, {mode, policy, 0, 32, false, false})
                                               : want;
          const std::uint64_t got = encode(f, v, o, c);
          if (got != expect_sat && bad++ < 5) {
            FAIL_CHECK(f.name << " " << to_string(mode) << " " << to_string(policy) << ": code "
                              << code_text(f, c) << " -> " << v << " -> " << code_text(f, got));
          }
        }
      }
    }
    CHECK(bad == 0);
  });
}

TEST_CASE("NaN codes: every NaN code decodes to NaN and NaN encodes to the canonical NaN",
          "[format][exhaustive]") {
  for_each_builtin_format([](const Format& f) {
    if (f.bits > 16) return;
    const Table t(f);
    int nan_codes = 0;
    for (std::uint64_t c = 0; c < (std::uint64_t{1} << f.bits); ++c) {
      if (!t.is_nan(c)) continue;
      ++nan_codes;
      INFO(f.name << " code " << code_text(f, c));
      CHECK(std::isnan(decode(f, c)));
      // A NaN re-encodes to the canonical NaN of its sign, in every policy.
      for (const auto policy : kAllOverflowPolicies) {
        ConvertOptions o;
        o.overflow = policy;
        CHECK(encode(f, decode(f, c), o) == t.nan_code(std::signbit(decode(f, c))));
      }
    }
    INFO(f.name);
    switch (f.specials) {
      case Specials::ieee: CHECK(nan_codes == 2 * ((1 << f.mantissa_bits) - 1)); break;
      case Specials::fn: CHECK(nan_codes == (f.is_signed ? 2 : 1)); break;
      case Specials::fnuz: CHECK(nan_codes == 1); break;
      case Specials::none: CHECK(nan_codes == 0); break;
    }
    if (f.kind == Kind::floating && f.has_nan()) {
      CHECK(encode(f, std::numeric_limits<double>::quiet_NaN()) == t.nan_code(false));
      CHECK(encode(f, -std::numeric_limits<double>::quiet_NaN()) == t.nan_code(true));
    } else {
      // No NaN: NaN in gives +0 (lpemu's choice; ml_dtypes v0.6.0 gives the opposite-sign zero).
      CHECK(encode(f, std::numeric_limits<double>::quiet_NaN()) == 0);
      CHECK(encode(f, -std::numeric_limits<double>::quiet_NaN()) == 0);
    }
  });
}

TEST_CASE("signed zeros: +0 and -0 encode and decode per the format's zero rules", "[format][exhaustive]") {
  for_each_builtin_format([](const Format& f) {
    if (f.bits > 16) return;
    const Table t(f);
    INFO(f.name);
    if (!f.has_zero) {
      CHECK(t.values().front() > 0);
      CHECK(is_nan_code(f, encode(f, 0.0)));  // e8m0: no zero, native gives NaN
      ConvertOptions sat;
      sat.overflow = Overflow::saturate;
      CHECK(encode(f, 0.0, sat) == 0);
      return;
    }
    CHECK(encode(f, 0.0) == 0);
    CHECK(std::bit_cast<std::uint64_t>(decode(f, 0)) == 0);
    const bool neg_zero = f.kind == Kind::floating && f.is_signed && f.specials != Specials::fnuz;
    const std::uint64_t nz = neg_zero ? std::uint64_t{1} << (f.bits - 1) : 0;
    CHECK(encode(f, -0.0) == nz);
    if (neg_zero) CHECK(std::signbit(decode(f, nz)));
  });
}

TEST_CASE("derived limits of every format agree with its value table", "[format][exhaustive]") {
  for_each_builtin_format([](const Format& f) {
    if (f.bits > 16) return;
    const Table t(f);
    INFO(f.name);
    CHECK(f.max_finite == t.max_finite());
    CHECK(f.lowest == t.lowest());
    CHECK(f.min_subnormal == t.min_positive());
    if (f.kind == Kind::floating) CHECK(f.min_normal == t.min_normal());
  });
}

}  // namespace
