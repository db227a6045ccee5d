// Training's linear-layer GEMMs under a plan: for every block format and every GEMM pass, each
// quantised operand equals block::quantize (what `lpemu quantize` runs) of that tensor along the
// GEMM's contraction axis; a 2-D tile weight is quantised once for forward and data gradient;
// stochastic rounding of gradients is unbiased and reproducible; unsupported plans are refused.
#include <bit>
#include <cmath>
#include <random>
#include <span>
#include <string>

#include <catch2/catch.hpp>

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/train/linear_plan.hpp"
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"

using namespace lpemu;
using namespace lpemu::train;
using engine::GemmPass;
using engine::RowMatrix;

namespace {

RowMatrix random(std::mt19937& g, int r, int c) {
  std::normal_distribution<float> d(0.0F, 1.0F);
  RowMatrix m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i)
    m.data()[i] = d(g) * std::exp2(static_cast<float>(i % 7) - 3.0F);
  return m;
}

}  // namespace

TEST_CASE("every backward GEMM operand equals block::quantize along that GEMM's contraction axis",
          "[train][unit]") {
  const engine::Config c = test::tiny_model("llama", "fp32", false).config;
  const auto& blocks = block::BlockRegistry::builtin();
  std::mt19937 g(5);
  // X [M, K], W [N, K], dY [M, N] with M = 64 tokens, K = 64, N = 96: whole MX / NVFP4 blocks on
  // every axis.
  const RowMatrix x = random(g, 64, 64);
  const RowMatrix w = random(g, 96, 64);
  const RowMatrix dy = random(g, 64, 96);
  for (const std::string& name : blocks.names()) {
    INFO(name);
    const block::BlockFormat& fmt = blocks.get(name);
    const auto plan = test::read_plan("[roles]\nweights = \"" + name + "\"\nlinear_input = \"" + name +
                                      "\"\ngrad_output = \"" + name + "\"\n");
    const LinearPlan lp(plan, test::builtin_quantizers(), test::builtin_gemms(), c);
    const LinearSite& s = lp.site(0, "w1");
    const bool tiles = fmt.granularity == block::Granularity::tile;
    CHECK(s.shared_weight == tiles);
    // forward: A = X [M, K], B = W [N, K], both along K.
    RowMatrix a = x;
    RowMatrix b = w;
    quantize_operands(s, GemmPass::forward, 0, a, b);
    CHECK(test::same_bits(a, test::quantize_along(fmt, x, 1)));
    CHECK(test::same_bits(b, test::quantize_along(fmt, w, 1)));
    const RowMatrix w_forward = b;
    // dgrad: A = dY [M, N] along N, B = Wᵀ [K, N] along N (W re-quantised down its columns), or
    // for 2-D tiles the forward's quantised weight itself.
    a = dy;
    RowMatrix wt = w.transpose();
    if (tiles) {
      RowMatrix wq = w;
      quantize_forward_weight(s, 0, wq);
      CHECK(test::same_bits(wq, w_forward));
      wt = wq.transpose();
    }
    quantize_operands(s, GemmPass::dgrad, 0, a, wt);
    CHECK(test::same_bits(a, test::quantize_along(fmt, dy, 1)));
    CHECK(test::same_bits(wt, tiles ? RowMatrix(w_forward.transpose())
                                    : RowMatrix(test::quantize_along(fmt, w, 0).transpose())));
    // wgrad: A = dYᵀ [N, M] along M, B = Xᵀ [K, M] along M.
    a = dy.transpose();
    b = x.transpose();
    quantize_operands(s, GemmPass::wgrad, 0, a, b);
    CHECK(test::same_bits(a, RowMatrix(test::quantize_along(fmt, dy, 0).transpose())));
    CHECK(test::same_bits(b, RowMatrix(test::quantize_along(fmt, x, 0).transpose())));
  }
}

TEST_CASE("stochastic rounding of gradients is unbiased and reproducible per step", "[train][unit]") {
  const engine::Config c = test::tiny_model("llama", "fp32", false).config;
  const auto plan = test::read_plan(
      "[roles]\ngrad_output = { format = \"bf16\", rounding = \"stochastic\", seed = 3 }\n"
      "grad_activation = { format = \"bf16\", rounding = \"stochastic\", seed = 3 }\n");
  const LinearPlan lp(plan, test::builtin_quantizers(), test::builtin_gemms(), c);
  const LinearSite& s = lp.site(1, "wo");
  // x between the bf16 neighbours 1 and 1 + 2^-7, a quarter of the way up.
  const double lo = 1.0;
  const double hi = 1.0 + std::ldexp(1.0, -7);
  const double exact = lo + 0.25 * (hi - lo);
  const int n = 128;
  RowMatrix a = RowMatrix::Constant(n, n, static_cast<float>(exact));
  RowMatrix b = RowMatrix::Ones(4, n);
  quantize_operands(s, GemmPass::dgrad, 0, a, b);
  double sum = 0;
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    const double v = static_cast<double>(a.data()[i]);
    REQUIRE((v == lo || v == hi));
    sum += v;
  }
  const double draws = static_cast<double>(a.size());
  const double sd = (hi - lo) * std::sqrt(0.25 * 0.75 / draws);
  CHECK(std::abs(sum / draws - exact) <= 5 * sd);
  // The same step draws the same bits; another step draws others; the result's stream is its own.
  RowMatrix again = RowMatrix::Constant(n, n, static_cast<float>(exact));
  RowMatrix b2 = b;
  quantize_operands(s, GemmPass::dgrad, 0, again, b2);
  CHECK(test::same_bits(a, again));
  RowMatrix other = RowMatrix::Constant(n, n, static_cast<float>(exact));
  quantize_operands(s, GemmPass::dgrad, 1, other, b2);
  CHECK_FALSE(test::same_bits(a, other));
  RowMatrix res = RowMatrix::Constant(n, n, static_cast<float>(exact));
  quantize_result(s, GemmPass::dgrad, 0, res);
  CHECK_FALSE(test::same_bits(a, res));
}

TEST_CASE("training refuses plan entries it does not emulate, naming role and place", "[train][unit]") {
  const engine::Config c = test::tiny_model("llama", "fp32", false).config;
  CHECK_THROWS_WITH(LinearPlan(test::read_plan("[roles]\nexpert_weights = \"bf16\"\n"),
                               test::builtin_quantizers(), test::builtin_gemms(), c),
                    Catch::StartsWith("train.toml:2: plan 'train': role expert_weights is quantised, which "
                                      "training does not emulate yet"));
  engine::Config moe = c;
  moe.n_experts = 2;
  CHECK_THROWS_WITH(
      LinearPlan(engine::builtin_plan("fp32"), test::builtin_quantizers(), test::builtin_gemms(), moe),
      Catch::Contains("mixture-of-experts blocks, which training does not support yet"));
  const LinearPlan fp32(engine::builtin_plan("fp32"), test::builtin_quantizers(), test::builtin_gemms(), c);
  CHECK(fp32.site(-1, "output").gemm_name[2] == "eigen");
  CHECK_THROWS_AS(fp32.site(0, "output"), Error);
}
