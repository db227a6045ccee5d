#include <cmath>

#include <catch2/catch.hpp>

#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"

namespace {

using namespace lpemu::format;

TEST_CASE("built-in formats load and have the published limits", "[format][unit]") {
  const auto& reg = Registry::builtin();
  CHECK(reg.get("fp8_e4m3").max_finite == 448.0);
  CHECK(reg.get("float8_e4m3fn").name == "fp8_e4m3");
  CHECK(reg.get("fp8_e5m2").max_finite == 57344.0);
  CHECK(reg.get("fp6_e2m3").max_finite == 7.5);
  CHECK(reg.get("fp6_e3m2").max_finite == 28.0);
  CHECK(reg.get("fp4_e2m1").max_finite == 6.0);
  CHECK(reg.get("e8m0").max_finite == std::ldexp(1.0, 127));
  CHECK(reg.get("e8m0").min_normal == std::ldexp(1.0, -127));
  CHECK(reg.get("fp8_e4m3fnuz").max_finite == 240.0);
  CHECK(reg.get("fp8_e4m3b11fnuz").max_finite == 30.0);
  CHECK(reg.get("fp8_e3m4").max_finite == 15.5);
  CHECK(reg.get("fp16").max_finite == 65504.0);
}

TEST_CASE("encode rounds to nearest even and applies the overflow rule", "[format][unit]") {
  const auto& f = Registry::builtin().get("fp8_e4m3");
  CHECK(encode(f, 448.0) == 0x7e);
  CHECK(encode(f, 464.0) == 0x7e);  // tie to even stays at max
  CHECK(encode(f, 465.0) == 0x7f);  // native: NaN
  ConvertOptions sat;
  sat.overflow = Overflow::saturate;
  CHECK(encode(f, 1e9, sat) == 0x7e);
  CHECK(encode(f, -1e9, sat) == 0xfe);
  CHECK(std::isnan(decode(f, 0x7f)));
}

}  // namespace
