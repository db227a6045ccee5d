// Every error message of the format layer, compared whole.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "support/test_support.hpp"

namespace {

using namespace lpemu::format;
using Catch::Matchers::StartsWith;

const char* const kFloatHead = "name = \"my\"\nkind = \"float\"\n";

std::string spec_error(const std::string& text) {
  try {
    (void)parse_format_toml(text, "formats/element/my.toml");
  } catch (const lpemu::SpecError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_CASE("malformed format files name file:line, field, value and expectation", "[format][unit]") {
  const std::string head = kFloatHead;
  CHECK(spec_error(head + "exponent_bits = 0\nmantissa_bits = 3\n") ==
        "formats/element/my.toml:3: field 'exponent_bits' = 0: expected an integer in 1..11");
  CHECK(spec_error(head + "exponent_bits = 12\nmantissa_bits = 3\n") ==
        "formats/element/my.toml:3: field 'exponent_bits' = 12: expected an integer in 1..11");
  CHECK(spec_error(head + "exponent_bits = 4\nmantissa_bits = 53\n") ==
        "formats/element/my.toml:4: field 'mantissa_bits' = 53: expected an integer in 0..52");
  CHECK(spec_error(head + "exponent_bits = 4\nmantissa_bits = \"three\"\n") ==
        "formats/element/my.toml:4: field 'mantissa_bits' = \"three\": expected an integer in 0..52");
  CHECK(spec_error(head + "exponent_bits = 4\nmantissa_bits = 3\nspecials = \"inf\"\n") ==
        "formats/element/my.toml:5: field 'specials' = \"inf\": expected one of \"ieee\", \"fn\", \"fnuz\", "
        "\"none\"; closest known names: fn, fnuz, ieee");
  CHECK(spec_error(head + "exponent_bits = 4\nmantissa_bits = 3\nsubnormals = \"yes\"\n") ==
        "formats/element/my.toml:5: field 'subnormals' = \"yes\": expected true or false");
  CHECK(spec_error("name = \"my\"\nkind = \"fixed\"\n") ==
        "formats/element/my.toml:2: field 'kind' = \"fixed\": expected one of \"float\", \"int\"; closest "
        "known names: "
        "float, int");
  CHECK(spec_error("name = \"my\"\nkind = \"int\"\nbits = 33\n") ==
        "formats/element/my.toml:3: field 'bits' = 33: expected an integer width in 2..32");
  CHECK(spec_error("name = \"my\"\nkind = \"int\"\nbits = 1\n") ==
        "formats/element/my.toml:3: field 'bits' = 1: expected an integer width in 2..32");
  CHECK(spec_error("name = \"my\"\nkind = \"int\"\nbits = 8\naliases = \"i8\"\n") ==
        "formats/element/my.toml:4: field 'aliases' = \"i8\": expected an array of strings");
  CHECK(spec_error("name = \"\"\nexponent_bits = 4\nmantissa_bits = 3\n") ==
        "formats/element/my.toml:1: field 'name' = \"\": expected a non-empty name");
}

TEST_CASE("a missing required field is named with what was expected", "[format][unit]") {
  const std::string msg = spec_error(std::string(kFloatHead) + "exponent_bits = 4\n");
  CHECK_THAT(msg, StartsWith("formats/element/my.toml"));
  CHECK_THAT(msg,
             Catch::Matchers::EndsWith("field 'mantissa_bits' = (missing): expected an integer in 0..52"));
}

TEST_CASE("an unknown key is rejected with the list of known keys", "[format][unit]") {
  CHECK(spec_error(std::string(kFloatHead) + "expnent_bits = 4\nmantissa_bits = 3\n") ==
        "formats/element/my.toml:3: field 'expnent_bits' = 4: expected a known key for kind = \"float\" "
        "(aliases, bias, description, exponent_bits, kind, mantissa_bits, name, signed, source, specials, "
        "subnormals, zero); closest known names: exponent_bits, mantissa_bits, bias");
  CHECK(spec_error("name = \"my\"\nkind = \"int\"\nbits = 8\nbias = 3\n") ==
        "formats/element/my.toml:4: field 'bias' = 3: expected a known key for kind = \"int\" "
        "(aliases, bits, description, fraction_bits, kind, name, signed, source, symmetric); closest known "
        "names: bits, "
        "kind, aliases");
}

TEST_CASE("invalid TOML is reported with its line", "[format][unit]") {
  CHECK_THAT(spec_error("name = \"my\"\nexponent_bits = = 4\n"),
             StartsWith("formats/element/my.toml:2: not valid TOML: "));
}

TEST_CASE("inconsistent field combinations name the field, value and rule", "[format][unit]") {
  CHECK_THAT(
      spec_error(std::string(kFloatHead) + "exponent_bits = 8\nmantissa_bits = 1\nzero = false\n"),
      Catch::Matchers::EndsWith(
          "format 'my': field 'subnormals' = true: expected false when zero = false (exponent field 0 is a "
          "normal binade)"));
  CHECK_THAT(
      spec_error(std::string(kFloatHead) + "exponent_bits = 1\nmantissa_bits = 3\n"),
      Catch::Matchers::EndsWith(
          "format 'my': field 'exponent_bits' = 1: expected at least 2 with specials = \"ieee\" (all-ones "
          "exponent is reserved)"));
  CHECK_THAT(spec_error(std::string(kFloatHead) +
                        "exponent_bits = 4\nmantissa_bits = 3\nsigned = false\nspecials = \"fnuz\"\n"),
             Catch::Matchers::EndsWith("format 'my': field 'specials' = \"fnuz\": expected a signed format "
                                       "(fnuz NaN is the sign bit alone)"));
  // Cross-field errors point at the line of the field they name (here line 6, `specials`).
  CHECK_THAT(spec_error(std::string(kFloatHead) +
                        "exponent_bits = 4\nmantissa_bits = 3\nsigned = false\nspecials = \"fnuz\"\n"),
             Catch::Matchers::StartsWith("formats/element/my.toml:6: format 'my': field 'specials'"));
}

TEST_CASE("make_float and make_int reject out-of-range fields", "[format][unit]") {
  REQUIRE_THROWS_MATCHES(make_float("x", 0, 3, 7, Specials::ieee), lpemu::SpecError,
                         Catch::Message("format 'x': field 'exponent_bits' = 0: expected 1..11"));
  REQUIRE_THROWS_MATCHES(make_float("x", 4, 53, 7, Specials::ieee), lpemu::SpecError,
                         Catch::Message("format 'x': field 'mantissa_bits' = 53: expected 0..52"));
  REQUIRE_THROWS_MATCHES(
      make_int("i", 33), lpemu::SpecError,
      Catch::Message("format 'i': field 'bits' = 33: expected an integer width of 2..32 bits"));
  REQUIRE_THROWS_MATCHES(
      make_int("i", 1), lpemu::SpecError,
      Catch::Message("format 'i': field 'bits' = 1: expected an integer width of 2..32 bits"));
  REQUIRE_THROWS_MATCHES(
      make_int("u", 8, false, 0, true), lpemu::SpecError,
      Catch::Message("format 'u': field 'symmetric' = true: expected false for unsigned integers"));
  REQUIRE_THROWS_MATCHES(
      make_float("x", 11, 52, -2000, Specials::ieee), lpemu::SpecError,
      Catch::Message("format 'x': field 'bias' = -2000: expected a range inside double's (emax <= 1023 and "
                     "emin - mantissa_bits >= -1074); emax would be 4046, emin 2001"));
  // An ieee format without mantissa bits would have Inf but no NaN code (NaN used to encode as Inf).
  REQUIRE_THROWS_MATCHES(make_float("e5m0", 5, 0, 15, Specials::ieee), lpemu::SpecError,
                         Catch::Message("format 'e5m0': field 'mantissa_bits' = 0: expected at least 1 with "
                                        "specials = \"ieee\" (NaN needs a non-zero mantissa)"));
  CHECK_NOTHROW(make_float("e5m0", 5, 0, 15, Specials::fn));
  CHECK_NOTHROW(make_float("ok", 11, 52, 1023, Specials::ieee));
  CHECK_NOTHROW(make_int("ok", 2));
  CHECK_NOTHROW(make_int("ok", 32, false, 7));
}

TEST_CASE("an unknown format name lists the closest known names", "[format][unit]") {
  const auto& reg = Registry::builtin();
  REQUIRE_THROWS_MATCHES(reg.get("fp8_e4m4"), lpemu::UnknownNameError,
                         Catch::Message("unknown format 'fp8_e4m4'; closest known names: fp8_e3m4, fp8_e4m3, "
                                        "fp8_e5m2 (see `lpemu formats list`)"));
  CHECK(reg.find("fp8_e4m4") == nullptr);
  CHECK(closest_names("bf61", {"bf16", "fp16", "fp32", "int8"}, 2) ==
        std::vector<std::string>{"bf16", "fp16"});
  CHECK(closest_names("e4m3", {"fp8_e4m3", "fp8_e5m2"}, 1) == std::vector<std::string>{"fp8_e4m3"});
}

TEST_CASE("bad rounding and overflow names list the valid names", "[format][unit]") {
  REQUIRE_THROWS_MATCHES(
      parse_rounding("nearest"), lpemu::SpecError,
      Catch::Message("rounding mode 'nearest': expected one of nearest_even, nearest_away, "
                     "toward_zero, toward_positive, toward_negative, stochastic"));
  REQUIRE_THROWS_MATCHES(parse_overflow("clamp"), lpemu::SpecError,
                         Catch::Message("overflow policy 'clamp': expected saturate or native"));
  for (const auto m : kAllRoundingModes) CHECK(parse_rounding(to_string(m)) == m);
  for (const auto p : kAllOverflowPolicies) CHECK(parse_overflow(to_string(p)) == p);
}

TEST_CASE("sr_bits outside 1..32 is rejected by validate and by the bulk entry points", "[format][unit]") {
  ConvertOptions o;
  for (const int bad : {0, -1, 33}) {
    o.sr_bits = bad;
    REQUIRE_THROWS_MATCHES(
        validate(o), lpemu::SpecError,
        Catch::Message("sr_bits = " + std::to_string(bad) + ": expected 1..32 random bits"));
  }
  o.sr_bits = 33;
  o.rounding = RoundingMode::stochastic;
  const auto& f = Registry::builtin().get("fp8_e4m3");
  std::vector<float> in(4, 1.0F);
  std::vector<std::uint8_t> codes(4);
  std::vector<float> out(4);
  CHECK_THROWS_AS(encode(f, std::span<const float>(in), std::span<std::uint8_t>(codes), o), lpemu::SpecError);
  CHECK_THROWS_AS(quantize(f, std::span<const float>(in), std::span<float>(out), o), lpemu::SpecError);
  o.sr_bits = 1;
  CHECK_NOTHROW(validate(o));
  o.sr_bits = 32;
  CHECK_NOTHROW(validate(o));
}

TEST_CASE("span size and code width mismatches throw ShapeError", "[format][unit]") {
  const auto& reg = Registry::builtin();
  const auto& e4m3 = reg.get("fp8_e4m3");
  std::vector<float> in(3, 1.0F);
  std::vector<float> out2(2);
  std::vector<std::uint8_t> c2(2);
  std::vector<std::uint8_t> c3(3);
  std::vector<std::uint16_t> w3(3);
  REQUIRE_THROWS_MATCHES(encode(e4m3, std::span<const float>(in), std::span<std::uint8_t>(c2)),
                         lpemu::ShapeError, Catch::Message("encode: input has 3 elements but output has 2"));
  REQUIRE_THROWS_MATCHES(quantize(e4m3, std::span<const float>(in), std::span<float>(out2)),
                         lpemu::ShapeError,
                         Catch::Message("quantize: input has 3 elements but output has 2"));
  REQUIRE_THROWS_MATCHES(decode(e4m3, std::span<const std::uint8_t>(c3), std::span<float>(out2)),
                         lpemu::ShapeError, Catch::Message("decode: input has 3 elements but output has 2"));
  REQUIRE_THROWS_MATCHES(
      encode(reg.get("fp16"), std::span<const float>(in), std::span<std::uint8_t>(c3)), lpemu::ShapeError,
      Catch::Message("encode: format 'fp16' has 16-bit codes, which do not fit 8-bit code storage"));
  REQUIRE_THROWS_MATCHES(
      decode(reg.get("fp16"), std::span<const std::uint8_t>(c3), std::span<float>(in)), lpemu::ShapeError,
      Catch::Message("decode: format 'fp16' has 16-bit codes, which do not fit 8-bit code storage"));
  std::vector<double> din(3, 1.0);
  std::vector<std::uint64_t> d2(2);
  CHECK_THROWS_AS(encode(e4m3, std::span<const double>(din), std::span<std::uint64_t>(d2)),
                  lpemu::ShapeError);
  CHECK_NOTHROW(encode(e4m3, std::span<const float>(in), std::span<std::uint16_t>(w3)));
}

TEST_CASE("user format files: duplicates, missing files and directories are errors", "[format][unit]") {
  const lpemu::test::Scratch scratch("format_unit");
  const auto& dir = scratch.dir;
  const auto file = dir / "dup.toml";
  std::ofstream(file) << "name = \"mine\"\naliases = [\"fp8_e4m3\"]\nexponent_bits = 4\nmantissa_bits = 3\n";
  Registry r = Registry::builtin();
  REQUIRE_THROWS_MATCHES(r.add_file(file), lpemu::SpecError,
                         Catch::Message(file.string() + ": format name 'fp8_e4m3' is already defined by "
                                                        "builtin:element/fp8_e4m3.toml"));
  REQUIRE_THROWS_MATCHES(r.add_file(dir / "none.toml"), lpemu::IoError,
                         Catch::Message((dir / "none.toml").string() + ": cannot open format file"));
  REQUIRE_THROWS_MATCHES(
      r.add_directory(dir / "nodir"), lpemu::IoError,
      Catch::Message((dir / "nodir").string() +
                     ": formats directory does not exist (from --formats-dir or LPEMU_FORMATS_PATH)"));
  std::ofstream(file) << "name = \"mine\"\nexponent_bits = 3\nmantissa_bits = 2\nbias = 5\n";
  r.add_directory(dir);
  CHECK(r.get("mine").max_finite == 3.5);  // top field 6: 2^(6-5) x 1.75
  CHECK(r.origin("mine") == file.string());
}

TEST_CASE("every shipped format file parses, cites a source and has its ml_dtypes aliases",
          "[format][unit]") {
  const auto& reg = Registry::builtin();
  CHECK(reg.names().size() == 21);
  for (const auto& name : reg.names()) {
    INFO(name);
    const Format& f = reg.get(name);
    CHECK(!f.source.empty());
    CHECK(reg.origin(name) == "builtin:element/" + name + ".toml");
  }
  for (const auto& [alias, name] :
       std::vector<std::pair<std::string, std::string>>{{"float8_e4m3fn", "fp8_e4m3"},
                                                        {"float8_e5m2", "fp8_e5m2"},
                                                        {"float8_e8m0fnu", "e8m0"},
                                                        {"float6_e2m3fn", "fp6_e2m3"},
                                                        {"float6_e3m2fn", "fp6_e3m2"},
                                                        {"float4_e2m1fn", "fp4_e2m1"},
                                                        {"float8_e4m3fnuz", "fp8_e4m3fnuz"},
                                                        {"float8_e5m2fnuz", "fp8_e5m2fnuz"},
                                                        {"float8_e4m3b11fnuz", "fp8_e4m3b11fnuz"},
                                                        {"float8_e3m4", "fp8_e3m4"},
                                                        {"float8_e4m3", "fp8_e4m3_ieee"}}) {
    INFO(alias);
    const Format* f = reg.find(alias);
    REQUIRE(f != nullptr);
    CHECK(f->name == name);
  }
}

}  // namespace

TEST_CASE("an integer format whose range is not finite in double is rejected", "[format][unit][regression]") {
  const std::string file =
      lpemu::test::source_path("tests/fuzz/corpus/format_toml/int32_fraction_bits_minus_1000.toml");
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE_THROWS_AS(parse_format_toml(text, "big.toml"), lpemu::SpecError);
  REQUIRE_THROWS_WITH(
      parse_format_toml(text, "big.toml"),
      "big.toml:5: format 'int32_huge': field 'fraction_bits' = -1000: expected -991..1022 (a range that is "
      "finite in double)");
  // The widest legal range keeps max_finite finite.
  const Format f =
      parse_format_toml("name = \"i32\"\nkind = \"int\"\nbits = 32\nfraction_bits = -991\n", "ok.toml");
  CHECK(std::isfinite(f.max_finite));
}

TEST_CASE("documents that break toml++'s internal parser checks are syntax errors",
          "[format][unit][regression]") {
  // The fuzzers' inputs: an array closed by '}' and a malformed table header. toml++ checks
  // these with assertions that are undefined behaviour (clang) or skipped (g++) in NDEBUG builds.
  for (const char* f : {"tests/fuzz/findings/format_toml/tomlpp_assert_array_brace.toml",
                        "tests/fuzz/findings/block_toml/tomlpp_assert_table_header_key.toml"}) {
    INFO(f);
    std::ifstream in(lpemu::test::source_path(f), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK_THAT(spec_error(text),
               Catch::Matchers::Contains("my.toml") && Catch::Matchers::Contains("not valid TOML"));
  }
}
