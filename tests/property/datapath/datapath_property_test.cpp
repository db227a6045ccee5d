// Invariants of the datapath engine on random inputs. The references here are independent of
// src/datapath: exact sums in Boost cpp_rational and rounding by neighbour search over fp32 codes.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <hwy/targets.h>
#include <tbb/global_control.h>
#include <boost/multiprecision/cpp_int.hpp>
#include <catch2/catch.hpp>

#include "lpemu/datapath/dot.hpp"
#include "lpemu/datapath/exact.hpp"
#include "lpemu/datapath/gemm.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"

namespace {

using namespace lpemu::datapath;
using boost::multiprecision::cpp_rational;
using lpemu::format::Registry;

cpp_rational exact_of(double x) {
  int e = 0;
  const double fr = std::frexp(x, &e);
  cpp_rational r(static_cast<std::int64_t>(std::ldexp(fr, 53)));
  e -= 53;
  if (e >= 0) return r * cpp_rational(boost::multiprecision::cpp_int(1) << e);
  return r / cpp_rational(boost::multiprecision::cpp_int(1) << -e);
}

cpp_rational value_of_fp32_code(std::uint32_t code) {
  return exact_of(static_cast<double>(std::bit_cast<float>(code)));
}

// Round-to-nearest-even of an exact rational to fp32 by binary search over codes (reference).
std::uint32_t rne_fp32(const cpp_rational& x) {
  const bool neg = x < 0;
  const cpp_rational ax = neg ? cpp_rational(-x) : x;
  std::uint32_t lo = 0;
  std::uint32_t hi = 0x7f7fffff;
  if (ax >= value_of_fp32_code(hi)) {
    lo = hi;
  } else {
    while (lo < hi) {  // largest code with value <= ax
      const std::uint32_t mid = lo + (hi - lo + 1) / 2;
      if (value_of_fp32_code(mid) <= ax)
        lo = mid;
      else
        hi = mid - 1;
    }
  }
  const cpp_rational vlo = value_of_fp32_code(lo);
  // Next value up: max finite rounds toward 2^128 (overflow) past its midpoint.
  const cpp_rational vhi =
      lo == 0x7f7fffff ? cpp_rational(boost::multiprecision::cpp_int(1) << 128) : value_of_fp32_code(lo + 1);
  const cpp_rational mid = (vlo + vhi) / 2;
  std::uint32_t r = lo;
  if (ax > mid || (ax == mid && (lo & 1) != 0)) r = lo + 1;
  if (r > 0x7f7fffff) r = 0x7f800000;
  return (neg ? 0x80000000u : 0u) | r;
}

std::uint64_t random_finite(std::mt19937_64& rng, const lpemu::format::Format& f) {
  for (;;) {
    const std::uint64_t c = rng() & f.code_mask();
    if (std::isfinite(lpemu::format::decode(f, c))) return c;
  }
}

bool same_value(std::uint64_t got, std::uint32_t want) {
  if (got == want) return true;
  return ((got | want) & 0x7fffffffu) == 0;  // ±0: sign of an exact zero not compared here
}

TEST_CASE("ideal equals the correctly rounded exact sum on random bit patterns", "[datapath][property]") {
  const auto& reg = DatapathRegistry::builtin();
  for (const char* in : {"fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"}) {
    Datapath dp = reg.get("ideal");
    dp.a = dp.b = Registry::builtin().get(in);
    std::mt19937_64 rng(1234);
    for (int trial = 0; trial < 300; ++trial) {
      const std::size_t k = 1 + rng() % 40;
      std::vector<std::uint64_t> a(k), b(k);
      cpp_rational sum = 0;
      for (std::size_t i = 0; i < k; ++i) {
        a[i] = random_finite(rng, dp.a);
        b[i] = random_finite(rng, dp.b);
        sum += exact_of(lpemu::format::decode(dp.a, a[i])) * exact_of(lpemu::format::decode(dp.b, b[i]));
      }
      const std::uint64_t c = random_finite(rng, dp.output());
      sum += exact_of(lpemu::format::decode(dp.output(), c));
      const std::uint32_t want = rne_fp32(sum);
      const std::uint64_t got = dot(dp, a, b, c);
      INFO(in << " trial " << trial << " k " << k << " want " << std::hex << want << " got " << got);
      CHECK(same_value(got, want));
      // exact_dot agrees with the rational reference.
      const ExactValue ev = exact_dot(dp, a, b, c);
      cpp_rational ev_value = 0;
      for (std::size_t i = ev.magnitude.size(); i-- > 0;)
        ev_value = ev_value * cpp_rational(4294967296LL) + ev.magnitude[i];
      const boost::multiprecision::cpp_int p2 = boost::multiprecision::cpp_int(1) << std::abs(ev.exponent);
      ev_value = ev.exponent >= 0 ? ev_value * cpp_rational(p2) : ev_value / cpp_rational(p2);
      CHECK((ev.negative ? cpp_rational(-ev_value) : ev_value) == sum);
    }
  }
}

TEST_CASE("fp32_sequential equals a chain of correctly rounded FMAs", "[datapath][property]") {
  Datapath dp = DatapathRegistry::builtin().get("fp32_sequential");
  for (const char* in : {"fp32", "fp16"}) {
    dp.a = dp.b = Registry::builtin().get(in);
    std::mt19937_64 rng(99);
    for (int trial = 0; trial < 200; ++trial) {
      const std::size_t k = 1 + rng() % 12;
      std::vector<std::uint64_t> a(k), b(k);
      std::uint32_t d = static_cast<std::uint32_t>(random_finite(rng, dp.output()));
      const std::uint64_t c = d;
      bool finite = true;
      for (std::size_t i = 0; i < k; ++i) {
        a[i] = random_finite(rng, dp.a);
        b[i] = random_finite(rng, dp.b);
        if (!std::isfinite(std::bit_cast<float>(d))) {
          finite = false;
          continue;
        }
        d = rne_fp32(exact_of(static_cast<double>(std::bit_cast<float>(d))) +
                     exact_of(lpemu::format::decode(dp.a, a[i])) *
                         exact_of(lpemu::format::decode(dp.b, b[i])));
      }
      if (!finite) continue;
      const std::uint64_t got = dot(dp, a, b, c);
      INFO(in << " trial " << trial << " want " << std::hex << d << " got " << got);
      CHECK(same_value(got, d));
    }
  }
}

TEST_CASE("datapath error stays within its analytic bound", "[datapath][property]") {
  // Per block: each of at most n+1 terms loses < 2^(E-F) <= 2^-F·M_j (normal inputs, M_j the
  // largest term), and the output rounding loses < 2^-p·|d_j|; every M_j and |d_j| is below
  // 2(Σ|a_i b_i| + |c|). So |d − exact| <= blocks·((n+1)·2^-F + 2^-p)·2·(Σ|a_i b_i| + |c|).
  const auto& reg = DatapathRegistry::builtin();
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const char* name : {"v100_fp16_fp32", "a100_bf16_fp32", "h100_fp16_fp32", "h100_e4m3_fp32",
                           "ada_e5m2_fp32", "b200_tf32_fp32"}) {
    const Datapath& dp = reg.get(name);
    for (int trial = 0; trial < 40; ++trial) {
      const std::size_t k = 1 + rng() % 512;
      std::vector<std::uint64_t> a(k), b(k);
      double abs_sum = 0;
      for (std::size_t i = 0; i < k; ++i) {
        // Normal inputs only: magnitudes in [1/4, 4).
        auto draw = [&](const lpemu::format::Format& f) {
          double x = 0;
          do x = normal(rng);
          while (std::fabs(x) < 0.25 || std::fabs(x) >= 4);
          return lpemu::format::encode(f, x);
        };
        a[i] = draw(dp.a);
        b[i] = draw(dp.b);
        abs_sum += std::fabs(lpemu::format::decode(dp.a, a[i]) * lpemu::format::decode(dp.b, b[i]));
      }
      const double got = lpemu::format::decode(dp.output(), dot(dp, a, b, 0));
      const double exact = exact_dot(dp, a, b, 0).to_double();
      const double blocks = std::ceil(static_cast<double>(k) / dp.fused_terms);
      const double bound = blocks *
                           ((dp.fused_terms + 1) * std::ldexp(1.0, -dp.fraction_bits) +
                            std::ldexp(1.0, -dp.accumulator_fraction_bits)) *
                           2 * abs_sum;
      INFO(name << " k " << k << " got " << got << " exact " << exact << " bound " << bound);
      CHECK(std::fabs(got - exact) <= bound);
    }
  }
}

std::vector<std::uint64_t> random_codes(std::mt19937_64& rng, const lpemu::format::Format& f, std::size_t n) {
  std::vector<std::uint64_t> v(n);
  for (auto& x : v) x = random_finite(rng, f);
  return v;
}

TEST_CASE("gemm equals dot per element and is bit-identical for 1 and 2 threads", "[datapath][property]") {
  const auto& reg = DatapathRegistry::builtin();
  Datapath sr = reg.get("h100_fp16_fp32");
  sr.accumulator_rounding.mode = lpemu::format::RoundingMode::stochastic;
  sr.accumulator_rounding.sr_bits = 8;
  sr.accumulator_rounding.seed = 42;
  std::vector<Datapath> dps = {reg.get("h100_e4m3_fp32"),
                               reg.get("ideal"),
                               reg.get("fp32_sequential"),
                               reg.get("a100_fp16_fp16"),
                               reg.get("h100_e4m3_fp32_promote128"),
                               sr};
  dps[1].a = dps[1].b = dps[2].a = dps[2].b = Registry::builtin().get("fp8_e4m3");
  const std::size_t m = 9, n = 19, k = 300;  // n: two 8-column kernels plus a tail
  std::mt19937_64 rng(5);
  for (const Datapath& dp : dps) {
    const auto a = random_codes(rng, dp.a, m * k);
    const auto b = random_codes(rng, dp.b, k * n);
    std::vector<std::uint64_t> c(m * n);
    for (auto& x : c)
      x = lpemu::format::encode(dp.output(), std::ldexp(static_cast<double>(rng() % 100), -3));
    std::vector<std::uint64_t> d1(m * n), d2(m * n);
    {
      tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
      gemm(dp, m, n, k, a, b, c, d1);
    }
    {
      tbb::global_control two(tbb::global_control::max_allowed_parallelism, 2);
      gemm(dp, m, n, k, a, b, c, d2);
    }
    CHECK(d1 == d2);
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        std::vector<std::uint64_t> row(a.begin() + static_cast<long>(i * k),
                                       a.begin() + static_cast<long>((i + 1) * k));
        std::vector<std::uint64_t> col(k);
        for (std::size_t p = 0; p < k; ++p) col[p] = b[p * n + j];
        INFO(dp.name << " (" << i << ", " << j << ")");
        CHECK(d1[i * n + j] == dot(dp, row, col, c[i * n + j], {}, i * n + j));
      }
    }
  }
}

}  // namespace

namespace {

TEST_CASE("power-of-two block scales scale the result exactly when nothing overflows or underflows",
          "[datapath][property]") {
  // OCP MX v1.0 §6: a dot product of blocks is the element dot product times 2^(s_a + s_b). With
  // c = 0 and a shift that keeps the value in fp32's normal range, rounding commutes with it.
  const auto& reg = DatapathRegistry::builtin();
  std::mt19937_64 rng(11);
  for (const char* name : {"b200_mxfp8_fp32", "b200_mxfp6_fp32", "b200_mxfp4_fp32", "b200_nvfp4_fp32"}) {
    const Datapath& dp = reg.get(name);
    for (int trial = 0; trial < 50; ++trial) {
      const std::size_t k = 64;
      const auto a = random_codes(rng, dp.a, k);
      const auto b = random_codes(rng, dp.b, k);
      const std::size_t ns = k / static_cast<std::size_t>(dp.scale_block);
      const std::int32_t t = static_cast<std::int32_t>(rng() % 21) - 10;
      std::vector<std::int32_t> sa(ns, t), sb(ns, 3);
      const double plain = lpemu::format::decode(dp.output(), dot(dp, a, b, 0));
      const double scaled = lpemu::format::decode(dp.output(), dot(dp, a, b, 0, BlockScales{sa, sb}));
      INFO(name << " trial " << trial << " t " << t);
      CHECK(scaled == std::ldexp(plain, t + 3));
    }
  }
}

TEST_CASE("summation orders agree with the exact sum when nothing is dropped", "[datapath][property]") {
  // With exact alignment and a wide (fp64) accumulator, fp8 products are summed without error
  // whatever the order, so sequential, pairwise and split-K all give the exact value.
  Datapath dp = DatapathRegistry::builtin().get("ideal");
  dp.a = dp.b = Registry::builtin().get("fp8_e4m3");
  dp.accumulator = Registry::builtin().get("fp64");
  dp.accumulator_fraction_bits = 52;
  dp.addend_emin = dp.accumulator.emin;
  dp.fused_terms = 8;
  std::mt19937_64 rng(3);
  for (const Order order : {Order::sequential, Order::pairwise, Order::split_k}) {
    dp.order = order;
    dp.split_chunks = 3;
    for (int trial = 0; trial < 30; ++trial) {
      const std::size_t k = 1 + rng() % 100;
      const auto a = random_codes(rng, dp.a, k);
      const auto b = random_codes(rng, dp.b, k);
      const double got = lpemu::format::decode(dp.accumulator, dot(dp, a, b, 0));
      cpp_rational sum = 0;
      for (std::size_t i = 0; i < k; ++i) {
        sum += exact_of(lpemu::format::decode(dp.a, a[i])) * exact_of(lpemu::format::decode(dp.b, b[i]));
      }
      INFO("order " << to_string(order) << " trial " << trial);
      CHECK(exact_of(got) == sum);
    }
  }
}

}  // namespace

namespace {

TEST_CASE("gemm equals dot with NaN, Inf and zero-heavy rows", "[datapath][property]") {
  // Covers the fast kernels' fallbacks (special rows, all-zero blocks) and their int64 variant.
  const auto& reg = DatapathRegistry::builtin();
  std::mt19937_64 rng(21);
  Datapath ideal8 = reg.get("ideal");
  ideal8.a = ideal8.b = Registry::builtin().get("fp8_e4m3");
  for (const char* name :
       {"h100_e4m3_fp32", "h100_fp16_fp32", "v100_fp16_fp32", "a100_bf16_fp32", "ada_e5m2_fp16", "ideal8"}) {
    const Datapath& dp = std::string(name) == "ideal8" ? ideal8 : reg.get(name);
    const std::size_t m = 6, n = 13, k = 70;
    std::vector<std::uint64_t> a(m * k), b(k * n);
    for (auto& x : a) x = (rng() % 3 == 0) ? random_finite(rng, dp.a) : (rng() % 2) * dp.a.sign_bit();
    for (auto& x : b) x = (rng() % 3 == 0) ? random_finite(rng, dp.b) : (rng() % 2) * dp.b.sign_bit();
    a[1 * k + 3] = dp.a.nan_code();                                      // NaN in row 1
    a[2 * k + 5] = dp.a.has_inf() ? dp.a.inf_code() : dp.a.nan_code();   // Inf (or NaN) in row 2
    for (std::size_t p = 0; p < k; ++p) a[4 * k + p] = dp.a.sign_bit();  // row 4: all −0
    std::vector<std::uint64_t> c(m * n);
    for (std::size_t i = 0; i < c.size(); ++i) c[i] = (i % 2) * dp.output().sign_bit();
    c[3 * n + 1] = dp.output().nan_code();  // NaN and Inf in C
    c[3 * n + 2] = dp.output().inf_code();
    std::vector<std::uint64_t> d(m * n);
    gemm(dp, m, n, k, a, b, c, d);
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        std::vector<std::uint64_t> row(a.begin() + static_cast<long>(i * k),
                                       a.begin() + static_cast<long>((i + 1) * k));
        std::vector<std::uint64_t> col(k);
        for (std::size_t p = 0; p < k; ++p) col[p] = b[p * n + j];
        INFO(name << " (" << i << ", " << j << ")");
        CHECK(d[i * n + j] == dot(dp, row, col, c[i * n + j], {}, i * n + j));
      }
    }
  }
}

}  // namespace

namespace {

// The 16-column kernel takes rows in tiles of four and keeps each block's common rounding in
// vector lanes; rows, columns and K that do not fill a tile, RNE accumulators, fp16 accumulators
// that overflow, and C values that are huge, tiny or subnormal take the other paths. Every element
// of every GEMM is compared with dot (the block engine); `label` names the SIMD target.
void check_fast_kernel_edges(const std::string& label) {
  const auto& reg = DatapathRegistry::builtin();
  Datapath rne23 = reg.get("h100_e4m3_fp32");
  rne23.name = "h100_e4m3_fp32 with RNE to 23 bits";
  rne23.accumulator_rounding.mode = lpemu::format::RoundingMode::nearest_even;
  rne23.accumulator_fraction_bits = 23;
  Datapath no_floor = reg.get("h100_e5m2_fp32");
  no_floor.name = "h100_e5m2_fp32 without exponent floor";
  no_floor.exponent_floor.reset();
  // Blocks that are not a multiple of the kernel's four 8-bit exponents per lane (padded).
  Datapath blocks_of_5 = reg.get("h100_e4m3_fp32");
  blocks_of_5.name = "h100_e4m3_fp32 with blocks of 5";
  blocks_of_5.fused_terms = 5;
  Datapath blocks_of_1 = reg.get("h100_e5m2_fp32");
  blocks_of_1.name = "h100_e5m2_fp32 with blocks of 1";
  blocks_of_1.fused_terms = 1;
  const std::vector<Datapath> dps = {reg.get("h100_e4m3_fp32"),
                                     blocks_of_5,
                                     blocks_of_1,
                                     reg.get("h100_e4m3_fp16"),
                                     reg.get("ada_e4m3_fp16"),
                                     reg.get("ada_e5m2_fp32"),
                                     reg.get("h100_e5m2_fp16"),
                                     rne23,
                                     no_floor};
  struct Shape {
    std::size_t m, n, k;
  };
  // Up to 16 rows, B is packed panel by panel where used; 17 and more rows pack it up front.
  const Shape shapes[] = {{1, 16, 32}, {5, 32, 33}, {7, 13, 1},   {6, 43, 95},  {9, 24, 64},
                          {4, 16, 0},  {17, 9, 40}, {22, 40, 70}, {3, 48, 300}, {5, 150, 37}};
  std::mt19937_64 rng(77);
  for (const Datapath& dp : dps) {
    for (const Shape& s : shapes) {
      std::vector<std::uint64_t> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n);
      // Random bit patterns (subnormals included), a quarter of them ±0.
      for (auto& x : a) x = rng() % 4 == 0 ? (rng() % 2) * dp.a.sign_bit() : random_finite(rng, dp.a);
      for (auto& x : b) x = rng() % 4 == 0 ? (rng() % 2) * dp.b.sign_bit() : random_finite(rng, dp.b);
      for (auto& x : c) {
        switch (rng() % 3) {
          case 0: x = random_finite(rng, dp.output()); break;  // huge, tiny and subnormal codes
          case 1: x = (rng() % 2) * dp.output().sign_bit(); break;
          default:
            x = lpemu::format::encode(dp.output(), std::ldexp(static_cast<double>(rng() % 200) - 100, -4));
        }
      }
      // Row 1 and column 1 subnormal only: sums below the accumulator's smallest subnormal.
      const std::uint64_t mant_a = (std::uint64_t{1} << dp.a.mantissa_bits) - 1;
      const std::uint64_t mant_b = (std::uint64_t{1} << dp.b.mantissa_bits) - 1;
      for (std::size_t p = 0; p < s.k && s.m > 1; ++p) a[s.k + p] = (rng() & (mant_a | dp.a.sign_bit())) | 1;
      for (std::size_t p = 0; p < s.k && s.n > 1; ++p)
        b[p * s.n + 1] = (rng() & (mant_b | dp.b.sign_bit())) | 1;
      if (s.m > 2 && s.k > 0) a[2 * s.k] = dp.a.nan_code();  // a row with NaN inside a row tile
      if (s.n > 3 && s.k > 1) b[s.n + 3] = dp.b.has_inf() ? dp.b.inf_code() : dp.b.nan_code();  // column 3
      if (c.size() > 5) c[5] = dp.output().inf_code();
      std::vector<std::uint64_t> d(s.m * s.n);
      gemm(dp, s.m, s.n, s.k, a, b, c, d);
      for (std::size_t i = 0; i < s.m; ++i) {
        for (std::size_t j = 0; j < s.n; ++j) {
          std::vector<std::uint64_t> row(a.begin() + static_cast<long>(i * s.k),
                                         a.begin() + static_cast<long>((i + 1) * s.k));
          std::vector<std::uint64_t> col(s.k);
          for (std::size_t p = 0; p < s.k; ++p) col[p] = b[p * s.n + j];
          INFO(label << " " << dp.name << " m " << s.m << " n " << s.n << " k " << s.k << " (" << i << ", "
                     << j << ") c " << std::hex << c[i * s.n + j]);
          CHECK(d[i * s.n + j] == dot(dp, row, col, c[i * s.n + j], {}, i * s.n + j));
        }
      }
      // The same GEMM with B prepared once (packed for the kernels, and not), 8-bit overload.
      const std::vector<std::uint8_t> a8(a.begin(), a.end()), b8(b.begin(), b.end());
      const std::vector<std::uint32_t> c32(c.begin(), c.end());
      // B's columns as a weight stores them ([n][k]), for the one-pass preparation.
      std::vector<std::uint8_t> bt(b8.size());
      for (std::size_t p = 0; p < s.k; ++p) {
        for (std::size_t j = 0; j < s.n; ++j) bt[j * s.k + p] = b8[p * s.n + j];
      }
      const PreparedB::Columns columns = [&bt, &s](std::size_t j0, std::size_t count, std::uint8_t* out) {
        std::copy_n(bt.begin() + static_cast<long>(j0 * s.k), count * s.k, out);
      };
      for (const bool pack : {true, false}) {
        for (const bool from_columns : {false, true}) {
          const auto pb = from_columns ? std::make_unique<PreparedB>(dp, s.n, s.k, columns, pack)
                                       : std::make_unique<PreparedB>(dp, s.n, s.k, b8, pack);
          CHECK(pb->packed() == (pack && s.k > 0));
          CHECK(pb->bytes() == b8.size() + (pb->packed() ? PreparedB::packed_bytes(dp, s.n, s.k) : 0));
          std::vector<std::uint32_t> d32(s.m * s.n);
          gemm(s.m, a8, *pb, c32, d32);
          for (std::size_t e = 0; e < d.size(); ++e) {
            INFO(label << " " << dp.name << " prepared B (packed " << pack << ", from columns "
                       << from_columns << ") m " << s.m << " n " << s.n << " k " << s.k << " element " << e);
            CHECK(d32[e] == d[e]);
          }
        }
      }
    }
  }
}

TEST_CASE(
    "gemm equals dot at the fast kernels' edges: row and column tails, short K, RNE, overflow and subnormal "
    "sums",
    "[datapath][property]") {
  check_fast_kernel_edges("default target");
}

TEST_CASE("the fast GEMM's Highway row kernel equals dot under every SIMD target",
          "[datapath][property][simd]") {
  const auto targets = hwy::SupportedAndGeneratedTargets();
  REQUIRE(!targets.empty());
  for (const std::int64_t t : targets) {
    hwy::SetSupportedTargetsForTest(t);
    check_fast_kernel_edges(hwy::TargetName(t));
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST_CASE("a prepared B gives gemm's bits with block scales and checks its codes", "[datapath][property]") {
  const Datapath& dp = DatapathRegistry::builtin().get("b200_mxfp8_fp32");
  const std::size_t m = 3, n = 20, k = 70, ns = (k + dp.scale_block - 1) / dp.scale_block;
  std::mt19937_64 rng(5);
  std::vector<std::uint8_t> a(m * k), b(k * n);
  for (auto& x : a) x = static_cast<std::uint8_t>(random_finite(rng, dp.a));
  for (auto& x : b) x = static_cast<std::uint8_t>(random_finite(rng, dp.b));
  std::vector<std::int32_t> sa(m * ns), sb(ns * n);
  for (auto& x : sa) x = static_cast<std::int32_t>(rng() % 9) - 4;
  for (auto& x : sb) x = static_cast<std::int32_t>(rng() % 9) - 4;
  const GemmScales scales{sa, sb};
  std::vector<std::uint32_t> want(m * n), got(m * n);
  gemm(dp, m, n, k, a, b, {}, want, scales);
  const PreparedB pb(dp, n, k, b);
  gemm(m, a, pb, {}, got, scales);
  CHECK(got == want);
  CHECK(!pb.packed());  // block-scaled: no fast kernel reads a packed B
  // Codes are checked whether or not B is packed.
  const Datapath& fp4 = DatapathRegistry::builtin().get("b200_mxfp4_fp32");
  REQUIRE(fp4.b.bits == 4);
  std::vector<std::uint8_t> wide4(2 * 3, 1);
  wide4[4] = 0x1f;
  REQUIRE_THROWS_WITH(PreparedB(fp4, 3, 2, wide4), Catch::Contains("B[4]: code 0x1f is wider than format"));

  const Datapath& h100 = DatapathRegistry::builtin().get("h100_e4m3_fp32");
  std::vector<std::uint8_t> wide(4 * 16, 0x38);
  wide[25] = 0x7f;  // NaN in fp8_e4m3: fine
  CHECK(PreparedB(h100, 16, 4, wide).packed());
  // From columns: checked as B itself (element index p·N + j), packed or not.
  for (const bool pack : {true, false}) {
    const PreparedB::Columns columns = [](std::size_t, std::size_t count, std::uint8_t* out) {
      std::fill_n(out, count * 4, std::uint8_t{0x3});
      if (count > 9) out[9 * 4 + 1] = 0xff;  // column 9, row 1 of B
    };
    REQUIRE_THROWS_WITH(PreparedB(fp4, 16, 4, columns, pack), Catch::Contains("B[25]: code 0xff is wider"));
  }
  REQUIRE_THROWS_WITH(PreparedB(h100, 16, 5, wide), "gemm: B has 64 elements, expected 80");
  std::vector<std::uint32_t> d(2 * 16);
  REQUIRE_THROWS_WITH(gemm(2, std::vector<std::uint8_t>(7), PreparedB(h100, 16, 4, wide), {}, d),
                      "gemm: A has 7 elements, expected 8");
}

TEST_CASE("gemm's fast path rejects codes wider than their format as the general path does",
          "[datapath][property]") {
  const Datapath& dp = DatapathRegistry::builtin().get("h100_e4m3_fp32");
  const std::size_t m = 2, n = 16, k = 4;
  std::vector<std::uint64_t> a(m * k, 0x38), b(k * n, 0x38), d(m * n);
  b[1 * n + 9] = 0x138;  // a panel column
  REQUIRE_THROWS_WITH(
      gemm(dp, m, n, k, a, b, {}, d),
      "B[25]: code 0x138 is wider than format 'fp8_e4m3' (8 bits); expected a code in 0x00..0xff");
  b[1 * n + 9] = 0x38;
  a[5] = 0x1ff;
  REQUIRE_THROWS_WITH(
      gemm(dp, m, n, k, a, b, {}, d),
      "A[5]: code 0x1ff is wider than format 'fp8_e4m3' (8 bits); expected a code in 0x00..0xff");
}

}  // namespace
