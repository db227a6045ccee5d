// Weights in their stored precision: 16-bit storage decodes exactly, a model loaded from a BF16 /
// F16 file holds its matrices in 16 bits and gives the same logits, bit for bit, as the same model
// widened to float32.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
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

TEST_CASE(
    "a weight quantised in one pass from its stored values has the bits of quantise-in-place and encode",
    "[engine][unit][weights]") {
  const auto& reg = lpemu::format::Registry::builtin();
  const QuantizerFactory qf = QuantizerFactory::standard(reg);
  std::mt19937 g(5);
  QuantPoint p;
  p.index_offset = 7;
  p.stream = 3;
  for (const char* spec : {"fp8_e4m3", "fp8_e5m2", "fp4_e2m1", "bf16", "mxfp8_e4m3", "nvfp4"}) {
    for (const auto rounding :
         {lpemu::format::RoundingMode::nearest_even, lpemu::format::RoundingMode::stochastic}) {
      QuantSpec s;
      s.format = spec;
      s.options.rounding = rounding;
      s.options.seed = 17;
      const auto q = qf.make(s);
      for (const auto& [rows, cols] :
           {std::pair{130, 37}, std::pair{64, 96}, std::pair{1, 5}, std::pair{200, 64}}) {
        INFO(spec << " " << rows << "x" << cols << " rounding " << static_cast<int>(rounding));
        RowMatrix x = random_matrix(g, rows, cols, 3.0F, "fp32");
        x(0, 0) = 1e9F;  // saturates or overflows as the format says
        RowMatrix copy = x, out;
        q->apply(copy, p);
        q->apply(x, out, p);
        CHECK(same_bits(out, copy));
        // The codes of encode() as bytes, any rows at a time, x untouched.
        RowMatrix y = x;
        const RowMatrix before = x;
        EncodedOperand e, ref = q->encode(y, p);
        const RowCodes8 codes = q->row_codes8(x, p, e);
        CHECK(static_cast<bool>(codes) == (q->block_format() == nullptr && q->element_format().bits <= 8));
        if (!codes) continue;
        CHECK(e.tensor.codes.empty());
        CHECK(e.tensor.layout.shape == ref.tensor.layout.shape);
        CHECK(e.element.name == ref.element.name);
        REQUIRE(static_cast<std::size_t>(x.size()) == ref.tensor.codes.size());
        const auto n = static_cast<std::size_t>(rows), k = static_cast<std::size_t>(cols);
        std::vector<std::uint8_t> got(n * k);
        for (std::size_t r0 = 0, step = 1; r0 < n; r0 += step, step = step * 2 + 1) {
          codes(r0, std::min(step, n - r0), got.data() + r0 * k);  // blocks of 1, 3, 7, ... rows
        }
        std::size_t differ = 0;
        for (std::size_t i = 0; i < got.size(); ++i) differ += got[i] != ref.tensor.codes[i] ? 1 : 0;
        CHECK(differ == 0);
        CHECK(same_bits(x, before));
      }
    }
  }
}

// A quantiser that has no one-pass encoder (row_codes8), so that sessions prepare a datapath weight
// step by step (copy, quantise and encode, then prepare): the reference of the one pass.
class StepByStep final : public Quantizer {
 public:
  explicit StepByStep(std::unique_ptr<Quantizer> q) : q_(std::move(q)) {}
  const std::string& name() const override { return q_->name(); }
  const lpemu::format::Format& element_format() const override { return q_->element_format(); }
  const lpemu::block::BlockFormat* block_format() const override { return q_->block_format(); }
  EncodedOperand encode(RowMatrix& x, const QuantPoint& p) const override { return q_->encode(x, p); }
  void apply(RowMatrix& x, const QuantPoint& p) const override { q_->apply(x, p); }
  void apply(const RowMatrix& in, RowMatrix& out, const QuantPoint& p) const override {
    q_->apply(in, out, p);
  }
  void apply(RowMatrixD& x, const QuantPoint& p) const override { q_->apply(x, p); }

 private:
  std::unique_ptr<Quantizer> q_;
};

// The quantisation points a hook saw: name → (input, output), in the order of calls per name.
using Seen = std::map<std::string, std::vector<std::pair<RowMatrix, RowMatrix>>>;

TEST_CASE("sessions prepare weights in one pass with the bits of the step-by-step preparation",
          "[engine][unit][weights]") {
  // Sessions whose quantisers have no one-pass encoder prepare each datapath weight step by step;
  // the others encode it straight from its storage, with or without a quantisation hook (which
  // then sees the same inputs and outputs). Fake-quantised weights take the one pass either way,
  // the hook seeing their stored values as input.
  const auto& reg = lpemu::format::Registry::builtin();
  const QuantizerFactory standard = QuantizerFactory::standard(reg);
  QuantizerFactory stepwise = QuantizerFactory::standard(reg);
  stepwise.add_provider("element format, step by step", reg.names(), [&standard](const QuantSpec& spec) {
    return std::unique_ptr<Quantizer>(std::make_unique<StepByStep>(standard.make(spec)));
  });
  const std::vector<int> tokens{1, 5, 9, 2, 33, 17, 4, 8};
  const std::vector<std::string> plans{
      "[roles]\nweights = \"mxfp8_e4m3\"\nlinear_input = \"mxfp8_e4m3\"\nlm_head = \"mxfp8_e4m3\"\n",
      "[roles]\nweights = { format = \"fp8_e4m3\", rounding = \"stochastic\", seed = 4 }\nlm_head = "
      "\"nvfp4\"\n",
      "[roles]\ngemm = \"h100_e4m3_fp32\"\nweights = \"fp8_e4m3\"\nlinear_input = \"fp8_e4m3\"\n"
      "lm_head = \"fp8_e4m3\"\nlm_head_input = \"fp8_e4m3\"\n",
      "[roles]\ngemm = \"h100_e4m3_fp32\"\nweights = { format = \"fp8_e4m3\", rounding = \"stochastic\", "
      "seed = 4 }\n"
      "linear_input = \"fp8_e4m3\"\nlm_head = \"fp8_e4m3\"\nlm_head_input = \"fp8_e4m3\"\n",
      "[roles]\ngemm = \"h100_e5m2_fp32\"\nweights = \"fp8_e5m2\"\nlinear_input = \"fp8_e5m2\"\n"
      "lm_head = \"fp8_e5m2\"\nlm_head_input = \"fp8_e5m2\"\n"};
  const lpemu::test::Scratch scratch("weights_fused");
  for (const char* family : {"llama", "mixtral"}) {
    const Model wide = tiny_model(family, "bf16", false);
    const auto file = scratch / (std::string("fused_") + family + ".h5");
    save_model(wide, file);
    const Model narrow = load_model(file);  // held as bf16
    for (const Model* m : {&wide, &narrow}) {
      for (const auto& text : plans) {
        INFO(family << " " << (m == &wide ? "fp32" : "bf16") << " storage\n" << text);
        const PrecisionPlan pl = plan("name = \"p\"\n" + text);
        Seen seen_fused, seen_steps;
        const auto hook = [](Seen& seen) {
          return [&seen](const QuantPoint& p, const RowMatrix& in, const RowMatrix& out) {
            seen[std::to_string(p.layer) + "/" + std::string(to_string(p.role)) + "/" +
                 std::string(p.tensor) + "/" + std::to_string(p.head)]
                .emplace_back(in, out);
          };
        };
        SessionOptions hooked_fused, steps_plain, hooked_steps;
        hooked_fused.on_quant = hook(seen_fused);
        steps_plain.quantizers = &stepwise;
        hooked_steps.quantizers = &stepwise;
        hooked_steps.on_quant = hook(seen_steps);
        Session fused(*m, pl);
        Session fused_hooked(*m, pl, hooked_fused);
        Session steps(*m, pl, steps_plain);
        Session steps_hooked(*m, pl, hooked_steps);
        const RowMatrix want = steps.forward(std::span<const int>(tokens.data(), 6));
        CHECK(same_bits(fused.forward(std::span<const int>(tokens.data(), 6)), want));
        CHECK(same_bits(fused_hooked.forward(std::span<const int>(tokens.data(), 6)), want));
        CHECK(same_bits(steps_hooked.forward(std::span<const int>(tokens.data(), 6)), want));
        const RowMatrix next = steps.forward(std::span<const int>(tokens.data() + 6, 1));
        CHECK(same_bits(fused.forward(std::span<const int>(tokens.data() + 6, 1)), next));
        CHECK(same_bits(fused_hooked.forward(std::span<const int>(tokens.data() + 6, 1)), next));
        CHECK(same_bits(steps_hooked.forward(std::span<const int>(tokens.data() + 6, 1)), next));
        // The hook saw the same points, inputs and outputs on both paths.
        REQUIRE(!seen_steps.empty());
        REQUIRE(seen_fused.size() == seen_steps.size());
        for (const auto& [key, calls] : seen_steps) {
          INFO(key);
          REQUIRE(seen_fused.count(key) == 1);
          const auto& other = seen_fused.at(key);
          REQUIRE(other.size() == calls.size());
          for (std::size_t i = 0; i < calls.size(); ++i) {
            CHECK(same_bits(other[i].first, calls[i].first));
            CHECK(same_bits(other[i].second, calls[i].second));
          }
        }
      }
    }
  }
}
