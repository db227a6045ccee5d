// Datapaths write themselves: every built-in datapath record round-trips through to_toml, and the
// named changes give records that round-trip too.
#include <string>

#include <catch2/catch.hpp>

#include "lpemu/datapath/datapath.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/registry.hpp"

using namespace lpemu;

TEST_CASE("every built-in datapath round-trips through to_toml", "[datapath][records][unit]") {
  const datapath::DatapathRegistry& reg = datapath::DatapathRegistry::builtin();
  const format::Registry& formats = format::Registry::builtin();
  REQUIRE(reg.names().size() >= 50);
  for (const auto& name : reg.names()) {
    INFO(name);
    const datapath::Datapath& d = reg.get(name);
    const std::string text = datapath::to_toml(d);
    const datapath::Datapath back = datapath::parse_datapath_toml(text, reg.origin(name), formats);
    CHECK(back == d);
    CHECK(datapath::to_toml(back) == text);
  }
}

TEST_CASE("named datapath changes edit the typed record", "[datapath][records][unit]") {
  const format::Registry& formats = format::Registry::builtin();
  const datapath::Datapath& base = datapath::DatapathRegistry::builtin().get("h100_e4m3_fp32");
  const auto round_trip = [&](const datapath::Datapath& d) {
    CHECK(datapath::parse_datapath_toml(datapath::to_toml(d), "x.toml", formats) == d);
  };

  const auto fused = datapath::with_fused_terms(base, 16);
  CHECK(fused.fused_terms == 16);
  round_trip(fused);
  CHECK_THROWS_AS(datapath::with_fused_terms(base, 0), SpecError);  // 0 = all of K needs exact alignment

  const auto ideal = datapath::DatapathRegistry::builtin().get("ideal");
  const auto aligned = datapath::with_alignment_bits(datapath::with_fused_terms(ideal, 16), 20);
  CHECK(aligned.alignment == datapath::Alignment::truncate);
  CHECK(aligned.fraction_bits == 20);
  round_trip(aligned);

  const auto fp16 = datapath::with_accumulator(base, formats.get("fp16"));
  CHECK(fp16.accumulator.name == "fp16");
  CHECK(fp16.accumulator_fraction_bits == 10);
  CHECK_FALSE(fp16.exponent_floor);
  CHECK(fp16.addend_emin == formats.get("fp16").emin);  // was at fp32's default: follows the accumulator
  round_trip(fp16);
  const auto& fp16_fp16 = datapath::DatapathRegistry::builtin().get("h100_fp16_fp16");
  CHECK(datapath::with_accumulator(fp16_fp16, formats.get("fp32")).addend_emin == fp16_fp16.addend_emin);
  CHECK_THROWS_AS(datapath::with_accumulator(base, formats.get("e8m0")), SpecError);

  const auto promoted = datapath::with_promotion(base, 128, formats.get("fp32"));
  CHECK(promoted.promote_every == 128);
  CHECK(promoted.promotion_format->name == "fp32");
  round_trip(promoted);
  CHECK(datapath::without_promotion(promoted) == datapath::with_promotion(promoted, 0, formats.get("fp32")));
  CHECK(datapath::without_promotion(promoted).promote_every == 0);

  const auto renamed = datapath::with_inputs(datapath::with_name(base, "mine", "my datapath"),
                                             formats.get("fp8_e5m2"), formats.get("fp8_e5m2"));
  CHECK(renamed.name == "mine");
  CHECK(renamed.a.name == "fp8_e5m2");
  round_trip(renamed);
  CHECK_THROWS_AS(datapath::with_name(base, "", ""), SpecError);
}
