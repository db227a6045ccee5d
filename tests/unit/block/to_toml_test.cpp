// Block formats write themselves: for every built-in block format, reading what to_toml writes
// gives the same record, and to_toml is a fixed point of read-then-write.
#include <string>

#include <catch2/catch.hpp>

#include "lpemu/block/block_format.hpp"
#include "lpemu/format/registry.hpp"

using namespace lpemu;

TEST_CASE("every built-in block format round-trips through to_toml", "[block][records][unit]") {
  const block::BlockRegistry& reg = block::BlockRegistry::builtin();
  const format::Registry& elements = format::Registry::builtin();
  REQUIRE(reg.names().size() >= 12);
  for (const auto& name : reg.names()) {
    INFO(name);
    const block::BlockFormat& f = reg.get(name);
    const std::string text = block::to_toml(f);
    const block::BlockFormat back = block::parse_block_format_toml(text, reg.origin(name), elements);
    CHECK(back == f);
    CHECK(block::to_toml(back) == text);
  }
}

TEST_CASE("a changed block format round-trips through to_toml", "[block][records][unit]") {
  const format::Registry& elements = format::Registry::builtin();
  block::BlockOverrides o;
  o.block_size = 64;
  o.axis = 0;
  o.scale_rule = "search";
  o.element_options.rounding = format::RoundingMode::toward_zero;
  o.element_options.overflow = format::Overflow::saturate;
  const block::BlockFormat f = block::with_overrides(block::BlockRegistry::builtin().get("nvfp4"), o);
  const block::BlockFormat back = block::parse_block_format_toml(block::to_toml(f), "x.toml", elements);
  CHECK(back == f);
}
