// MAC model: each component against hand arithmetic of the documented formulas.
#include <catch2/catch.hpp>

#include "lpemu/cost/catalog.hpp"
#include "lpemu/cost/mac_model.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/error.hpp"

namespace {

using lpemu::cost::mac_cost;
using lpemu::cost::resolve_format;

const lpemu::format::Registry& fmts() { return lpemu::format::Registry::builtin(); }

lpemu::cost::Catalog& catalog() {
  static lpemu::cost::Catalog c(fmts());
  return c;
}

TEST_CASE("bf16 x bf16 on generic_bf16, component by component", "[cost]") {
  const auto bf16 = resolve_format("bf16", fmts());
  const auto m = mac_cost(bf16, bf16, catalog().datapath("generic_bf16"));
  // sa = sb = 8 (7 mantissa bits + hidden), e = 8, n = 4, W = 27, fp32 accumulator (24-bit significand).
  CHECK(m.part("multiplier") == Approx(64));                     // 8 x 8
  CHECK(m.part("exponent") == Approx(9 + 10 * 7.0 / 4));         // (8+1) + (8+2)(2n-1)/n = 26.5
  CHECK(m.part("alignment") == Approx(0.5 * 27 * 5));            // W ceil(log2 W) muxes = 67.5
  CHECK(m.part("adder_tree") == Approx(0.75 * (27 + 2)));        // 21.75
  CHECK(m.part("accumulator") == Approx((27 + 67.5 + 32) / 4));  // A = 27, shifter, 32 flops
  CHECK(m.part("normalisation") == Approx((67.5 + 13.5 + 24) / 4));
  CHECK(m.part("block_scale") == 0);
  CHECK(m.total_fa == Approx(237.625));
  CHECK(m.area_um2_45nm() == Approx(237.625 * 4.3));
  CHECK(m.energy_pj_45nm() == Approx(237.625 * 3.1e-3));
}

TEST_CASE("multiplier grows with the product of significand widths", "[cost]") {
  const auto& dp = catalog().datapath("generic_bf16");
  auto mul = [&](const char* f) {
    const auto x = resolve_format(f, fmts());
    return mac_cost(x, x, dp).part("multiplier");
  };
  CHECK(mul("fp32") == 24 * 24);
  CHECK(mul("fp16") == 11 * 11);
  CHECK(mul("bf16") == 8 * 8);
  CHECK(mul("fp8_e4m3") == 4 * 4);
  CHECK(mul("fp8_e5m2") == 3 * 3);
  CHECK(mul("fp6_e2m3") == 4 * 4);
  CHECK(mul("fp4_e2m1") == 2 * 2);
  CHECK(mul("fp8_e4m3") / mul("bf16") == Approx(0.25));
}

TEST_CASE("fp8, fp6 and block-scaled MACs by hand", "[cost]") {
  const auto& dp = catalog().datapath("generic_bf16");
  const auto e4m3 = resolve_format("fp8_e4m3", fmts());
  const auto e3m2 = resolve_format("fp6_e3m2", fmts());
  // fp8: 16 + (5 + 6 x 1.75) + 67.5 + 21.75 + 31.625 + 26.25
  CHECK(mac_cost(e4m3, e4m3, dp).total_fa == Approx(178.625));
  // fp6 e3m2: 9 + (4 + 5 x 1.75) + 67.5 + 21.75 + 31.625 + 26.25
  CHECK(mac_cost(e3m2, e3m2, dp).total_fa == Approx(168.875));
  // MX: two E8M0 scales add in an (8+1)-bit adder once per 32-element block.
  const auto mxfp4 = resolve_format("mxfp4", fmts());
  CHECK(mac_cost(mxfp4, mxfp4, dp).part("block_scale") == Approx(9.0 / 32));
  // NVFP4: E4M3 scales: 5-bit exponent add, 4x4 scale product, 24 x 7 to scale the block sum; per 16.
  const auto nv = resolve_format("nvfp4", fmts());
  CHECK(mac_cost(nv, nv, dp).part("block_scale") == Approx((5 + 16 + 24 * 7) / 16.0));
}

TEST_CASE("integer MAC on an int32 accumulator has no exponent, alignment or normalisation", "[cost]") {
  const auto i8 = resolve_format("int8", fmts());
  const auto m = mac_cost(i8, i8, catalog().datapath("generic_int8"));
  CHECK(m.part("multiplier") == 64);
  CHECK(m.part("exponent") == 0);
  CHECK(m.part("alignment") == 0);
  CHECK(m.part("adder_tree") == Approx(0.75 * (16 + 2)));
  CHECK(m.part("accumulator") == Approx((32 + 32) / 4.0));
  CHECK(m.part("normalisation") == 0);
  CHECK(m.total_fa == Approx(93.5));
}

TEST_CASE("a narrower alignment window shrinks the shifter and the tree", "[cost]") {
  const auto e4m3 = resolve_format("fp8_e4m3", fmts());
  // h100_e4m3_fp32: F = 13 truncated -> W = 14; n = 32.
  const auto m = mac_cost(e4m3, e4m3, catalog().datapath("h100_e4m3_fp32"));
  CHECK(m.part("alignment") == Approx(0.5 * 14 * 4));
  CHECK(m.part("adder_tree") == Approx(31.0 / 32 * (14 + 5)));
}

TEST_CASE("iso-area: MACs of X in the area of N MACs of Y", "[cost]") {
  const auto& dp = catalog().datapath("generic_bf16");
  const auto bf16 = resolve_format("bf16", fmts());
  const auto e4m3 = resolve_format("fp8_e4m3", fmts());
  const auto mb = mac_cost(bf16, bf16, dp);
  const auto m8 = mac_cost(e4m3, e4m3, dp);
  CHECK(lpemu::cost::iso_area_count(m8, mb, 1000) == 1330);  // floor(1000 x 237.625 / 178.625) = 1330
  CHECK(lpemu::cost::iso_area_count(mb, mb, 1000) == 1000);
}

TEST_CASE("bits per element include the amortised block scale", "[cost]") {
  CHECK(resolve_format("mxfp8_e4m3", fmts()).bits_per_element() == 8.25);  // 8 + 8/32
  CHECK(resolve_format("mxfp6_e2m3", fmts()).bits_per_element() == 6.25);
  CHECK(resolve_format("mxfp4", fmts()).bits_per_element() == 4.25);
  CHECK(resolve_format("nvfp4", fmts()).bits_per_element() == 4.5);  // 4 + 8/16
  CHECK(resolve_format("nvfp4", fmts()).tensor_scale_bytes == 4);    // one FP32
  CHECK(resolve_format("bf16", fmts()).bits_per_element() == 16);
  REQUIRE_THROWS_AS(resolve_format("mxfp5", fmts()), lpemu::UnknownNameError);
}

TEST_CASE("every datapath record the emulator knows can be priced", "[cost]") {
  const auto& reg = lpemu::datapath::DatapathRegistry::builtin();
  for (const auto& name : reg.names()) {
    INFO(name);
    const auto& d = reg.get(name);
    const auto& m = catalog().datapath(name);
    const auto c = mac_cost(m);
    CHECK(c.total_fa > 0);
    CHECK(m.a.name == d.a.name);
    CHECK(m.b.name == d.b.name);
    CHECK(m.fused_terms == (d.fused_terms == 0 ? 64 : d.fused_terms));
    if (d.alignment != lpemu::datapath::Alignment::exact) {
      CHECK(m.alignment_bits == d.fraction_bits + 1 + (d.sticky ? 1 : 0));
    }
    CHECK(m.accumulator == d.accumulator.name);
  }
  // Block scales come from the record: E8M0 per 32 on MX presets, E4M3 per 16 on NVFP4.
  CHECK(catalog().datapath("b200_mxfp4_fp32").a.scale_name == "e8m0");
  CHECK(catalog().datapath("b200_mxfp4_fp32").a.block_size == 32);
  CHECK(catalog().datapath("b200_nvfp4_fp32").a.scale_name == "fp8_e4m3");
  CHECK(catalog().datapath("b200_nvfp4_fp32").a.block_size == 16);
  CHECK(mac_cost(catalog().datapath("b200_nvfp4_fp32")).part("block_scale") > 0);
  CHECK(catalog().datapath("h100_e4m3_fp32_promote128").promote_every == 128);
}

TEST_CASE("MAC area follows fused terms, alignment bits, accumulator and promotion of the record", "[cost]") {
  const auto& base = lpemu::datapath::DatapathRegistry::builtin().get("h100_e4m3_fp32");
  const double a0 = mac_cost(lpemu::cost::mac_datapath(base)).total_fa;
  auto changed = [&](auto edit) {
    auto d = base;
    edit(d);
    return mac_cost(lpemu::cost::mac_datapath(d)).total_fa;
  };
  // Fewer fused terms: the per-step accumulator and normaliser are shared by fewer lanes.
  CHECK(changed([](auto& d) { d.fused_terms = 4; }) > a0);
  // A wider alignment window: a longer shifter and a wider tree.
  CHECK(changed([](auto& d) { d.fraction_bits = 24; }) > a0);
  // A narrower accumulator (fp16 instead of fp32 with 13 fraction bits kept).
  CHECK(changed([](auto& d) {
          d.accumulator = lpemu::format::Registry::builtin().get("fp16");
          d.accumulator_fraction_bits = 10;
        }) < a0);
  // Promotion into fp32 every 128 products adds a (shared) wider adder.
  CHECK(changed([](auto& d) {
          d.promote_every = 128;
          d.promotion_format = lpemu::format::Registry::builtin().get("fp32");
        }) > a0);
}

}  // namespace

namespace {

TEST_CASE("absolute constants reproduce Horowitz ISSCC 2014 integer figures they were fitted to", "[cost]") {
  const auto i8 = resolve_format("int8", fmts());
  const double mul_fa = mac_cost(i8, i8, catalog().datapath("generic_int8")).part("multiplier");  // 64 FA
  // Horowitz (45 nm): 8-bit multiply 0.2 pJ and 282 um^2.
  CHECK(mul_fa * lpemu::cost::kFaEnergyFj45nm / 1000 ==
        Approx(lpemu::cost::kHorowitzInt8MulPj).epsilon(0.01));
  CHECK(mul_fa * lpemu::cost::kFaAreaUm2_45nm == Approx(282).epsilon(0.03));
  // 32-bit add: 0.1 pJ and 137 um^2 for 32 FA.
  CHECK(32 * lpemu::cost::kFaEnergyFj45nm / 1000 == Approx(0.1).epsilon(0.01));
  CHECK(32 * lpemu::cost::kFaAreaUm2_45nm == Approx(137).epsilon(0.01));
}

}  // namespace
