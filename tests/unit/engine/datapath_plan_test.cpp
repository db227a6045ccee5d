// Datapath GEMM strategies (compiled when lpemu::datapath is part of the build).
#include <catch2/catch.hpp>

#if __has_include("lpemu/datapath/gemm.hpp")
#  include <random>

#  include "lpemu/engine/model.hpp"
#  include "lpemu/engine/plan.hpp"
#  include "lpemu/engine/quantizer.hpp"
#  include "lpemu/engine/session.hpp"
#  include "lpemu/format/registry.hpp"
#  include "support/test_support.hpp"

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
      for (Eigen::Index k = 0; k < 40; ++k) want += static_cast<double>(a(i, k)) * static_cast<double>(b(j, k));
      CHECK(static_cast<double>(c(i, j)) == want);
    }
  }
}

TEST_CASE("the h100_e4m3 datapath plan runs stories260K close to its fp8 fake-quant plan", "[engine][datapath]") {
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

}  // namespace
#endif
