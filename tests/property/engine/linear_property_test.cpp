// The float linear map's defined summation order: every output equals the naive loop (+0, then
// each product rounded to float and added in ascending k), bit for bit, under every SIMD target the
// machine supports and for any number of threads.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <hwy/targets.h>
#include <tbb/global_control.h>
#include <catch2/catch.hpp>

#include "lpemu/engine/ops.hpp"
#include "lpemu/engine/weights.hpp"

namespace {

using lpemu::engine::Mat;
using lpemu::engine::RowMatrix;
using lpemu::engine::Vec;

// The naive loop the kernel must reproduce, in plain scalar code.
RowMatrix naive(const RowMatrix& x, const RowMatrix& w, const Vec<float>& b) {
  RowMatrix y(x.rows(), w.rows());
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    for (Eigen::Index j = 0; j < w.rows(); ++j) {
      volatile float acc = 0.0F;  // volatile: one rounding per product and per sum, whatever the flags
      for (Eigen::Index k = 0; k < x.cols(); ++k) {
        const volatile float p = x(i, k) * w(j, k);
        acc = acc + p;
      }
      y(i, j) = b.size() != 0 ? acc + b(j) : acc;
    }
  }
  return y;
}

RowMatrix random_matrix(std::mt19937& g, Eigen::Index r, Eigen::Index c, bool specials) {
  std::normal_distribution<float> d(0.0F, 1.0F);
  std::uniform_int_distribution<int> pick(0, 199);
  std::uniform_int_distribution<std::uint32_t> bits;
  RowMatrix m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    float v = d(g);
    if (specials) {
      switch (pick(g)) {
        case 0: v = std::numeric_limits<float>::quiet_NaN(); break;
        case 1: v = std::numeric_limits<float>::infinity(); break;
        case 2: v = -std::numeric_limits<float>::infinity(); break;
        case 3: v = -0.0F; break;
        case 4: v = std::bit_cast<float>(bits(g) & 0x807FFFFFU); break;                  // subnormal
        case 5: v = std::bit_cast<float>((bits(g) & 0x80FFFFFFU) | 0x7E000000U); break;  // huge: overflows
        default: break;
      }
    }
    m.data()[i] = v;
  }
  return m;
}

bool same_bits(const RowMatrix& a, const RowMatrix& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    if (std::bit_cast<std::uint32_t>(a.data()[i]) != std::bit_cast<std::uint32_t>(b.data()[i])) {
      const bool nan = std::isnan(a.data()[i]) && std::isnan(b.data()[i]);
      if (!nan) return false;
    }
  }
  return true;
}

void check_shapes(const std::string& target) {
  std::mt19937 g(7);
  // Row tails (1..3 rows past a multiple of 4), column tails of every panel width, short K, and
  // K past the kernel's 1024-value chunk (partial sums stored and reloaded).
  const int ms[] = {1, 2, 3, 4, 5, 7, 9, 64, 259};
  const int ns[] = {1, 3, 5, 8, 17, 33, 70};
  const int ks[] = {0, 1, 3, 16, 100, 1030};
  for (const int m : ms) {
    for (const int n : ns) {
      for (const int k : ks) {
        if (static_cast<long>(m) * n * k > 3'000'000) continue;
        for (const bool specials : {false, true}) {
          const RowMatrix x = random_matrix(g, m, k, specials);
          const RowMatrix w = random_matrix(g, n, k, specials);
          const Vec<float> b = (n % 2 == 1) ? Vec<float>(random_matrix(g, n, 1, false)) : Vec<float>();
          RowMatrix y;
          lpemu::engine::linear(x, w, b, y);
          INFO(target << ": m " << m << " n " << n << " k " << k
                      << (specials ? " with NaN/Inf/subnormals" : ""));
          CHECK(same_bits(y, naive(x, w, b)));
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("the float linear map equals the naive loop bit for bit under every SIMD target",
          "[engine][property][simd]") {
  const auto targets = hwy::SupportedAndGeneratedTargets();
  REQUIRE(!targets.empty());
  for (const std::int64_t t : targets) {
    hwy::SetSupportedTargetsForTest(t);
    check_shapes(hwy::TargetName(t));
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST_CASE("the float linear map gives the same bits on one thread and on all", "[engine][property]") {
  std::mt19937 g(11);
  const RowMatrix x = random_matrix(g, 200, 300, true);
  const RowMatrix w = random_matrix(g, 150, 300, true);
  RowMatrix all;
  lpemu::engine::linear(x, w, Vec<float>(), all);
  RowMatrix one;
  {
    const tbb::global_control single(tbb::global_control::max_allowed_parallelism, 1);
    lpemu::engine::linear(x, w, Vec<float>(), one);
  }
  CHECK(same_bits(one, all));
  CHECK(same_bits(all, naive(x, w, Vec<float>())));
}

TEST_CASE("the linear map on bf16 / fp16 weights gives the bits of the linear map on their float values",
          "[engine][property]") {
  using lpemu::engine::WeightMatrix;
  using lpemu::engine::WeightStorage;
  std::mt19937 g(13);
  std::uniform_int_distribution<std::uint32_t> code(0, 0xFFFF);
  for (const WeightStorage s : {WeightStorage::bf16, WeightStorage::fp16}) {
    for (const auto& [m, n, k] : {std::tuple{1, 1, 1}, {3, 33, 7}, {70, 45, 130}, {5, 64, 1030}}) {
      std::vector<std::uint16_t> codes(static_cast<std::size_t>(n) * static_cast<std::size_t>(k));
      // Every kind of code: NaN, ±Inf, subnormals and zeros among them (fp16 codes are uniform;
      // bf16 codes are kept to moderate exponents, with a few specials, so not every sum overflows).
      for (auto& c : codes) {
        c = static_cast<std::uint16_t>(code(g));
        if (s == WeightStorage::bf16 && (c & 0x7F80U) != 0x7F80U && (c % 97) != 0) {
          c = static_cast<std::uint16_t>((c & 0x807FU) | 0x3C00U);
        }
      }
      const WeightMatrix w = WeightMatrix::from_codes(s, n, k, codes);
      const RowMatrix x = random_matrix(g, m, k, false);
      const Vec<float> b = random_matrix(g, n, 1, false);
      RowMatrix stored, floats;
      lpemu::engine::linear(x, w, b, stored);
      lpemu::engine::linear(x, w.to_float(), b, floats);
      INFO((s == WeightStorage::bf16 ? "bf16" : "fp16") << ": m " << m << " n " << n << " k " << k);
      CHECK(same_bits(stored, floats));
      CHECK(same_bits(stored, naive(x, w.to_float(), b)));
    }
  }
}
