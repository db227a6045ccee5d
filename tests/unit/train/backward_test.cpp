// The backward pass: in fp64 every parameter's gradient equals the central finite difference of
// the loss (relative 1e-6) on a tiny model of each architecture; the training forward pass gives
// the loss the inference engine's logits give; fp32 gradients agree with fp64 ones.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/session.hpp"
#include "lpemu/error.hpp"
#include "lpemu/train/backward.hpp"
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"

using namespace lpemu;
using namespace lpemu::train;
using engine::Model;

namespace {

// The architectures: Llama (GQA, half RoPE, SwiGLU/SiLU), Llama with llama3 RoPE scaling and
// interleaved pairs, tied; Qwen2-style (Llama with q, k, v biases); GPT-2 (LayerNorm, learned
// positions, biases, tanh GELU), GPT-2 with erf GELU and tied embeddings.
Model variant(const std::string& name) {
  if (name == "llama") return test::tiny_model("llama", "fp32", false);
  if (name == "llama3_tied") {
    Model m = test::tiny_model("llama", "fp32", true, 5);
    m.config.rope_style = engine::RopeStyle::interleaved;
    m.config.rope_scaling = "llama3";
    m.config.rope_factor = 8.0;
    m.config.rope_low_freq_factor = 1.0;
    m.config.rope_high_freq_factor = 4.0;
    m.config.rope_original_max_positions = 16;
    m.config.rope_theta = 500000.0;
    return m;
  }
  if (name == "qwen2") {
    Model m = test::tiny_model("llama", "fp32", false, 7);
    std::mt19937 g(3);
    const int kd = m.config.n_kv_heads * m.config.head_dim;
    for (auto& l : m.layers) {
      l.bq = test::random_vector(g, m.config.dim, 0.0F, 0.2F);
      l.bk = test::random_vector(g, kd, 0.0F, 0.2F);
      l.bv = test::random_vector(g, kd, 0.0F, 0.2F);
    }
    return m;
  }
  if (name == "gpt2") return test::tiny_model("gpt2", "fp32", false);
  Model m = test::tiny_model("gpt2", "fp32", true, 9);  // gpt2_gelu_tied
  m.config.activation = engine::Activation::gelu;
  return m;
}

}  // namespace

TEST_CASE("fp64 gradients equal central finite differences for every parameter", "[train][unit]") {
  const auto name = GENERATE(as<std::string>{}, "llama", "llama3_tied", "qwen2", "gpt2", "gpt2_gelu_tied");
  INFO(name);
  const Model m = variant(name);
  const int batch = 2;
  const int seq = 5;
  const auto tokens = test::random_tokens(batch, seq, m.config.vocab_size, 17);
  Params<double> p = params_from_model<double>(m);
  Params<double> g;
  const double loss = loss_and_gradients(m.config, p, tokens, batch, seq, g);
  CHECK(std::isfinite(loss));
  CHECK(loss > 0.0);
  const auto loss_at = [&](const Params<double>& q) {
    Params<double> unused;
    return loss_and_gradients(m.config, q, tokens, batch, seq, unused);
  };
  // Each parameter tensor: ‖fd − g‖₂ ≤ 1e-6 ‖g‖₂ with h = 1e-5 (truncation ~h², rounding ~1e-16/h).
  // Without RoPE the key bias's exact gradient is 0 (softmax ignores a shift shared by a row's
  // scores, and q·bk is one): there the bound is 1e-6 of a thousandth of the whole gradient's norm.
  std::vector<std::string> names;
  std::vector<Eigen::VectorXd> analytic;
  double total = 0;
  g.for_each([&](const std::string& n, const auto& t) {
    names.push_back(n);
    analytic.emplace_back(Eigen::Map<const Eigen::VectorXd>(t.data(), t.size()));
    total += analytic.back().squaredNorm();
  });
  const double floor = 1e-3 * std::sqrt(total);
  std::size_t i = 0;
  const double h = 1e-5;
  // Under the sanitizers every 8th element: each loss evaluation runs the same code, so the rest
  // adds no memory or UB coverage (the release build checks every element).
  const Eigen::Index stride = test::kSanitized ? 8 : 1;
  p.for_each([&](const std::string& n, auto& t) {
    REQUIRE(n == names[i]);
    Eigen::VectorXd fd = analytic[i];
    for (Eigen::Index j = 0; j < t.size(); j += stride) {
      const double keep = t.data()[j];
      t.data()[j] = keep + h;
      const double up = loss_at(p);
      t.data()[j] = keep - h;
      const double down = loss_at(p);
      t.data()[j] = keep;
      fd(j) = (up - down) / (2 * h);
    }
    const double err = (fd - analytic[i]).norm();
    const double ref = analytic[i].norm();
    INFO(n << ": |fd - g| = " << err << ", |g| = " << ref);
    const bool zero_exact = n.ends_with("/bk") && m.config.positions == engine::PositionKind::learned;
    CHECK((zero_exact ? ref < 1e-12 * floor : ref > floor));
    CHECK(err <= 1e-6 * std::max(ref, floor));
    ++i;
  });
  CHECK(i == names.size());
}

TEST_CASE("the training forward pass gives the inference engine's loss", "[train][unit]") {
  const auto name = GENERATE(as<std::string>{}, "llama", "llama3_tied", "qwen2", "gpt2", "gpt2_gelu_tied");
  INFO(name);
  const Model m = variant(name);
  const int seq = 6;
  const auto tokens = test::random_tokens(1, seq, m.config.vocab_size, 23);
  // Reference: the engine's fp64 logits, cross-entropy in double.
  engine::Session s(m, engine::builtin_plan("fp64"));
  const engine::RowMatrix logits = s.forward(std::span<const int>(tokens.data(), seq));
  double ref = 0;
  for (int i = 0; i < seq; ++i) {
    const Eigen::VectorXd row = logits.row(i).cast<double>().transpose();
    const double mx = row.maxCoeff();
    ref += std::log((row.array() - mx).exp().sum()) + mx - row(tokens[static_cast<std::size_t>(i) + 1]);
  }
  ref /= seq;
  Params<double> g;
  const double loss = loss_and_gradients(m.config, params_from_model<double>(m), tokens, 1, seq, g);
  CHECK(loss == Approx(ref).epsilon(1e-6));
  Params<float> gf;
  const double loss32 = loss_and_gradients(m.config, params_from_model<float>(m), tokens, 1, seq, gf);
  CHECK(loss32 == Approx(ref).epsilon(1e-5));
  // fp32 gradients within float rounding of the fp64 ones.
  std::vector<Eigen::VectorXd> g64;
  double total = 0;
  g.for_each([&](const std::string&, const auto& t) {
    g64.emplace_back(Eigen::Map<const Eigen::VectorXd>(t.data(), t.size()));
    total += g64.back().squaredNorm();
  });
  const double floor = 1e-3 * std::sqrt(total);  // the key bias's exact gradient is 0
  std::size_t i = 0;
  gf.for_each([&](const std::string& n, const auto& t) {
    const Eigen::VectorXd v = Eigen::Map<const Eigen::VectorXf>(t.data(), t.size()).cast<double>();
    INFO(n);
    CHECK((v - g64[i]).norm() <= 1e-4 * std::max(g64[i].norm(), floor));
    ++i;
  });
}

TEST_CASE("training refuses mixture-of-experts models and bad token batches by name", "[train][unit]") {
  const Model moe = test::tiny_model("mixtral", "fp32", false);
  CHECK_THROWS_WITH(params_from_model<float>(moe),
                    "model 'tiny-mixtral': mixture-of-experts blocks are not trainable yet");
  const Model m = variant("gpt2");
  const Params<float> p = params_from_model<float>(m);
  Params<float> g;
  std::vector<int> tokens(7, 1);
  CHECK_THROWS_AS(loss_and_gradients(m.config, p, tokens, 2, 3, g), ShapeError);
  tokens.assign(8, 1);
  tokens[3] = 40;
  CHECK_THROWS_WITH(loss_and_gradients(m.config, p, tokens, 2, 3, g), "train: token id 40 out of range");
  std::vector<int> long_seq(34, 1);
  CHECK_THROWS_WITH(loss_and_gradients(m.config, p, long_seq, 1, 33, g),
                    "train: seq 33 exceeds the model's 32 learned positions");
}
