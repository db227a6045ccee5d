#include <cmath>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/datapath/datapath.hpp"
#include "lpemu/datapath/dot.hpp"
#include "lpemu/datapath/exact.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"

namespace {

using namespace lpemu::datapath;
using lpemu::format::Registry;

const std::vector<std::string> kRequired = {"ideal",           "fp32_sequential", "v100_fp16_fp32",
                                            "v100_fp16_fp16",  "a100_fp16_fp32",  "a100_fp16_fp16",
                                            "a100_bf16_fp32",  "a100_tf32_fp32",  "ada_fp16_fp32",
                                            "ada_fp16_fp16",   "ada_bf16_fp32",   "ada_tf32_fp32",
                                            "ada_e4m3_fp32",   "ada_e5m2_fp32",   "ada_e4m3_fp16",
                                            "ada_e5m2_fp16",   "h100_fp16_fp32",  "h100_fp16_fp16",
                                            "h100_bf16_fp32",  "h100_tf32_fp32",  "h100_e4m3_fp32",
                                            "h100_e5m2_fp32",  "h100_e4m3_fp16",  "h100_e5m2_fp16",
                                            "h200_fp16_fp32",  "h200_e4m3_fp32",  "b200_fp16_fp32",
                                            "b200_fp16_fp16",  "b200_bf16_fp32",  "b200_tf32_fp32",
                                            "b200_e4m3_fp32",  "b200_e5m2_fp32",  "h100_e4m3_fp32_promote128",
                                            "b200_mxfp8_fp32", "b200_mxfp6_fp32", "b200_mxfp4_fp32",
                                            "b200_nvfp4_fp32"};

TEST_CASE("every required preset loads and cites a source", "[datapath][unit]") {
  const auto& reg = DatapathRegistry::builtin();
  for (const auto& name : kRequired) {
    INFO(name);
    const Datapath* d = reg.find(name);
    REQUIRE(d != nullptr);
    CHECK(!d->source.empty());
    CHECK(reg.origin(name) == "builtin:datapath/" + name + ".toml");
  }
}

TEST_CASE("preset parameters follow docs/tensor-core-model.md, parameters per generation",
          "[datapath][unit]") {
  const auto& reg = DatapathRegistry::builtin();
  const Datapath& v = reg.get("v100_fp16_fp32");
  CHECK(v.fused_terms == 4);
  CHECK(v.fraction_bits == 23);
  CHECK(v.alignment == Alignment::truncate);
  CHECK(v.accumulator_rounding.mode == lpemu::format::RoundingMode::toward_zero);
  const Datapath& h = reg.get("h100_e4m3_fp32");
  CHECK(h.fused_terms == 32);
  CHECK(h.fraction_bits == 13);
  CHECK(h.accumulator_fraction_bits == 13);
  CHECK(h.exponent_floor == -133);
  const Datapath& p = reg.get("h100_e4m3_fp32_promote128");
  CHECK(p.promote_every == 128);
  CHECK(p.output().name == "fp32");
  CHECK(reg.get("a100_fp16_fp16").addend_emin == -126);
}

TEST_CASE("unknown datapath names suggest the closest presets", "[datapath][unit]") {
  REQUIRE_THROWS_AS(DatapathRegistry::builtin().get("h100_e4m3_fp33"), lpemu::UnknownNameError);
  REQUIRE_THROWS_WITH(
      DatapathRegistry::builtin().get("h100_e4m3_fp33"),
      Catch::Contains("unknown datapath 'h100_e4m3_fp33'; closest known names: h100_e4m3_fp32"));
}

TEST_CASE("datapath TOML errors name file, line, field and expectation", "[datapath][unit]") {
  const auto& f = Registry::builtin();
  const std::string base =
      "name = \"x\"\nsource = \"s\"\n[inputs]\na = \"fp16\"\nb = \"fp16\"\n[accumulator]\nformat = "
      "\"fp32\"\n";
  REQUIRE_NOTHROW(parse_datapath_toml(base, "my.toml", f));
  REQUIRE_THROWS_WITH(parse_datapath_toml(base + "[alignment]\nmode = \"truncate\"\n", "my.toml", f),
                      "my.toml:9: field 'alignment.fraction_bits' = (missing): expected fraction_bits (F) or "
                      "extra_bits when alignment.mode drops bits");
  REQUIRE_THROWS_WITH(
      parse_datapath_toml(base + "[alignment]\nmode = \"chop\"\n", "my.toml", f),
      "my.toml:9: field 'alignment.mode' = \"chop\": expected one of \"exact\", \"truncate\", "
      "\"nearest_even\", \"round_down\"; closest known names: exact, truncate, round_down");
  REQUIRE_THROWS_WITH(parse_datapath_toml(base + "colour = 1\n", "my.toml", f),
                      Catch::StartsWith("my.toml:8: field 'accumulator.colour' = 1: expected a known key"));
  const std::string bad_fmt = "name = \"x\"\nsource = \"s\"\n[inputs]\na = \"fp8_e4m4\"\nb = \"fp16\"\n";
  REQUIRE_THROWS_WITH(
      parse_datapath_toml(bad_fmt, "my.toml", f),
      Catch::StartsWith("my.toml:4: field 'inputs.a' = \"fp8_e4m4\": expected a known element "
                        "format (see `lpemu formats list`); closest known names: "));
  REQUIRE_THROWS_WITH(
      parse_datapath_toml(
          base + "[block]\nfused_terms = 65\n[alignment]\nmode = \"truncate\"\nfraction_bits = 24\n",
          "my.toml", f),
      Catch::StartsWith("my.toml:9: field 'block.fused_terms' = 65: expected 1..64"));
}

TEST_CASE("extra_bits sets F relative to the accumulator's fraction", "[datapath][unit]") {
  const std::string text =
      "name = \"x\"\nsource = \"s\"\n[inputs]\na = \"fp16\"\nb = \"fp16\"\n[accumulator]\nformat = \"fp32\"\n"
      "[alignment]\nmode = \"truncate\"\nextra_bits = 2\n";
  CHECK(parse_datapath_toml(text, "x.toml", Registry::builtin()).fraction_bits == 25);
}

TEST_CASE("dot rejects mismatched sizes and codes wider than their format", "[datapath][unit]") {
  const Datapath& dp = DatapathRegistry::builtin().get("h100_e4m3_fp32");
  const std::vector<std::uint64_t> a{0x38, 0x38};
  const std::vector<std::uint64_t> b{0x38};
  REQUIRE_THROWS_AS(dot(dp, a, b, 0), lpemu::ShapeError);
  REQUIRE_THROWS_AS(dot(dp, a, std::vector<std::uint64_t>{0x38, 0x138}, 0), lpemu::ShapeError);
  REQUIRE_THROWS_WITH(
      dot(dp, a, std::vector<std::uint64_t>{0x38, 0x138}, 0),
      "b[1]: code 0x138 is wider than format 'fp8_e4m3' (8 bits); expected a code in 0x00..0xff");
}

TEST_CASE("special values follow the published models", "[datapath][unit]") {
  const Datapath& dp = DatapathRegistry::builtin().get("h100_fp16_fp32");
  // fp16 +Inf = 0x7c00, -Inf = 0xfc00, NaN = 0x7e00, 1 = 0x3c00.
  const std::vector<std::uint64_t> one{0x3c00};
  CHECK(dot(dp, std::vector<std::uint64_t>{0x7c00}, one, 0) == 0x7f800000);
  CHECK(dot(dp, std::vector<std::uint64_t>{0xfc00}, one, 0) == 0xff800000);
  CHECK(std::isnan(std::bit_cast<float>(static_cast<std::uint32_t>(
      dot(dp, std::vector<std::uint64_t>{0x7c00, 0xfc00}, std::vector<std::uint64_t>{0x3c00, 0x3c00}, 0)))));
  CHECK(std::isnan(std::bit_cast<float>(static_cast<std::uint32_t>(
      dot(dp, std::vector<std::uint64_t>{0x7c00}, std::vector<std::uint64_t>{0}, 0)))));
  CHECK(std::isnan(std::bit_cast<float>(static_cast<std::uint32_t>(dot(dp, one, one, 0x7fc00000)))));
}

TEST_CASE("overflow gives Inf even under RZ (docs/tensor-core-model.md, step 7)", "[datapath][unit]") {
  const Datapath& dp = DatapathRegistry::builtin().get("h100_tf32_fp32");
  // tf32 max finite (0x3fbff, about 2^128) squared overflows fp32 although the rounding is RZ.
  CHECK(dot(dp, std::vector<std::uint64_t>{0x3fbff}, std::vector<std::uint64_t>{0x3fbff}, 0) == 0x7f800000);
  CHECK(dot(dp, std::vector<std::uint64_t>{0x3fbff}, std::vector<std::uint64_t>{0x7fbff}, 0) == 0xff800000);
}

TEST_CASE("exact_dot returns the exact sum", "[datapath][unit]") {
  const auto& f = Registry::builtin();
  // 1 + 2^-24·2^-24 (fp16 0x3c00, 0x0001) with c = 2^-100 in fp32 (0x0d800000): exact.
  const ExactValue v =
      exact_dot(f.get("fp16"), f.get("fp16"), f.get("fp32"), std::vector<std::uint64_t>{0x3c00, 0x0001},
                std::vector<std::uint64_t>{0x3c00, 0x0001}, 0x0d800000);
  CHECK(v.to_double() == 1.0 + std::ldexp(1.0, -48) + std::ldexp(1.0, -100));
  CHECK(v.to_string(5) == "1.0000e+00");
}

}  // namespace

namespace {

TEST_CASE("an integer accumulator sums int8 products exactly and saturates", "[datapath][unit]") {
  Datapath dp = DatapathRegistry::builtin().get("ideal");
  dp.a = dp.b = Registry::builtin().get("int8");
  dp.accumulator = lpemu::format::make_int("int32", 32);
  dp.accumulator_fraction_bits = 0;
  // 127·127 + (−128)·127 = −127 → two's complement 0xffffff81.
  CHECK(dot(dp, std::vector<std::uint64_t>{0x7f, 0x80}, std::vector<std::uint64_t>{0x7f, 0x7f}, 0) ==
        0xffffff81);
  // c = 2^31 − 1 plus 1 saturates at 2^31 − 1.
  CHECK(dot(dp, std::vector<std::uint64_t>{0x01}, std::vector<std::uint64_t>{0x01}, 0x7fffffff) ==
        0x7fffffff);
  dp.accumulator = lpemu::format::make_int("int16", 16);
  CHECK(dot(dp, std::vector<std::uint64_t>{0x80, 0x80, 0x80}, std::vector<std::uint64_t>{0x80, 0x80, 0x80},
            0) == 0x7fff);  // 3·2^14 = 49152 saturates at 32767
}

}  // namespace

TEST_CASE("the datapath's stochastic rounding is the format layer's on the same draws", "[datapath][unit]") {
  // ideal with fp32 inputs and K = 1: the exact product (at most 48 bits) is rounded once, to fp32,
  // with the draw of event 0 of dot index i: sr_random_bits(seed, i << 24). The format layer's
  // encode of the same value with the same seed and index must give the same code.
  Datapath dp = DatapathRegistry::builtin().get("ideal");
  const auto& fp32 = Registry::builtin().get("fp32");
  for (const int bits : {1, 3, 8, 32}) {
    dp.accumulator_rounding.mode = lpemu::format::RoundingMode::stochastic;
    dp.accumulator_rounding.sr_bits = bits;
    dp.accumulator_rounding.seed = 1234;
    lpemu::format::ConvertOptions o;
    o.rounding = lpemu::format::RoundingMode::stochastic;
    o.sr_bits = bits;
    o.seed = 1234;
    std::size_t up = 0, down = 0;
    for (std::uint64_t i = 0; i < 400; ++i) {
      const float x = 1.0F + static_cast<float>(i) * 0x1.0p-12F,
                  y = 3.0F + static_cast<float>(i % 7) * 0x1.0p-20F;
      const std::vector<std::uint64_t> a{lpemu::format::encode(fp32, x)}, b{lpemu::format::encode(fp32, y)};
      const double exact = static_cast<double>(x) * static_cast<double>(y);
      const std::uint64_t want = lpemu::format::encode(fp32, exact, o, i << 24);
      INFO("sr_bits " << bits << ", i " << i);
      REQUIRE(dot(dp, a, b, 0, {}, i) == want);
      const double got = lpemu::format::decode(fp32, want);
      up += got > exact ? 1 : 0;
      down += got < exact ? 1 : 0;
    }
    CHECK(up > 0);  // both directions occur: the draws matter
    CHECK(down > 0);
  }
}
