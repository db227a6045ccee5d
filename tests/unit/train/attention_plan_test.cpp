// Attention in training under a plan: for every block format each backward attention GEMM's
// quantised operands equal block::quantize (what `lpemu quantize` runs) of that tensor along the
// GEMM's contraction axis; in fp64 with attention through its GEMMs (identity roles) every gradient
// still equals central finite differences; the training forward pass under attention and
// activation roles gives the inference engine's loss under the same plan; datapath refusals.
#include <bit>
#include <cmath>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/session.hpp"
#include "lpemu/error.hpp"
#include "lpemu/train/attention_plan.hpp"
#include "lpemu/train/backward.hpp"
#include "lpemu/train/linear_plan.hpp"
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"

using namespace lpemu;
using namespace lpemu::train;
using engine::RowMatrix;

namespace {

RowMatrix random(std::mt19937& g, int r, int c) {
  std::normal_distribution<float> d(0.0F, 1.0F);
  RowMatrix m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i)
    m.data()[i] = d(g) * std::exp2(static_cast<float>(i % 5) - 2.0F);
  return m;
}

RowMatrix t(const RowMatrix& x) { return x.transpose(); }

}  // namespace

TEST_CASE("every backward attention GEMM operand equals block::quantize along its contraction axis",
          "[train][unit]") {
  const engine::Config c = test::tiny_model("llama", "fp32", false).config;
  const auto& blocks = block::BlockRegistry::builtin();
  std::mt19937 g(9);
  // One head: i = t = 64 tokens, d = 64: whole MX / NVFP4 blocks and 2-D tiles on every axis.
  const RowMatrix q = random(g, 64, 64);
  const RowMatrix k = random(g, 64, 64);
  const RowMatrix v = random(g, 64, 64);
  const RowMatrix p = random(g, 64, 64);
  const RowMatrix d_o = random(g, 64, 64);
  const RowMatrix ds = random(g, 64, 64);
  for (const std::string& name : blocks.names()) {
    INFO(name);
    const block::BlockFormat& fmt = blocks.get(name);
    const auto plan = test::read_plan("[roles]\nq = \"" + name + "\"\nkv_cache = \"" + name +
                                      "\"\nprobs = \"" + name + "\"\ngrad_output = \"" + name + "\"\n");
    const LinearPlan lp(plan, test::builtin_quantizers(), test::builtin_gemms(), c);
    const BlockSite& s = lp.block(1);
    REQUIRE(s.active);
    // dP = dO·Vᵀ: dO and V along d.
    RowMatrix a = d_o;
    RowMatrix b = v;
    quantize_attention_operands(s, AttentionGemm::dp, 3, 0, a, b);
    CHECK(test::same_bits(a, test::quantize_along(fmt, d_o, 1)));
    CHECK(test::same_bits(b, test::quantize_along(fmt, v, 1)));
    // dV = Pᵀ·dO: Pᵀ and dOᵀ along i.
    a = t(p);
    b = t(d_o);
    quantize_attention_operands(s, AttentionGemm::dv, 3, 0, a, b);
    CHECK(test::same_bits(a, t(test::quantize_along(fmt, p, 0))));
    CHECK(test::same_bits(b, t(test::quantize_along(fmt, d_o, 0))));
    // dQ = dS·K: dS and Kᵀ along t.
    a = ds;
    b = t(k);
    quantize_attention_operands(s, AttentionGemm::dq, 3, 0, a, b);
    CHECK(test::same_bits(a, test::quantize_along(fmt, ds, 1)));
    CHECK(test::same_bits(b, t(test::quantize_along(fmt, k, 0))));
    // dK = dSᵀ·Q: dSᵀ and Qᵀ along i.
    a = t(ds);
    b = t(q);
    quantize_attention_operands(s, AttentionGemm::dk, 3, 0, a, b);
    CHECK(test::same_bits(a, t(test::quantize_along(fmt, ds, 0))));
    CHECK(test::same_bits(b, t(test::quantize_along(fmt, q, 0))));
    // The forward pass: Q by q, K and V by kv_cache, each along its features.
    RowMatrix fq = q;
    RowMatrix fk = k;
    RowMatrix fv = v;
    quantize_qkv(s, 3, fq, fk, fv);
    CHECK(test::same_bits(fq, test::quantize_along(fmt, q, 1)));
    CHECK(test::same_bits(fk, test::quantize_along(fmt, k, 1)));
    CHECK(test::same_bits(fv, test::quantize_along(fmt, v, 1)));
  }
}

TEST_CASE("fp64 gradients with attention through its planned GEMMs equal finite differences",
          "[train][unit]") {
  const engine::Model m = test::tiny_model("llama", "fp32", false);
  // fp64 roles in fp64 compute are exact: attention runs through its six GEMMs and every role's
  // quantisation point, which must leave the gradient exact.
  const auto plan = test::read_plan(
      "compute = \"fp64\"\n[roles]\nq = \"fp64\"\nk = \"fp64\"\nkv_cache = \"fp64\"\nscores = \"fp64\"\n"
      "probs = \"fp64\"\nattn_output = \"fp64\"\ngrad_output = \"fp64\"\ngrad_activation = \"fp64\"\n"
      "residual = \"fp64\"\nmlp_hidden = \"fp64\"\nlogits = \"fp64\"\n");
  const LinearPlan lp(plan, test::builtin_quantizers(), test::builtin_gemms(), m.config);
  REQUIRE(lp.block(0).active);
  const int batch = 2;
  const int seq = 5;
  const auto tokens = test::random_tokens(batch, seq, m.config.vocab_size, 31);
  Params<double> p = params_from_model<double>(m);
  Params<double> g;
  const double loss = loss_and_gradients(m.config, p, tokens, batch, seq, g, &lp);
  Params<double> g0;
  CHECK(loss_and_gradients(m.config, p, tokens, batch, seq, g0) == Approx(loss).epsilon(1e-13));
  const double h = 1e-5;
  std::vector<Eigen::VectorXd> analytic;
  g.for_each([&](const std::string&, const auto& x) {
    analytic.emplace_back(Eigen::Map<const Eigen::VectorXd>(x.data(), x.size()));
  });
  std::size_t i = 0;
  int checked = 0;
  p.for_each([&](const std::string& n, auto& x) {
    // The attention and the tensors around it: finite differences of every element.
    if (n.find("/wq") != std::string::npos || n.find("/wk") != std::string::npos ||
        n.find("/wv") != std::string::npos || n.find("/wo") != std::string::npos ||
        n.find("attention_norm") != std::string::npos || n == "tok_embeddings") {
      // Under the sanitizers every 8th element (the release build checks every one).
      Eigen::VectorXd fd = analytic[i];
      for (Eigen::Index j = 0; j < x.size(); j += test::kSanitized ? 8 : 1) {
        const double keep = x.data()[j];
        Params<double> unused;
        x.data()[j] = keep + h;
        const double up = loss_and_gradients(m.config, p, tokens, batch, seq, unused, &lp);
        x.data()[j] = keep - h;
        const double down = loss_and_gradients(m.config, p, tokens, batch, seq, unused, &lp);
        x.data()[j] = keep;
        fd(j) = (up - down) / (2 * h);
      }
      INFO(n);
      CHECK((fd - analytic[i]).norm() <= 1e-6 * analytic[i].norm());
      ++checked;
    }
    ++i;
  });
  CHECK(checked >= 9);
}

TEST_CASE("the training forward pass under attention and activation roles gives the engine's loss",
          "[train][unit]") {
  const engine::Model m = test::tiny_model("llama", "fp32", false);
  const std::string text =
      "[roles]\nq = \"bf16\"\nk = \"fp8_e4m3\"\nkv_cache = \"bf16\"\nscores = \"bf16\"\nprobs = "
      "\"fp8_e5m2\"\n"
      "attn_output = \"bf16\"\nresidual = \"bf16\"\nmlp_hidden = \"bf16\"\nlogits = \"bf16\"\n";
  const auto plan = test::read_plan(text);
  const LinearPlan lp(plan, test::builtin_quantizers(), test::builtin_gemms(), m.config);
  const int seq = 8;
  const auto tokens = test::random_tokens(1, seq, m.config.vocab_size, 41);
  engine::Session s(m, plan);
  const RowMatrix logits = s.forward(std::span<const int>(tokens.data(), seq));
  double ref = 0;
  for (int i = 0; i < seq; ++i) {
    const Eigen::VectorXd row = logits.row(i).cast<double>().transpose();
    const double mx = row.maxCoeff();
    ref += std::log((row.array() - mx).exp().sum()) + mx - row(tokens[static_cast<std::size_t>(i) + 1]);
  }
  ref /= seq;
  Params<float> g;
  const double loss = loss_and_gradients(m.config, params_from_model<float>(m), tokens, 1, seq, g, &lp);
  CHECK(loss == Approx(ref).epsilon(1e-5));
  // Not the unquantised loss: the roles did something.
  Params<float> g0;
  CHECK(loss_and_gradients(m.config, params_from_model<float>(m), tokens, 1, seq, g0) !=
        Approx(ref).epsilon(1e-5));
}

TEST_CASE("attention GEMMs on a datapath take element formats the datapath holds", "[train][unit]") {
  const engine::Config c = test::tiny_model("llama", "fp32", false).config;
  // Unquantised output gradients (fp32) cannot enter a BF16 datapath.
  CHECK_THROWS_WITH(
      LinearPlan(test::read_plan("[roles]\nq = \"bf16\"\nkv_cache = \"bf16\"\nprobs = \"bf16\"\n"
                                 "attention_gemm = \"a100_bf16_fp32\"\n"),
                 test::builtin_quantizers(), test::builtin_gemms(), c),
      Catch::Contains("attention GEMM 'dp' (layer 0): operand A (grad_output) in format 'fp32' "
                      "cannot enter datapath 'a100_bf16_fp32' exactly"));
  // With bf16 gradients it trains, on the datapath, every GEMM's formats known.
  const auto plan = test::read_plan(
      "[roles]\nq = \"bf16\"\nkv_cache = \"bf16\"\nprobs = \"bf16\"\ngrad_output = \"bf16\"\n"
      "attention_gemm = \"a100_bf16_fp32\"\n");
  const LinearPlan lp(plan, test::builtin_quantizers(), test::builtin_gemms(), c);
  CHECK(lp.block(1).gemm_name == "a100_bf16_fp32");
  CHECK(lp.block(1).formats[static_cast<std::size_t>(AttentionGemm::dk)][1] == "bf16");
  CHECK_THROWS_WITH(
      LinearPlan(test::read_plan("[roles]\nq = { format = \"fp8_e4m3\", scaling = \"delayed\" }\n"),
                 test::builtin_quantizers(), test::builtin_gemms(), c),
      Catch::Contains("role q asks for delayed scaling"));
  const engine::Model m = test::tiny_model("llama", "fp32", false);
  const auto tokens = test::random_tokens(1, 4, m.config.vocab_size, 3);
  Params<float> g;
  const LinearPlan lm(plan, test::builtin_quantizers(), test::builtin_gemms(), m.config);
  CHECK(std::isfinite(loss_and_gradients(m.config, params_from_model<float>(m), tokens, 1, 4, g, &lm)));
}
