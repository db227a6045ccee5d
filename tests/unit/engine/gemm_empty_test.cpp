// Regression: a datapath GEMM with an empty inner dimension (K = 0) is an empty sum, not a crash.
#include <catch2/catch.hpp>

#include "lpemu/datapath/datapath.hpp"
#include "lpemu/engine/quantizer.hpp"

TEST_CASE("datapath GEMM with K = 0 gives exact zeros", "[engine][gemm][regression]") {
  const auto gemms = lpemu::engine::GemmFactory::with_datapaths(lpemu::datapath::DatapathRegistry::builtin());
  for (const char* name : {"h100_e4m3_fp32", "ideal"}) {
    INFO(name);
    const auto g = gemms.make(name);
    const lpemu::engine::RowMatrix a(2, 0), b(3, 0);
    lpemu::engine::RowMatrix c = lpemu::engine::RowMatrix::Constant(1, 1, 7.0f);
    g->nt(a, b, c, {});
    REQUIRE(c.rows() == 2);
    REQUIRE(c.cols() == 3);
    CHECK(c.isZero(0.0f));
  }
}
