// Block-format plans (compiled when lpemu::block is part of the build): the engine hands each
// quantisation point to the block layer as a [rows, cols] tensor blocked along the contraction
// axis (the last one), with the plan's rounding options.
#include <catch2/catch.hpp>

#if __has_include("lpemu/block/block_format.hpp")
#include <cstring>
#include <set>

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/session.hpp"
#include "lpemu/format/registry.hpp"
#include "support/test_support.hpp"

namespace {

using namespace lpemu::engine;

TEST_CASE("block-format plans quantise each point along its contraction axis", "[engine][block]") {
  const auto q = QuantizerFactory::standard(lpemu::format::Registry::builtin());
  REQUIRE(q.knows("mxfp4"));
  const Model m = load_model(lpemu::test::source_path("data/models/stories260K/model.h5"));
  const PrecisionPlan plan = load_plan("mxfp4", q, GemmFactory::builtin(), {lpemu::test::source_path("")});
  std::set<std::string> formats;
  std::size_t checked = 0;
  SessionOptions opts;
  opts.quantizers = &q;
  opts.on_quant = [&](const QuantPoint& p, const RowMatrix& in, const RowMatrix& out) {
    const auto spec = plan.resolve(p.role, p.layer, p.kind, m.config.n_layers);
    REQUIRE(spec.has_value());
    formats.insert(spec->format);
    const lpemu::block::BlockFormat* bf = lpemu::block::BlockRegistry::builtin().find(spec->format);
    if (bf == nullptr) return;  // an element format (bf16 attention internals)
    REQUIRE(p.axis == 1);
    const std::size_t shape[2] = {static_cast<std::size_t>(in.rows()), static_cast<std::size_t>(in.cols())};
    std::vector<float> want(static_cast<std::size_t>(in.size()));
    lpemu::block::quantize(*bf, std::span<const float>(in.data(), want.size()), want, shape);
    CHECK(std::memcmp(want.data(), out.data(), want.size() * sizeof(float)) == 0);
    ++checked;
  };
  Session s(m, plan, opts);
  const std::vector<int> tokens{1, 403, 407, 261, 378, 400, 260, 1000 % 512};
  (void)s.forward(tokens);
  CHECK(checked > 20);
  CHECK(formats.count("mxfp4") == 1);
  CHECK(formats.count("mxfp8_e4m3") == 1);
}

}  // namespace
#endif
