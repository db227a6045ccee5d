#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "lpemu/block/block_format.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/registry.hpp"
#include "support/test_support.hpp"

namespace {

using lpemu::block::BlockRegistry;
using lpemu::block::Granularity;
using lpemu::block::ScaleRule;

lpemu::block::BlockFormat parse(const std::string& text) {
  return lpemu::block::parse_block_format_toml(text, "test.toml", lpemu::format::Registry::builtin());
}

std::string error_of(const std::string& text) {
  try {
    (void)parse(text);
  } catch (const lpemu::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_CASE("every built-in block format parses with the documented fields", "[block][unit]") {
  const auto& r = BlockRegistry::builtin();
  struct Row {
    const char* name;
    const char* element;
    const char* scale;
    int block;
  };
  const Row rows[] = {{"mxfp8_e4m3", "fp8_e4m3", "e8m0", 32}, {"mxfp8_e5m2", "fp8_e5m2", "e8m0", 32},
                      {"mxfp6_e2m3", "fp6_e2m3", "e8m0", 32}, {"mxfp6_e3m2", "fp6_e3m2", "e8m0", 32},
                      {"mxfp4", "fp4_e2m1", "e8m0", 32},      {"mxint8", "mxint8_element", "e8m0", 32},
                      {"nvfp4", "fp4_e2m1", "fp8_e4m3", 16}};
  for (const auto& row : rows) {
    INFO(row.name);
    const auto& f = r.get(row.name);
    CHECK(f.element.name == row.element);
    CHECK(f.scale_name == row.scale);
    CHECK(f.granularity == Granularity::block);
    CHECK(f.block_size == row.block);
    CHECK(f.axis == -1);
    CHECK_FALSE(f.source.empty());
  }
  CHECK(r.get("mxfp4").rule == ScaleRule::ocp);
  CHECK(r.get("nvfp4").rule == ScaleRule::amax_over_max);
  CHECK(r.get("nvfp4").tensor_scale == lpemu::block::TensorScale::fp32);
  CHECK(r.get("fp8_e4m3_per_tensor").granularity == Granularity::per_tensor);
  CHECK(r.get("int8_per_channel").granularity == Granularity::per_column);
  CHECK(r.get("int8_per_token").granularity == Granularity::per_row);
  CHECK(r.get("fp8_e4m3_tile128").tile_rows == 128);
  CHECK(r.get("fp8_e4m3_tile128").tile_cols == 128);
  CHECK(r.get("mxfp8").name == "mxfp8_e4m3");  // alias
  CHECK(r.names().size() == 13);
}

TEST_CASE("element emax and scale exponent range follow the formats", "[block][unit]") {
  const auto& r = BlockRegistry::builtin();
  CHECK(r.get("mxfp8_e4m3").element_emax() == 8);
  CHECK(r.get("mxfp8_e5m2").element_emax() == 15);
  CHECK(r.get("mxfp6_e2m3").element_emax() == 2);
  CHECK(r.get("mxfp6_e3m2").element_emax() == 4);
  CHECK(r.get("mxfp4").element_emax() == 2);
  CHECK(r.get("mxint8").element_emax() == 0);
  CHECK(r.get("mxfp4").scale_min_exponent() == -127);
  CHECK(r.get("mxfp4").scale_max_exponent() == 127);
}

TEST_CASE("unknown block names suggest the closest", "[block][unit]") {
  try {
    (void)BlockRegistry::builtin().get("mxfp44");
    FAIL("no error");
  } catch (const lpemu::UnknownNameError& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("unknown block format 'mxfp44'") &&
                             Catch::Matchers::Contains("mxfp4"));
  }
}

TEST_CASE("block format errors name file, line, field, value and expectation", "[block][unit]") {
  const std::string base = "name = \"x\"\nelement = \"fp4_e2m1\"\nscale = \"e8m0\"\n";
  CHECK(error_of(base + "block_size = 0\n") ==
        "test.toml:4: field 'block_size' = 0: expected an integer in 1..4096");
  CHECK(error_of(base + "block_size = 5000\n") ==
        "test.toml:4: field 'block_size' = 5000: expected an integer in 1..4096");
  CHECK_THAT(
      error_of(base + "colour = 1\n"),
      Catch::Matchers::StartsWith("test.toml:4: field 'colour' = 1: expected a known key (aliases, axis,"));
  CHECK(
      error_of(base + "scale_rule = \"floor\"\n") ==
      "test.toml:4: field 'scale_rule' = \"floor\": expected one of \"ocp\", \"ceil\", \"rceil\", \"even\", "
      "\"amax_over_max\", \"search\"; closest known names: ocp, ceil, even");
  CHECK(error_of(base + "granularity = \"tile\"\n") ==
        "test.toml:1: field 'tile' = (missing): expected [rows, cols] with granularity = \"tile\"");
  CHECK(error_of(base + "tile = [16]\n") ==
        "test.toml:4: field 'tile' = an array: expected two integers [rows, cols], each 1..4096");
  CHECK_THAT(
      error_of("name = \"x\"\nelement = \"fp4_e2m2\"\nscale = \"e8m0\"\n"),
      Catch::Matchers::StartsWith("test.toml:2: field 'element' = \"fp4_e2m2\": expected a known element "
                                  "format (see `lpemu formats list`); closest known names: "));
  CHECK(
      error_of("name = \"x\"\nelement = \"fp4_e2m1\"\nscale = \"int8\"\n") ==
      "test.toml:3: field 'scale' = \"int8\": expected \"pow2\" or a floating-point format such as \"e8m0\", "
      "\"fp8_e4m3\", \"fp32\"");
  CHECK_THAT(
      error_of("name = \"x\"\nelement = \"fp4_e2m1\"\nscale = \"pow2\"\nscale_rule = \"amax_over_max\"\n"),
      Catch::Matchers::Contains("field 'scale_rule' = \"amax_over_max\": expected a power-of-two rule"));
  CHECK_THAT(error_of(base + "tensor_scale = \"fp32\"\n"),
             Catch::Matchers::Contains("field 'tensor_scale' = \"fp32\": expected \"none\" unless"));
  CHECK_THAT(error_of("element = \"fp4_e2m1\"\nscale = \"e8m0\"\n"),
             Catch::Matchers::Contains("field 'name' = (missing): expected a string"));
  CHECK(parse(base + "scale_rule = \"rceil\"\n").rule == ScaleRule::ceil);
}

TEST_CASE("user block formats load from DIR/block and clash with taken names", "[block][unit]") {
  const lpemu::test::Scratch scratch("block_user");
  const auto& dir = scratch.dir;
  std::filesystem::create_directories(dir / "block");
  std::ofstream(dir / "block" / "my16.toml") << "name = \"mxfp4_b16\"\nelement = \"fp4_e2m1\"\nscale = "
                                                "\"e8m0\"\nblock_size = 16\n";
  const auto r = BlockRegistry::with_user_paths(lpemu::format::Registry::builtin(), {dir});
  CHECK(r.get("mxfp4_b16").block_size == 16);
  CHECK(r.origin("mxfp4_b16") == (dir / "block" / "my16.toml").string());
  CHECK(r.origin("mxfp4") == "builtin:block/mxfp4.toml");
  std::ofstream(dir / "block" / "z.toml") << "name = \"mxfp4\"\nelement = \"fp4_e2m1\"\nscale = \"e8m0\"\n";
  CHECK_THROWS_AS(BlockRegistry::with_user_paths(lpemu::format::Registry::builtin(), {dir}),
                  lpemu::SpecError);
}

}  // namespace
