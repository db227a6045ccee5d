// Tiny random models written to HDF5 and run through the engine, against an independent naive
// forward pass in double written here with plain loops (it shares no code with lpemu::engine).
#include <cmath>
#include <filesystem>
#include <random>
#include <set>
#include <vector>

#include <tbb/global_control.h>
#include <catch2/catch.hpp>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/session.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"

namespace {

using namespace lpemu::engine;
using Dmat = std::vector<std::vector<double>>;

Model tiny_model(bool gpt2, unsigned seed) {
  return lpemu::test::tiny_model(gpt2 ? "gpt2" : "llama", "fp32", false, seed);
}

// ---- the naive reference: one token position at a time, double, plain loops ----
std::vector<double> mv(const WeightMatrix& weight, const Vec<float>& b, const std::vector<double>& x) {
  const RowMatrix w = weight.to_float();
  std::vector<double> y(static_cast<std::size_t>(w.rows()), 0.0);
  for (Eigen::Index i = 0; i < w.rows(); ++i) {
    double s = b.size() != 0 ? static_cast<double>(b(i)) : 0.0;
    for (Eigen::Index j = 0; j < w.cols(); ++j)
      s += static_cast<double>(w(i, j)) * x[static_cast<std::size_t>(j)];
    y[static_cast<std::size_t>(i)] = s;
  }
  return y;
}

std::vector<double> norm_ref(const Config& c, const std::vector<double>& x, const Vec<float>& w,
                             const Vec<float>& b) {
  const double n = static_cast<double>(x.size());
  double mean = 0;
  if (c.norm == NormType::layernorm) {
    for (const double v : x) mean += v / n;
  }
  double var = 0;
  for (const double v : x) var += (v - mean) * (v - mean) / n;
  std::vector<double> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    y[i] = (x[i] - mean) / std::sqrt(var + c.norm_eps) * static_cast<double>(w(static_cast<Eigen::Index>(i)));
    if (b.size() != 0) y[i] += static_cast<double>(b(static_cast<Eigen::Index>(i)));
  }
  return y;
}

void rope_ref(const Config& c, std::vector<double>& x, int heads, int pos) {
  const int hd = c.head_dim;
  for (int h = 0; h < heads; ++h) {
    for (int j = 0; j < hd / 2; ++j) {
      const double a = pos * std::pow(c.rope_theta, -2.0 * j / hd);
      const std::size_t i0 = static_cast<std::size_t>(h * hd + (c.rope_style == RopeStyle::half ? j : 2 * j));
      const std::size_t i1 =
          static_cast<std::size_t>(h * hd + (c.rope_style == RopeStyle::half ? j + hd / 2 : 2 * j + 1));
      const double x0 = x[i0];
      const double x1 = x[i1];
      x[i0] = x0 * std::cos(a) - x1 * std::sin(a);
      x[i1] = x0 * std::sin(a) + x1 * std::cos(a);
    }
  }
}

Dmat naive_logits(const Model& m, const std::vector<int>& tokens) {
  const Config& c = m.config;
  const std::size_t T = tokens.size();
  const int hd = c.head_dim;
  Dmat x(T, std::vector<double>(static_cast<std::size_t>(c.dim)));
  const RowMatrix tok_embeddings = m.tok_embeddings.to_float();
  const RowMatrix pos_embeddings = m.pos_embeddings.to_float();
  for (std::size_t t = 0; t < T; ++t) {
    for (int j = 0; j < c.dim; ++j) {
      x[t][static_cast<std::size_t>(j)] =
          static_cast<double>(tok_embeddings(tokens[t], j)) +
          (c.positions == PositionKind::learned
               ? static_cast<double>(pos_embeddings(static_cast<Eigen::Index>(t), j))
               : 0.0);
    }
  }
  for (const LayerWeights& w : m.layers) {
    Dmat q(T), k(T), v(T);
    for (std::size_t t = 0; t < T; ++t) {
      const auto xb = norm_ref(c, x[t], w.attention_norm, w.attention_norm_bias);
      q[t] = mv(w.wq, w.bq, xb);
      k[t] = mv(w.wk, w.bk, xb);
      v[t] = mv(w.wv, w.bv, xb);
      if (c.positions == PositionKind::rope) {
        rope_ref(c, q[t], c.n_heads, static_cast<int>(t));
        rope_ref(c, k[t], c.n_kv_heads, static_cast<int>(t));
      }
    }
    for (std::size_t t = 0; t < T; ++t) {
      std::vector<double> att(static_cast<std::size_t>(c.n_heads * hd), 0.0);
      for (int h = 0; h < c.n_heads; ++h) {
        const int g = h / (c.n_heads / c.n_kv_heads);
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (std::size_t u = 0; u <= t; ++u) {
          double d = 0;
          for (int i = 0; i < hd; ++i)
            d += q[t][static_cast<std::size_t>(h * hd + i)] * k[u][static_cast<std::size_t>(g * hd + i)];
          s[u] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[u]);
        }
        double z = 0;
        for (auto& e : s) z += (e = std::exp(e - mx));
        for (std::size_t u = 0; u <= t; ++u) {
          for (int i = 0; i < hd; ++i)
            att[static_cast<std::size_t>(h * hd + i)] +=
                s[u] / z * v[u][static_cast<std::size_t>(g * hd + i)];
        }
      }
      const auto o = mv(w.wo, w.bo, att);
      for (std::size_t j = 0; j < o.size(); ++j) x[t][j] += o[j];
    }
    for (std::size_t t = 0; t < T; ++t) {
      const auto xf = norm_ref(c, x[t], w.ffn_norm, w.ffn_norm_bias);
      auto h1 = mv(w.w1, w.b1, xf);
      const auto h3 = c.ffn == FfnKind::swiglu ? mv(w.w3, w.b3, xf) : std::vector<double>();
      for (std::size_t i = 0; i < h1.size(); ++i) {
        const double z = h1[i];
        const double a = c.activation == Activation::silu
                             ? z / (1 + std::exp(-z))
                             : 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
        h1[i] = c.ffn == FfnKind::swiglu ? a * h3[i] : a;
      }
      const auto y = mv(w.w2, w.b2, h1);
      for (std::size_t j = 0; j < y.size(); ++j) x[t][j] += y[j];
    }
  }
  Dmat logits(T);
  for (std::size_t t = 0; t < T; ++t)
    logits[t] = mv(m.output, Vec<float>(), norm_ref(c, x[t], m.norm, m.norm_bias));
  return logits;
}

double max_diff(const Dmat& ref, const RowMatrix& got) {
  double e = 0;
  for (std::size_t t = 0; t < ref.size(); ++t) {
    for (std::size_t j = 0; j < ref[t].size(); ++j) {
      e = std::max(e, std::abs(ref[t][j] - static_cast<double>(got(static_cast<Eigen::Index>(t),
                                                                   static_cast<Eigen::Index>(j)))));
    }
  }
  return e;
}

Model saved_and_loaded(const Model& m) {
  const lpemu::test::Scratch scratch("forward");
  const auto file = scratch / ("lpemu_" + m.config.name + ".h5");
  save_model(m, file);
  return load_model(file);
}

const std::vector<int> kTokens{1, 5, 9, 33, 2, 17, 17, 39, 0, 12, 8, 25};

TEST_CASE("GPT-2 family forward matches a naive double reference", "[engine][unit]") {
  const Model m = saved_and_loaded(tiny_model(true, 7));
  CHECK(m.config.norm == NormType::layernorm);
  CHECK(m.config.positions == PositionKind::learned);
  CHECK(m.config.ffn == FfnKind::mlp);
  const Dmat ref = naive_logits(m, kTokens);
  Session s64(m, builtin_plan("fp64"));
  CHECK(max_diff(ref, s64.forward(kTokens)) < 1e-5);
  Session s32(m, builtin_plan("fp32"));
  CHECK(max_diff(ref, s32.forward(kTokens)) < 1e-4);
}

TEST_CASE("a learned-position model refuses positions past seq_len instead of reading past pos_embeddings",
          "[engine][unit][regression]") {
  const Model m = tiny_model(true, 5);
  SessionOptions o;
  o.max_tokens = 2 * m.config.seq_len;  // a cache longer than the learned positions
  Session s(m, builtin_plan("fp32"), o);
  std::vector<int> tokens(static_cast<std::size_t>(m.config.seq_len), 1);
  CHECK(s.forward(tokens).rows() == m.config.seq_len);  // every learned position is usable
  const std::vector<int> one{2};
  CHECK_THROWS_WITH(s.forward(one),
                    Catch::Matchers::Contains("position 32 has no learned position embedding"));
}

TEST_CASE("Llama family with half-split RoPE and GQA matches a naive double reference", "[engine][unit]") {
  const Model m = saved_and_loaded(tiny_model(false, 11));
  CHECK(m.config.rope_style == RopeStyle::half);
  CHECK(m.config.n_kv_heads == 2);
  const Dmat ref = naive_logits(m, kTokens);
  Session s64(m, builtin_plan("fp64"));
  CHECK(max_diff(ref, s64.forward(kTokens)) < 1e-5);
}

TEST_CASE("decode with the KV cache agrees with one prefill pass", "[engine][unit]") {
  const Model m = tiny_model(false, 3);
  Session a(m, builtin_plan("fp64"));
  const RowMatrix all = a.forward(kTokens);
  Session b(m, builtin_plan("fp64"));
  RowMatrix steps(all.rows(), all.cols());
  (void)b.forward(std::span<const int>(kTokens.data(), 5));
  for (std::size_t t = 5; t < kTokens.size(); ++t) {
    steps.row(static_cast<Eigen::Index>(t)) = b.forward(std::span<const int>(&kTokens[t], 1)).row(0);
  }
  CHECK(b.position() == static_cast<int>(kTokens.size()));
  const double e = static_cast<double>((all.bottomRows(7) - steps.bottomRows(7)).cwiseAbs().maxCoeff());
  CHECK(e < 1e-9);
  b.reset();
  CHECK(b.position() == 0);
}

TEST_CASE("results are bit-identical for 1 and 4 threads, stochastic rounding included", "[engine][unit]") {
  const Model m = tiny_model(false, 5);
  const auto& reg = lpemu::format::Registry::builtin();
  const auto q = QuantizerFactory::with_element_formats(reg);
  const PrecisionPlan plan = parse_plan_toml(R"(
[roles]
weights = "fp8_e4m3"
linear_input = { format = "fp8_e4m3", rounding = "stochastic", seed = 3 }
scores = "bf16"
probs = { format = "fp8_e5m2", rounding = "stochastic" }
residual = "bf16"
)",
                                             "t.toml", q, GemmFactory::builtin());
  auto run = [&](std::size_t threads) {
    const tbb::global_control gc(tbb::global_control::max_allowed_parallelism, threads);
    Session s(m, plan);
    RowMatrix out = s.forward(kTokens);
    return out;
  };
  const RowMatrix one = run(1);
  const RowMatrix four = run(4);
  REQUIRE(one.size() == four.size());
  CHECK(std::memcmp(one.data(), four.data(), sizeof(float) * static_cast<std::size_t>(one.size())) == 0);
}

TEST_CASE("hooks see every quantisation point; outputs are the element format's rounding of inputs",
          "[engine][unit]") {
  const Model m = tiny_model(true, 9);
  const auto& reg = lpemu::format::Registry::builtin();
  const auto q = QuantizerFactory::with_element_formats(reg);
  const PrecisionPlan plan = parse_plan_toml(R"(
[defaults]
overflow = "saturate"
[roles]
weights = "fp8_e4m3"
linear_input = "fp8_e5m2"
kv_cache = "fp8_e4m3"
scores = "bf16"
probs = "bf16"
attn_output = "bf16"
mlp_hidden = "fp8_e4m3"
residual = "bf16"
lm_head = "bf16"
lm_head_input = "bf16"
logits = "fp16"
[[override]]
layers = [-1]
kind = "mlp"
weights = "none"
)",
                                             "t.toml", q, GemmFactory::builtin());
  std::set<std::tuple<std::string, int, std::string>> seen;
  std::size_t checked = 0;
  SessionOptions opts;
  opts.on_quant = [&](const QuantPoint& p, const RowMatrix& in, const RowMatrix& out) {
    seen.emplace(std::string(to_string(p.role)), p.layer, std::string(p.tensor));
    const auto spec = plan.resolve(p.role, p.layer, p.kind, m.config.n_layers);
    REQUIRE(spec.has_value());
    const auto& f = reg.get(spec->format);
    REQUIRE(in.size() == out.size());
    for (Eigen::Index i = 0; i < in.size(); ++i) {
      const double want = lpemu::format::quantize(f, static_cast<double>(in.data()[i]), spec->options);
      if (static_cast<double>(out.data()[i]) != want)
        FAIL(spec->format << " " << in.data()[i] << " -> " << out.data()[i]);
    }
    ++checked;
  };
  Session s(m, plan, opts);
  (void)s.forward(kTokens);
  CHECK(checked > 0);
  for (const char* t : {"wq", "wk", "wv", "wo", "w1", "w2"}) {
    CHECK(seen.count({"weights", 0, t}) == 1);
  }
  CHECK(seen.count({"weights", 1, "w1"}) == 0);  // last layer's MLP weights overridden to none
  CHECK(seen.count({"weights", 1, "wq"}) == 1);
  for (int l = 0; l < 2; ++l) {
    for (const auto& [role, tensor] :
         std::vector<std::pair<std::string, std::string>>{{"linear_input", "qkv_input"},
                                                          {"linear_input", "wo_input"},
                                                          {"linear_input", "w1_w3_input"},
                                                          {"linear_input", "w2_input"},
                                                          {"kv_cache", "k_cache"},
                                                          {"kv_cache", "v_cache"},
                                                          {"scores", "scores"},
                                                          {"probs", "probs"},
                                                          {"attn_output", "attn_output"},
                                                          {"mlp_hidden", "mlp_hidden"},
                                                          {"residual", "residual"}}) {
      INFO(role << " " << l << " " << tensor);
      CHECK(seen.count({role, l, tensor}) == 1);
    }
  }
  CHECK(seen.count({"lm_head", -1, "output"}) == 1);
  CHECK(seen.count({"lm_head_input", -1, "output_input"}) == 1);
  CHECK(seen.count({"logits", -1, "logits"}) == 1);
}

}  // namespace
