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
#include "support/test_support.hpp"
#include "support/tiny_model.hpp"

namespace {

using namespace lpemu::engine;
using lpemu::test::random_matrix;
using lpemu::test::tiny_model;

using lpemu::test::same_bits;

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
    const lpemu::test::Scratch scratch("weights");
    const auto file = scratch / ("lpemu_weights_" + k.family + ".h5");
    save_model(wide, file);
    const Model narrow = load_model(file);
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
