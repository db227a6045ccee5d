// Weights in their stored precision: 16-bit storage decodes exactly, a model loaded from a BF16 /
// F16 file holds its matrices in 16 bits and gives the same logits, bit for bit, as the same model
// widened to float32.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/session.hpp"
#include "lpemu/engine/weights.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"

namespace {

using namespace lpemu::engine;

bool same_bits(const RowMatrix& a, const RowMatrix& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(float)) == 0;
}

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
Model tiny_model(const std::string& family, const char* format, bool tied) {
  std::mt19937 g(11);
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
      w.b1 = random_vector(g, c.hidden_dim, 0.0F, 0.1F);
    }
    m.layers.push_back(w);
  }
  m.norm = random_vector(g, c.dim, 1.0F, 0.1F);
  if (gpt2) m.norm_bias = random_vector(g, c.dim, 0.0F, 0.1F);
  m.output = tied ? m.tok_embeddings : WeightMatrix(random_matrix(g, c.vocab_size, c.dim, 0.3F, format));
  return m;
}

// Every weight matrix of `m`.
std::vector<const WeightMatrix*> matrices(const Model& m) {
  std::vector<const WeightMatrix*> out{&m.tok_embeddings, &m.output};
  if (m.pos_embeddings.size() != 0) out.push_back(&m.pos_embeddings);
  for (const auto& l : m.layers) {
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3, &l.router}) {
      if (w->size() != 0) out.push_back(w);
    }
    for (const auto& e : l.experts) out.insert(out.end(), {&e.w1, &e.w2, &e.w3});
  }
  return out;
}

PrecisionPlan plan(const std::string& toml) {
  const auto& reg = lpemu::format::Registry::builtin();
  return parse_plan_toml(toml, "t.toml", QuantizerFactory::standard(reg), GemmFactory::builtin());
}

}  // namespace

TEST_CASE("16-bit weight storage decodes exactly and holds 2 bytes per element", "[engine][unit][weights]") {
  std::mt19937 g(3);
  RowMatrix v = random_matrix(g, 5, 7, 1.0F, "bf16");
  v(0, 0) = -0.0F;
  // bf16's smallest subnormal, a negative subnormal and its largest finite value (float32 bits).
  const std::uint32_t bits[3] = {0x00010000u, 0x807F0000u, 0x7F7F0000u};
  std::memcpy(&v(0, 1), bits, sizeof bits);
  const WeightMatrix w =
      WeightMatrix::stored_as(WeightStorage::bf16, 5, 7, std::span<const float>(v.data(), 35));
  CHECK(w.storage() == WeightStorage::bf16);
  CHECK(w.bytes() == 35 * 2);
  CHECK(WeightMatrix(v).bytes() == 35 * 4);
  CHECK(same_bits(w.to_float(), v));
  RowMatrix buffer;
  CHECK(&w.view(buffer) == &buffer);
  CHECK(same_bits(buffer, v));
  std::vector<float> rows(2 * 7);
  w.read_rows(2, 2, rows);
  CHECK(std::memcmp(rows.data(), v.row(2).data(), rows.size() * sizeof(float)) == 0);
  CHECK_THROWS_AS(w.read_rows(4, 2, rows), lpemu::ShapeError);

  // float32 storage: view() is the matrix itself; copies share the storage.
  const WeightMatrix f(v);
  CHECK(&f.view(buffer) != &buffer);
  const WeightMatrix copy = w;
  CHECK(copy.shares_storage(w));
  CHECK(copy.same_bits(w));
  CHECK_FALSE(f.same_bits(w));

  // A value that is not a bf16 value is refused, not rounded.
  v(1, 1) = 1.0F + 1.0F / 1024;
  CHECK_THROWS_AS(WeightMatrix::stored_as(WeightStorage::bf16, 5, 7, std::span<const float>(v.data(), 35)),
                  lpemu::Error);
  const RowMatrix h = random_matrix(g, 3, 4, 1.0F, "fp16");
  const WeightMatrix w16 =
      WeightMatrix::stored_as(WeightStorage::fp16, 3, 4, std::span<const float>(h.data(), 12));
  CHECK(same_bits(w16.to_float(), h));
}

TEST_CASE("a BF16 / F16 model file is held in 16 bits and gives the logits of its float32 widening",
          "[engine][unit][weights]") {
  const std::vector<int> tokens{1, 5, 9, 2, 33, 17, 4, 8};
  struct Case {
    std::string family;
    const char* format;
    WeightStorage storage;
    bool tied;
  };
  for (const Case& k :
       {Case{"llama", "bf16", WeightStorage::bf16, false}, Case{"llama", "bf16", WeightStorage::bf16, true},
        Case{"gpt2", "fp16", WeightStorage::fp16, true},
        Case{"mixtral", "bf16", WeightStorage::bf16, false}}) {
    INFO(k.family << " " << k.format << (k.tied ? " tied" : ""));
    const Model wide = tiny_model(k.family, k.format, k.tied);
    const auto file = std::filesystem::temp_directory_path() / ("lpemu_weights_" + k.family + ".h5");
    save_model(wide, file);
    const Model narrow = load_model(file);
    std::filesystem::remove(file);
    for (const WeightMatrix* w : matrices(narrow)) CHECK(w->storage() == k.storage);
    CHECK(narrow.output.shares_storage(narrow.tok_embeddings) == k.tied);

    // Matrices take half the bytes; norm weights and biases stay float32.
    std::size_t matrix_bytes = 0;
    for (const WeightMatrix* w : matrices(wide)) {
      if (!(k.tied && w == &wide.output)) matrix_bytes += w->bytes();
    }
    CHECK(wide.weight_bytes() - narrow.weight_bytes() == matrix_bytes / 2);
    CHECK(narrow.weight_bytes() < wide.weight_bytes() * 6 / 10);

    const std::vector<std::string> plans{
        "",  // the fp32 reference
        "compute = \"fp64\"\n",
        "[roles]\nweights = \"fp8_e4m3\"\nlinear_input = \"fp8_e4m3\"\nlm_head = \"fp8_e5m2\"\n",
        "[roles]\ngemm = \"h100_e4m3_fp32\"\nweights = \"fp8_e4m3\"\nlinear_input = \"fp8_e4m3\"\n"
        "lm_head = \"fp8_e4m3\"\nlm_head_input = \"fp8_e4m3\"\n",
        "[roles]\ngemm = { datapath = \"h100_e4m3_fp32\", convert = true }\n"};
    for (const auto& text : plans) {
      INFO(text);
      const PrecisionPlan p = plan("name = \"p\"\n" + text);
      Session a(wide, p);
      Session b(narrow, p);
      const RowMatrix la = a.forward(std::span<const int>(tokens.data(), 5));
      const RowMatrix lb = b.forward(std::span<const int>(tokens.data(), 5));
      CHECK(same_bits(la, lb));
      // Decode: one token at a time through the KV cache.
      CHECK(same_bits(a.forward(std::span<const int>(tokens.data() + 5, 1)),
                      b.forward(std::span<const int>(tokens.data() + 5, 1))));
    }
  }
}
