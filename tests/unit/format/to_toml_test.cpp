// Element formats write themselves: for every built-in format, parse_format_toml(to_toml(f)) == f
// and to_toml is a fixed point of read-then-write.
#include <string>

#include <catch2/catch.hpp>

#include "lpemu/format/format.hpp"
#include "lpemu/format/registry.hpp"

using namespace lpemu;

TEST_CASE("every built-in element format round-trips through to_toml", "[format][records][unit]") {
  const format::Registry& reg = format::Registry::builtin();
  REQUIRE(reg.names().size() >= 20);
  for (const auto& name : reg.names()) {
    INFO(name);
    const format::Format& f = reg.get(name);
    const std::string text = format::to_toml(f);
    const format::Format back = format::parse_format_toml(text, reg.origin(name));
    CHECK(back == f);
    CHECK(format::to_toml(back) == text);
  }
}

TEST_CASE("to_toml of element formats writes non-default fields and escapes strings",
          "[format][records][unit]") {
  format::Format f = format::make_float("odd", 4, 3, 9, format::Specials::fnuz, false);
  f.source = "a \"quoted\" source\\with\tescapes";
  f.aliases = {"odd_alias"};
  const format::Format back = format::parse_format_toml(format::to_toml(f), "odd.toml");
  CHECK(back == f);
  const format::Format u = format::make_float("e8m0x", 8, 0, 127, format::Specials::fn, false, false);
  CHECK(format::parse_format_toml(format::to_toml(u), "u.toml") == u);
  const format::Format i = format::make_int("q4_4", 8, true, 4, true);
  const std::string text = format::to_toml(i);
  CHECK(text.find("fraction_bits = 4") != std::string::npos);
  CHECK(format::parse_format_toml(text, "i.toml") == i);
}
