// lpemu::experiment::Context: the registries and factories the CLI, the Python module and C++
// users share.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "lpemu/error.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/format/format.hpp"
#include "support/test_support.hpp"

namespace {

using namespace lpemu;

TEST_CASE("Context resolves built-in formats, plans and models from its data dirs", "[experiment][context]") {
  experiment::Context ctx;
  ctx.data_dirs = {lpemu::test::source_path("")};
  CHECK(ctx.formats().get("fp8_e4m3").bits == 8);
  CHECK(ctx.blocks().get("mxfp4").block_size == 32);
  CHECK(ctx.datapaths().find("h100_e4m3_fp32") != nullptr);
  CHECK(ctx.quantizers().knows("nvfp4"));
  CHECK(ctx.gemms().knows("h100_e4m3_fp32"));
  const engine::PrecisionPlan plan = ctx.load_plan("mxfp4");
  CHECK(plan.name == "mxfp4");
  CHECK(ctx.load_model("stories260K").config.n_layers == 5);
  // The catalog prices the context's datapath records.
  CHECK(ctx.costs().datapath("h100_e4m3_fp32").fused_terms == 32);
  const experiment::Toolbox& t = ctx.toolbox();
  CHECK(t.quantizers == &ctx.quantizers());
  CHECK(t.costs == &ctx.costs());
  CHECK(t.search_dirs.front() == lpemu::test::source_path(""));
}

TEST_CASE("Context takes user formats before its factories are built, not after", "[experiment][context]") {
  experiment::Context ctx;
  format::Format f = format::make_float("fp7_test", 3, 3, 3, format::Specials::ieee);
  ctx.add_format(f, "test");
  CHECK(ctx.formats().get("fp7_test").bits == 7);
  CHECK(ctx.quantizers().knows("fp7_test"));
  CHECK_THROWS_WITH(
      ctx.add_format(format::make_float("fp7_late", 3, 3, 3, format::Specials::ieee), "test"),
      "cannot add an element format after the context's quantizer, GEMM or cost factories were built; "
      "add formats first");
}

TEST_CASE("data_search_dirs puts the caller's dirs first, then LPEMU_DATA_DIR and the working dir",
          "[experiment][context]") {
  const auto dirs = experiment::data_search_dirs({"/a", "/b"});
  REQUIRE(dirs.size() >= 3);
  CHECK(dirs[0] == "/a");
  CHECK(dirs[1] == "/b");
  CHECK(dirs.back() == std::filesystem::current_path());
}

}  // namespace
