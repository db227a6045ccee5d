// Block formats on datapath GEMMs in training: every operand of the forward, data-gradient and
// weight-gradient GEMMs enters the datapath as block::quantize along that GEMM's contraction axis
// gives it (its codes and block scales), the GEMM's result is the product of those values, the
// training loss under such a plan is the inference engine's, and what cannot enter is refused.
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
#include "lpemu/train/backward.hpp"
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

// Block format `fmt` on every linear role and datapath `dp` for every pass of the blocks' GEMMs; the
// unquantised classifier stays off the datapath.
std::string plan_text(const std::string& fmt, const std::string& dp) {
  return "[roles]\nweights = \"" + fmt + "\"\nlinear_input = \"" + fmt + "\"\ngrad_output = \"" + fmt +
         "\"\ngemm = \"" + dp + "\"\ndgrad_gemm = \"" + dp + "\"\nwgrad_gemm = \"" + dp +
         "\"\n[[override]]\nkind = \"head\"\ngemm = \"none\"\ndgrad_gemm = \"none\"\nwgrad_gemm = \"none\"\n";
}

// The mean cross-entropy of `logits` [seq, vocab] predicting tokens[1..seq].
double cross_entropy(const RowMatrix& logits, const std::vector<int>& tokens) {
  double sum = 0;
  for (Eigen::Index i = 0; i < logits.rows(); ++i) {
    const Eigen::VectorXd row = logits.row(i).cast<double>().transpose();
    const double mx = row.maxCoeff();
    sum += std::log((row.array() - mx).exp().sum()) + mx - row(tokens[static_cast<std::size_t>(i) + 1]);
  }
  return sum / static_cast<double>(logits.rows());
}

}  // namespace

TEST_CASE(
    "on a block-scaled datapath every training GEMM operand enters as block::quantize along its "
    "contraction axis",
    "[train][unit]") {
  const engine::Config c = test::tiny_model("llama", "fp32", false).config;
  std::mt19937 g(9);
  // X [M, K], W [N, K], dY [M, N]: M = 64 tokens, K = 64, N = 96.
  const RowMatrix x = random(g, 64, 64);
  const RowMatrix w = random(g, 96, 64);
  const RowMatrix dy = random(g, 64, 96);
  const auto& blocks = block::BlockRegistry::builtin();
  for (const auto& [fmt_name, dp] : std::vector<std::pair<std::string, std::string>>{
           {"nvfp4", "b200_nvfp4_fp32"}, {"mxfp8_e4m3", "b200_mxfp8_fp32"}, {"mxfp4", "b200_mxfp4_fp32"}}) {
    INFO(fmt_name << " on " << dp);
    const block::BlockFormat& fmt = blocks.get(fmt_name);
    const LinearPlan lp(test::read_plan(plan_text(fmt_name, dp)), test::builtin_quantizers(),
                        test::builtin_gemms(), c);
    const LinearSite& s = lp.site(1, "w2");
    struct Case {
      GemmPass pass;
      RowMatrix a, b, want_a, want_b;
    };
    const std::vector<Case> cases = {
        // forward: X and W along K; dgrad: dY and Wᵀ along N; wgrad: dYᵀ and Xᵀ along M.
        {GemmPass::forward, x, w, test::quantize_along(fmt, x, 1), test::quantize_along(fmt, w, 1)},
        {GemmPass::dgrad, dy, w.transpose(), test::quantize_along(fmt, dy, 1),
         test::quantize_along(fmt, w, 0).transpose()},
        {GemmPass::wgrad, dy.transpose(), x.transpose(), test::quantize_along(fmt, dy, 0).transpose(),
         test::quantize_along(fmt, x, 0).transpose()}};
    for (const Case& k : cases) {
      INFO(pass_name(k.pass));
      CHECK(s.gemm_name[static_cast<std::size_t>(k.pass)] == dp);
      RowMatrix a = k.a, b = k.b;
      engine::EncodedOperand ea, eb;
      encode_operands(s, k.pass, 0, a, b, ea, eb);
      CHECK(test::same_bits(a, k.want_a));
      CHECK(test::same_bits(b, k.want_b));
      // The encodings are the datapath's: the block format, [rows, contraction], decoding to the values.
      for (const auto* e : {&ea, &eb}) {
        REQUIRE(e->block != nullptr);
        CHECK(e->block->name == fmt_name);
      }
      CHECK(ea.tensor.layout.shape ==
            std::vector<std::size_t>{static_cast<std::size_t>(a.rows()), static_cast<std::size_t>(a.cols())});
      RowMatrix da(a.rows(), a.cols()), db(b.rows(), b.cols());
      block::decode(*ea.block, ea.tensor, std::span<float>(da.data(), static_cast<std::size_t>(da.size())));
      block::decode(*eb.block, eb.tensor, std::span<float>(db.data(), static_cast<std::size_t>(db.size())));
      CHECK(test::same_bits(da, a));
      CHECK(test::same_bits(db, b));
      // The datapath GEMM of the encoded operands is their product (FP32 accumulation: to 1e-5).
      engine::GemmPoint gp;
      gp.tensor = "w2";
      gp.a_operand = &ea;
      gp.b_operand = &eb;
      RowMatrix got;
      s.gemm[static_cast<std::size_t>(k.pass)]->nt(a, b, got, gp);
      const Eigen::MatrixXd want = a.cast<double>() * b.cast<double>().transpose();
      CHECK((got.cast<double>() - want).norm() <= 1e-5 * want.norm());
    }
  }
}

TEST_CASE("training under block formats on datapath GEMMs gives the inference loss", "[train][unit]") {
  const engine::Model m = test::tiny_model("llama", "fp32", false);
  // One sequence: NVFP4's FP32 tensor scale comes from the whole tensor, which in training is the
  // batch's tokens together and in the engine each sequence alone.
  const int batch = 1, seq = 8;
  const auto tokens = test::random_tokens(batch, seq, m.config.vocab_size, 17);
  const Params<float> p = params_from_model<float>(m);
  const std::string shipped = test::slurp(test::source_path("experiments/plans/nvfp4_b200.toml"));
  for (const std::string& text : {shipped, plan_text("mxfp8_e4m3", "b200_mxfp8_fp32")}) {
    INFO(text);
    const engine::PrecisionPlan plan = test::read_plan(text);
    const LinearPlan lp(plan, test::builtin_quantizers(), test::builtin_gemms(), m.config);
    engine::Session s(m, plan);
    const double ref = cross_entropy(s.forward(std::span<const int>(tokens.data(), seq)), tokens);
    Params<float> g;
    const double loss = loss_and_gradients(m.config, p, tokens, batch, seq, g, &lp);
    CHECK(loss == Approx(ref).epsilon(1e-6));
    // The quantisation did something, and the gradients are those of the same operands on Eigen's
    // GEMM up to the datapath's FP32 accumulation.
    Params<float> g0;
    CHECK(loss_and_gradients(m.config, p, tokens, batch, seq, g0) != Approx(ref).epsilon(1e-5));
    std::string eigen_text = text;
    for (const char* key : {"gemm = \"b200_nvfp4_fp32\"", "gemm = \"b200_mxfp8_fp32\""}) {
      for (std::size_t at = eigen_text.find(key); at != std::string::npos; at = eigen_text.find(key))
        eigen_text.replace(at, std::string(key).size(), "gemm = \"none\"");
    }
    const LinearPlan le(test::read_plan(eigen_text), test::builtin_quantizers(), test::builtin_gemms(),
                        m.config);
    CHECK(le.site(0, "wq").gemm_name[0] == "eigen");
    Params<float> ge;
    loss_and_gradients(m.config, p, tokens, batch, seq, ge, &le);
    std::vector<const Mat<float>*> eigen_mats;
    ge.for_each([&eigen_mats](const std::string&, const auto& t) {
      if constexpr (std::is_same_v<std::decay_t<decltype(t)>, Mat<float>>) eigen_mats.push_back(&t);
    });
    std::size_t i = 0;
    g.for_each([&](const std::string& name, const auto& t) {
      if constexpr (std::is_same_v<std::decay_t<decltype(t)>, Mat<float>>) {
        INFO(name);
        const Mat<float>& e = *eigen_mats[i++];
        CHECK(t.allFinite());
        const Mat<float> d = t - e;
        CHECK(static_cast<double>(d.norm()) <= 1e-4 * static_cast<double>(e.norm()));
      }
    });
  }
}

TEST_CASE("per-tensor current scaling on an FP8 datapath: the training loss is the engine's",
          "[train][unit]") {
  const engine::Model m = test::tiny_model("llama", "fp32", false);
  const int seq = 8;
  const auto tokens = test::random_tokens(1, seq, m.config.vocab_size, 23);
  const engine::PrecisionPlan plan = test::read_plan(
      "[roles]\nweights = { format = \"fp8_e4m3\", scaling = \"current\" }\n"
      "linear_input = { format = \"fp8_e4m3\", scaling = \"current\" }\ngemm = \"h100_e4m3_fp32\"\n"
      "[[override]]\nkind = \"head\"\ngemm = \"none\"\n");
  const LinearPlan lp(plan, test::builtin_quantizers(), test::builtin_gemms(), m.config);
  CHECK(lp.site(0, "w1").gemm_name[0] == "h100_e4m3_fp32");
  engine::Session s(m, plan);
  const double ref = cross_entropy(s.forward(std::span<const int>(tokens.data(), seq)), tokens);
  Params<float> g;
  CHECK(loss_and_gradients(m.config, params_from_model<float>(m), tokens, 1, seq, g, &lp) ==
        Approx(ref).epsilon(1e-6));
}

TEST_CASE("training refuses datapath operands that cannot enter, naming GEMM, operand and role",
          "[train][unit]") {
  const engine::Config c = test::tiny_model("llama", "fp32", false).config;
  const auto refused = [&](const std::string& text) {
    try {
      const LinearPlan lp(test::read_plan(text), test::builtin_quantizers(), test::builtin_gemms(), c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // 2-D tiles vary their scale along K; MX blocks of 32 are not NVFP4's 16; fp32 gradients are no FP4.
  CHECK_THAT(
      refused(plan_text("nvfp4_tile16", "b200_nvfp4_fp32")),
      Catch::Contains("forward GEMM of 'wq' (layer 0): operand A (linear_input) in format 'nvfp4_tile16' "
                      "cannot enter datapath 'b200_nvfp4_fp32' exactly: its scales vary along K"));
  CHECK_THAT(refused(plan_text("mxfp4", "b200_nvfp4_fp32")),
             Catch::Contains("its blocks of 32 differ from the datapath's 16"));
  CHECK_THAT(
      refused("[roles]\nweights = \"nvfp4\"\nlinear_input = \"nvfp4\"\ndgrad_gemm = \"b200_nvfp4_fp32\"\n"),
      Catch::Contains("dgrad GEMM of 'wq' (layer 0): operand A (grad_output) in format 'fp32' cannot enter"));
  // Per-tensor current scaling enters an FP8 datapath (FP32 scales after accumulation); delayed does not.
  CHECK(refused("[roles]\nweights = { format = \"fp8_e4m3\", scaling = \"current\" }\n"
                "linear_input = { format = \"fp8_e4m3\", scaling = \"current\" }\ngemm = \"h100_e4m3_fp32\"\n"
                "[[override]]\nkind = \"head\"\ngemm = \"none\"\n") == "accepted");
  CHECK_THAT(
      refused("[roles]\nweights = \"fp8_e4m3\"\n"
              "linear_input = { format = \"fp8_e4m3\", scaling = \"delayed\" }\ngemm = \"h100_e4m3_fp32\"\n"
              "[[override]]\nkind = \"head\"\ngemm = \"none\"\n"),
      Catch::Contains("forward GEMM of 'wq' (layer 0): operand A (linear_input) asks for delayed scaling"));
}
