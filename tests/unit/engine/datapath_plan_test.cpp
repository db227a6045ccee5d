// Datapath GEMM strategies (compiled when lpemu::datapath is part of the build).
#include <catch2/catch.hpp>

#if __has_include("lpemu/datapath/gemm.hpp")
#include <atomic>
#include <cstring>
#include <random>

#include "lpemu/datapath/datapath.hpp"
#include "lpemu/datapath/gemm.hpp"
#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/quantizer.hpp"
#include "lpemu/engine/session.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "support/test_support.hpp"

namespace {

using namespace lpemu::engine;

TEST_CASE("a datapath GEMM computes A·Bᵀ exactly when every partial sum is representable",
          "[engine][datapath]") {
  const auto gemms = GemmFactory::builtin();
  REQUIRE(gemms.knows("h100_e4m3_fp32"));
  const auto g = gemms.make("h100_e4m3_fp32");
  // Small integers are exact in fp8_e4m3, and their dot products are exact in fp32.
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> d(-8, 8);
  RowMatrix a(5, 40), b(7, 40), c;
  for (Eigen::Index i = 0; i < a.size(); ++i) a.data()[i] = static_cast<float>(d(rng));
  for (Eigen::Index i = 0; i < b.size(); ++i) b.data()[i] = static_cast<float>(d(rng));
  g->nt(a, b, c, GemmPoint{0, LayerKind::mlp, "w1", "fp8_e4m3", "fp8_e4m3"});
  REQUIRE(c.rows() == 5);
  REQUIRE(c.cols() == 7);
  for (Eigen::Index i = 0; i < 5; ++i) {
    for (Eigen::Index j = 0; j < 7; ++j) {
      double want = 0;
      for (Eigen::Index k = 0; k < 40; ++k)
        want += static_cast<double>(a(i, k)) * static_cast<double>(b(j, k));
      CHECK(static_cast<double>(c(i, j)) == want);
    }
  }
}

// Rows already on the input format's grid are the codes a core would be fed: the strategy must
// not rescale them (subnormal inputs align differently in the BFMA model, docs/tensor-core-model.md).
TEST_CASE("a datapath GEMM feeds on-grid operands to the datapath unscaled", "[engine][datapath]") {
  const auto g = GemmFactory::builtin().make("h100_e4m3_fp32");
  const auto& dp = lpemu::datapath::DatapathRegistry::builtin().get("h100_e4m3_fp32");
  const auto& e4 = lpemu::format::Registry::builtin().get("fp8_e4m3");
  std::mt19937 rng(3);
  std::normal_distribution<double> nd(0, 1);
  for (int trial = 0; trial < 20; ++trial) {
    const int m = 3, n = 5, k = 100;
    RowMatrix a(m, k), b(n, k), c;
    const double sa = std::ldexp(1.0, static_cast<int>(rng() % 14) - 10);  // down to subnormal-heavy rows
    const double sb = std::ldexp(1.0, static_cast<int>(rng() % 8) - 4);
    for (Eigen::Index i = 0; i < a.size(); ++i)
      a.data()[i] = static_cast<float>(lpemu::format::quantize(e4, nd(rng) * sa));
    for (Eigen::Index i = 0; i < b.size(); ++i)
      b.data()[i] = static_cast<float>(lpemu::format::quantize(e4, nd(rng) * sb));
    g->nt(a, b, c, GemmPoint{0, LayerKind::mlp, "w1", "fp8_e4m3", "fp8_e4m3"});
    std::vector<std::uint64_t> ac(m * k), bc(k * n), dc(m * n);
    for (int i = 0; i < m; ++i) {
      for (int t = 0; t < k; ++t)
        ac[static_cast<std::size_t>(i * k + t)] = lpemu::format::encode(e4, static_cast<double>(a(i, t)));
    }
    for (int j = 0; j < n; ++j) {
      for (int t = 0; t < k; ++t)
        bc[static_cast<std::size_t>(t * n + j)] = lpemu::format::encode(e4, static_cast<double>(b(j, t)));
    }
    lpemu::datapath::gemm(dp, m, n, k, ac, bc, {}, dc);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        INFO("trial " << trial << " (" << i << ", " << j << ")");
        CHECK(static_cast<double>(c(i, j)) ==
              lpemu::format::decode(dp.output(), dc[static_cast<std::size_t>(i * n + j)]));
      }
    }
  }
}

// The strategy keeps the encoding of B (a layer's weights) between calls; a B changed in place
// must be encoded again.
TEST_CASE("a datapath GEMM re-encodes a weight matrix changed in place", "[engine][datapath]") {
  const auto g = GemmFactory::builtin().make("h100_e4m3_fp32");
  RowMatrix a(2, 40), b(3, 40), c1, c2, c3;
  for (Eigen::Index i = 0; i < a.size(); ++i) a.data()[i] = static_cast<float>(i % 7) - 3.0F;
  for (Eigen::Index i = 0; i < b.size(); ++i) b.data()[i] = static_cast<float>(i % 5) - 2.0F;
  const GemmPoint p{0, LayerKind::mlp, "w1", "fp8_e4m3", "fp8_e4m3"};
  g->nt(a, b, c1, p);
  g->nt(a, b, c2, p);  // from the kept encoding
  CHECK(c1 == c2);
  b(1, 7) += 8.0F;  // same address, new contents
  g->nt(a, b, c3, p);
  CHECK(c3(0, 0) == c1(0, 0));
  CHECK(c3(1, 1) == c1(1, 1) + 8.0F * a(1, 7));
  CHECK(c3(0, 1) == c1(0, 1) + 8.0F * a(0, 7));
}

TEST_CASE("the h100_e4m3 datapath plan runs stories260K close to its fp8 fake-quant plan",
          "[engine][datapath]") {
  const auto q = QuantizerFactory::standard(lpemu::format::Registry::builtin());
  const auto gemms = GemmFactory::builtin();
  const Model m = load_model(lpemu::test::source_path("data/models/stories260K/model.h5"));
  const PrecisionPlan dp = load_plan("h100_e4m3", q, gemms, {lpemu::test::source_path("")});
  CHECK(dp.resolve_gemm(2, LayerKind::attention, 5) == "h100_e4m3_fp32");
  SessionOptions o;
  o.quantizers = &q;
  o.gemms = &gemms;
  Session s(m, dp, o);
  Session ref(m, builtin_plan("fp32"), o);
  const std::vector<int> tokens{1, 403, 407, 261, 378, 400, 260};
  const RowMatrix a = s.forward(tokens);
  const RowMatrix b = ref.forward(tokens);
  CHECK(a.allFinite());
  CHECK((a - b).cwiseAbs().maxCoeff() < 5.0F);
  int agree = 0;
  for (int t = 0; t < a.rows(); ++t) agree += argmax(a, t) == argmax(b, t) ? 1 : 0;
  CHECK(agree >= 4);
}

// Forwards to a datapath strategy; `release` says whether weights may give up their codes after
// prepare_weight. Counts the GEMMs that found B's codes released.
class Releasing final : public Gemm {
 public:
  Releasing(std::shared_ptr<const Gemm> inner, bool release) : inner_(std::move(inner)), release_(release) {}
  const std::string& name() const override { return inner_->name(); }
  const lpemu::datapath::Datapath* datapath() const override { return inner_->datapath(); }
  void nt(const RowMatrix& a, const RowMatrix& b, RowMatrix& c, const GemmPoint& p) const override {
    if (p.b_operand != nullptr && p.b_operand->tensor.codes.empty()) ++released;
    inner_->nt(a, b, c, p);
  }
  bool prepare_weight(const EncodedOperand& b, std::size_t rows, std::size_t k,
                      std::string_view site) const override {
    return inner_->prepare_weight(b, rows, k, site) && release_;
  }
  mutable std::atomic<int> released{0};

 private:
  std::shared_ptr<const Gemm> inner_;
  bool release_;
};

TEST_CASE("a session's datapath weights give up their codes once prepared, with the same logits",
          "[engine][datapath]") {
  const auto q = QuantizerFactory::standard(lpemu::format::Registry::builtin());
  const Model m = load_model(lpemu::test::source_path("data/models/stories260K/model.h5"));
  for (const char* dp : {"h100_e4m3_fp32", "b200_mxfp8_fp32", "a100_bf16_fp32"}) {
    INFO(dp);
    const std::string format = dp[0] == 'h' ? "fp8_e4m3" : dp[0] == 'b' ? "mxfp8_e4m3" : "bf16";
    RowMatrix logits[2];
    int released[2] = {0, 0};
    for (const bool release : {false, true}) {
      GemmFactory gemms = GemmFactory::builtin();
      auto g = std::make_shared<Releasing>(gemms.make(dp), release);
      gemms.add(dp, [g]() { return std::shared_ptr<const Gemm>(g); });
      const PrecisionPlan plan =
          parse_plan_toml("[roles]\nweights = \"" + format + "\"\nlinear_input = \"" + format +
                              "\"\ngemm = \"" + dp + "\"\n[[override]]\nkind = \"head\"\ngemm = \"none\"\n",
                          "release.toml", q, gemms);
      SessionOptions o;
      o.quantizers = &q;
      o.gemms = &gemms;
      Session s(m, plan, o);
      const std::vector<int> tokens{1, 403, 407, 261, 378, 400, 260};
      logits[release ? 1 : 0] = s.forward(tokens);
      (void)s.forward(std::vector<int>{5});  // decode after prefill: the prepared form is reused
      released[release ? 1 : 0] = g->released;
    }
    CHECK(released[0] == 0);
    CHECK(released[1] > 0);
    CHECK(std::memcmp(logits[0].data(), logits[1].data(),
                      sizeof(float) * static_cast<std::size_t>(logits[0].size())) == 0);
  }
}

}  // namespace
#endif
