// Randomised invariants of the engine's forward pass on random models and token sequences.
#include <cstring>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/session.hpp"
#include "lpemu/format/registry.hpp"

namespace {

using namespace lpemu::engine;

Model random_model(std::mt19937& g, bool gpt2) {
  std::normal_distribution<float> d(0.0F, 0.4F);
  auto mat = [&](int r, int c) {
    RowMatrix m(r, c);
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = d(g);
    return m;
  };
  auto vec = [&](int n, float base) {
    Vec<float> v(n);
    for (Eigen::Index i = 0; i < n; ++i) v(i) = base + 0.1F * d(g);
    return v;
  };
  Model m;
  Config& c = m.config;
  c.family = gpt2 ? "gpt2" : "llama";
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = gpt2 ? 4 : 1;
  c.head_dim = 8;
  c.hidden_dim = 40;
  c.vocab_size = 50;
  c.seq_len = 48;
  c.norm = gpt2 ? NormType::layernorm : NormType::rmsnorm;
  c.positions = gpt2 ? PositionKind::learned : PositionKind::rope;
  c.ffn = gpt2 ? FfnKind::mlp : FfnKind::swiglu;
  c.activation = gpt2 ? Activation::gelu : Activation::silu;
  m.tok_embeddings = mat(50, 32);
  if (gpt2) m.pos_embeddings = mat(48, 32);
  for (int l = 0; l < 2; ++l) {
    LayerWeights w;
    w.attention_norm = vec(32, 1);
    w.ffn_norm = vec(32, 1);
    w.wq = mat(32, 32);
    w.wk = mat(c.n_kv_heads * 8, 32);
    w.wv = mat(c.n_kv_heads * 8, 32);
    w.wo = mat(32, 32);
    w.w1 = mat(40, 32);
    w.w2 = mat(32, 40);
    if (!gpt2) w.w3 = mat(40, 32);
    if (gpt2) {
      w.bq = vec(32, 0);
      w.b1 = vec(40, 0);
    }
    m.layers.push_back(w);
  }
  m.norm = vec(32, 1);
  m.output = mat(50, 32);
  return m;
}

PrecisionPlan plan(const char* text) {
  static const auto q = QuantizerFactory::with_element_formats(lpemu::format::Registry::builtin());
  return parse_plan_toml(text, "property.toml", q, GemmFactory::builtin());
}

bool same_bits(const RowMatrix& a, Eigen::Index rows, const RowMatrix& b) {
  return std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<std::size_t>(rows * a.cols())) == 0;
}

TEST_CASE("logits at position t do not depend on later tokens (bit for bit, quantised plans too)",
          "[engine][property]") {
  const PrecisionPlan quantised = plan(R"(
[roles]
weights = "fp8_e4m3"
linear_input = { format = "fp8_e5m2", rounding = "stochastic", seed = 1 }
kv_cache = "fp8_e4m3"
scores = "bf16"
probs = { format = "fp16", rounding = "stochastic", seed = 2 }
residual = "bf16"
)");
  std::mt19937 g(20261202);
  for (int trial = 0; trial < 6; ++trial) {
    const bool gpt2 = trial % 2 == 1;
    const Model m = random_model(g, gpt2);
    std::uniform_int_distribution<int> tok(0, 49);
    std::vector<int> a(24);
    for (auto& t : a) t = tok(g);
    std::vector<int> b = a;
    const int cut = 4 + trial * 3;
    for (std::size_t i = static_cast<std::size_t>(cut); i < b.size(); ++i) b[i] = (b[i] + 1 + tok(g)) % 50;
    for (const PrecisionPlan* p : {&quantised}) {
      Session sa(m, *p);
      Session sb(m, *p);
      const RowMatrix la = sa.forward(a);
      const RowMatrix lb = sb.forward(b);
      INFO("trial " << trial << " cut " << cut << (gpt2 ? " gpt2" : " llama"));
      CHECK(same_bits(la, cut, lb));
    }
  }
}

TEST_CASE("a plan quantising every role to fp32 equals the fp32 reference bit for bit",
          "[engine][property]") {
  const PrecisionPlan all_fp32 = plan(R"(
[roles]
weights = "fp32"
linear_input = "fp32"
q = "fp32"
k = "fp32"
v = "fp32"
kv_cache = "fp32"
scores = "fp32"
probs = "fp32"
attn_output = "fp32"
mlp_hidden = "fp32"
residual = "fp32"
lm_head = "fp32"
lm_head_input = "fp32"
logits = "fp32"
)");
  std::mt19937 g(7);
  for (int trial = 0; trial < 4; ++trial) {
    const Model m = random_model(g, trial % 2 == 0);
    std::vector<int> t(16);
    std::uniform_int_distribution<int> tok(0, 49);
    for (auto& x : t) x = tok(g);
    Session ref(m, builtin_plan("fp32"));
    Session all(m, all_fp32);
    const RowMatrix a = ref.forward(t);
    const RowMatrix b = all.forward(t);
    CHECK(same_bits(a, a.rows(), b));
  }
}

}  // namespace
