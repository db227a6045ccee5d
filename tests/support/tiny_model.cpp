#include "support/tiny_model.hpp"

#include <bit>
#include <cstdint>
#include <random>
#include <span>

#include "lpemu/block/quantize.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"

namespace lpemu::test {

using namespace lpemu::engine;

// Random values rounded to `format` (so that they are exactly its values).
RowMatrix random_matrix(std::mt19937& g, int r, int c, float scale, const char* format) {
  std::normal_distribution<float> d(0.0F, scale);
  RowMatrix m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = d(g);
  const std::span<float> s(m.data(), static_cast<std::size_t>(m.size()));
  lpemu::format::quantize(lpemu::format::Registry::builtin().get(format), std::span<const float>(s), s);
  return m;
}

Vec<float> random_vector(std::mt19937& g, int n, float mean, float scale) {
  std::normal_distribution<float> d(mean, scale);
  Vec<float> v(n);
  for (Eigen::Index i = 0; i < n; ++i) v(i) = d(g);
  return v;
}

// A tiny float32 model whose matrices hold `format` values: Llama (GQA, SwiGLU), GPT-2 (learned
// positions, biases) or Mixtral (mixture of experts).
Model tiny_model(const std::string& family, const char* format, bool tied, unsigned seed) {
  std::mt19937 g(seed);
  Model m;
  Config& c = m.config;
  const bool gpt2 = family == "gpt2";
  c.name = "tiny-" + family;
  c.family = gpt2 ? "gpt2" : "llama";
  c.dim = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = gpt2 ? 4 : 2;
  c.head_dim = 4;
  c.hidden_dim = 24;
  c.vocab_size = 40;
  c.seq_len = 32;
  c.norm_eps = 1e-5;
  c.rope_theta = 100.0;
  c.rope_style = RopeStyle::half;
  c.norm = gpt2 ? NormType::layernorm : NormType::rmsnorm;
  c.positions = gpt2 ? PositionKind::learned : PositionKind::rope;
  c.ffn = gpt2 ? FfnKind::mlp : FfnKind::swiglu;
  c.activation = gpt2 ? Activation::gelu_tanh : Activation::silu;
  c.tied_embeddings = tied;
  if (family == "mixtral") {
    c.n_experts = 3;
    c.n_experts_per_token = 2;
  }
  const int kd = c.n_kv_heads * c.head_dim;
  m.tok_embeddings = random_matrix(g, c.vocab_size, c.dim, 1.0F, format);
  if (gpt2) m.pos_embeddings = random_matrix(g, c.seq_len, c.dim, 0.5F, format);
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights w;
    w.attention_norm = random_vector(g, c.dim, 1.0F, 0.1F);
    w.ffn_norm = random_vector(g, c.dim, 1.0F, 0.1F);
    w.wq = random_matrix(g, c.dim, c.dim, 0.3F, format);
    w.wk = random_matrix(g, kd, c.dim, 0.3F, format);
    w.wv = random_matrix(g, kd, c.dim, 0.3F, format);
    w.wo = random_matrix(g, c.dim, c.dim, 0.3F, format);
    if (c.n_experts > 0) {
      w.router = random_matrix(g, c.n_experts, c.dim, 0.5F, format);
      for (int e = 0; e < c.n_experts; ++e) {
        w.experts.push_back({random_matrix(g, c.hidden_dim, c.dim, 0.3F, format),
                             random_matrix(g, c.dim, c.hidden_dim, 0.3F, format),
                             random_matrix(g, c.hidden_dim, c.dim, 0.3F, format)});
      }
    } else {
      w.w1 = random_matrix(g, c.hidden_dim, c.dim, 0.3F, format);
      w.w2 = random_matrix(g, c.dim, c.hidden_dim, 0.3F, format);
      if (!gpt2) w.w3 = random_matrix(g, c.hidden_dim, c.dim, 0.3F, format);
    }
    if (gpt2) {
      w.attention_norm_bias = random_vector(g, c.dim, 0.0F, 0.1F);
      w.ffn_norm_bias = random_vector(g, c.dim, 0.0F, 0.1F);
      w.bq = random_vector(g, c.dim, 0.0F, 0.1F);
      w.bk = random_vector(g, c.dim, 0.0F, 0.1F);
      w.bv = random_vector(g, c.dim, 0.0F, 0.1F);
      w.bo = random_vector(g, c.dim, 0.0F, 0.1F);
      w.b1 = random_vector(g, c.hidden_dim, 0.0F, 0.1F);
      w.b2 = random_vector(g, c.dim, 0.0F, 0.1F);
    }
    m.layers.push_back(w);
  }
  m.norm = random_vector(g, c.dim, 1.0F, 0.1F);
  if (gpt2) m.norm_bias = random_vector(g, c.dim, 0.0F, 0.1F);
  m.output = tied ? m.tok_embeddings : WeightMatrix(random_matrix(g, c.vocab_size, c.dim, 0.3F, format));
  return m;
}

const engine::QuantizerFactory& builtin_quantizers() {
  static const engine::QuantizerFactory q = engine::QuantizerFactory::standard(format::Registry::builtin());
  return q;
}

const engine::GemmFactory& builtin_gemms() {
  static const engine::GemmFactory g = engine::GemmFactory::builtin();
  return g;
}

engine::PrecisionPlan read_plan(const std::string& text, const std::string& origin) {
  return engine::parse_plan_toml(text, origin, builtin_quantizers(), builtin_gemms());
}

RowMatrix quantize_along(const block::BlockFormat& fmt, const RowMatrix& x, int axis) {
  block::BlockFormat f = fmt;
  RowMatrix in = x;
  bool transposed = false;
  if (f.granularity == block::Granularity::block) {
    f.axis = axis;
  } else if (axis == 0) {
    in = x.transpose();
    transposed = true;
  }
  const std::size_t shape[2] = {static_cast<std::size_t>(in.rows()), static_cast<std::size_t>(in.cols())};
  RowMatrix out(in.rows(), in.cols());
  block::quantize(f, std::span<const float>(in.data(), static_cast<std::size_t>(in.size())),
                  std::span<float>(out.data(), static_cast<std::size_t>(out.size())), shape);
  return transposed ? RowMatrix(out.transpose()) : out;
}

bool same_bits(const RowMatrix& a, const RowMatrix& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    if (std::bit_cast<std::uint32_t>(a.data()[i]) != std::bit_cast<std::uint32_t>(b.data()[i])) return false;
  }
  return true;
}

std::vector<int> random_tokens(int batch, int seq, int vocab, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(0, vocab - 1);
  std::vector<int> v(static_cast<std::size_t>(batch * (seq + 1)));
  for (int& x : v) x = d(g);
  return v;
}

}  // namespace lpemu::test
