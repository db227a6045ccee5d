// The one TOML field reader of every spec loader (src/io/toml_util.hpp): each accessor's error
// names file:line, the field (with its table's prefix), the value and what was expected.
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "io/toml.hpp"

#include "io/toml_util.hpp"
#include "lpemu/error.hpp"

namespace {

using lpemu::io::detail::TableReader;

enum class Colour { red, green, blue };
constexpr lpemu::detail::EnumName<Colour> kColourNames[] = {
    {"red", Colour::red}, {"green", Colour::green}, {"blue", Colour::blue}};

// The message `read` throws on a reader of `text` (file "t.toml"), or "(no error)".
template <class F>
std::string error_of(const std::string& text, F read) {
  const toml::table t = lpemu::io::detail::parse(text, "t.toml");
  const TableReader r(t, "t.toml");
  try {
    read(r);
  } catch (const lpemu::SpecError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("TableReader reads present, absent and defaulted fields", "[io][toml][unit]") {
  const toml::table t = lpemu::io::detail::parse(
      "name = \"x\"\nn = 3\nf = 2.5\nok = true\nc = \"blue\"\nnames = [\"a\", \"b\"]\nints = [1, 2]\n"
      "[sub]\nk = 7\n[[item]]\nv = 1\n[[item]]\nv = 2\n",
      "t.toml");
  const TableReader r(t, "t.toml");
  CHECK(r.required_str("name") == "x");
  CHECK(r.str("missing", "d") == "d");
  CHECK_FALSE(r.opt_str("missing"));
  CHECK(r.required_integer("n", 0, 10) == 3);
  CHECK(r.integer("missing", 5, 0, 10) == 5);
  CHECK(r.required_number("f", 0, 10, "a number") == 2.5);
  CHECK(r.number("n", 0, 0, 10, "a number") == 3.0);  // an integer is a number
  CHECK(r.boolean("ok", false));
  CHECK(r.choice("c", Colour::red, kColourNames) == Colour::blue);
  CHECK(r.choice("missing", Colour::green, kColourNames) == Colour::green);
  CHECK(r.strings("names") == std::vector<std::string>{"a", "b"});
  CHECK(r.integers("ints", 0, 9) == std::vector<int>{1, 2});
  CHECK(r.strings("missing").empty());
  CHECK(r.sub("sub").required_integer("k", 0, 9) == 7);
  CHECK(r.sub("sub").field("k") == "sub.k");
  CHECK(r.sub("absent").table() == nullptr);
  CHECK(r.sub("absent").integer("k", 4, 0, 9) == 4);
  const auto items = r.tables("item");
  REQUIRE(items.size() == 2);
  CHECK(items[1].required_integer("v", 0, 9) == 2);
  CHECK_NOTHROW(r.only({"name", "n", "f", "ok", "c", "names", "ints", "sub", "item"}));
}

TEST_CASE("TableReader errors use the one wording", "[io][toml][unit]") {
  CHECK(error_of("value = 1\nnmae = 2\n",
                 [](const TableReader& r) {
                   r.only({"value", "name", "other"});
                 }) ==
        "t.toml:2: field 'nmae' = 2: expected a known key (name, other, value); closest known names: name, "
        "other, value");
  CHECK(error_of("a = 1\n", [](const TableReader& r) { r.required_str("name"); }) ==
        "t.toml:1: field 'name' = (missing): expected a string");
  CHECK(error_of("name = 3\n", [](const TableReader& r) { r.str("name"); }) ==
        "t.toml:1: field 'name' = 3: expected a string");
  CHECK(error_of("\nn = 11\n", [](const TableReader& r) { r.integer("n", 0, 0, 10); }) ==
        "t.toml:2: field 'n' = 11: expected an integer in 0..10");
  CHECK(error_of("n = 2.5\n", [](const TableReader& r) { r.required_integer("n", 1, 9, "a count"); }) ==
        "t.toml:1: field 'n' = 2.5: expected a count");
  CHECK(error_of("x = -1\n", [](const TableReader& r) { r.number("x", 0, 0, 1, "a share in 0..1"); }) ==
        "t.toml:1: field 'x' = -1: expected a share in 0..1");
  CHECK(error_of("b = \"yes\"\n", [](const TableReader& r) { r.boolean("b", false); }) ==
        "t.toml:1: field 'b' = \"yes\": expected true or false");
  CHECK(error_of("l = [\"a\",\n 3]\n", [](const TableReader& r) { r.strings("l"); }) ==
        "t.toml:2: field 'l' = 3: expected an array of strings");
  CHECK(error_of("l = [1, 99]\n", [](const TableReader& r) { r.integers("l", 0, 9); }) ==
        "t.toml:1: field 'l' = 99: expected an array of integers in 0..9");
  CHECK(error_of("s = 1\n", [](const TableReader& r) { r.sub("s"); }) ==
        "t.toml:1: field 's' = 1: expected a table");
  CHECK(error_of("a = 1\n", [](const TableReader& r) { r.required_sub("memory"); }) ==
        "t.toml:1: field 'memory' = (missing): expected a table");
  CHECK(error_of("item = 1\n", [](const TableReader& r) { r.tables("item"); }) ==
        "t.toml:1: field 'item' = 1: expected an array of tables ([[item]])");
}

TEST_CASE("TableReader choices list the names and the closest ones", "[io][toml][unit]") {
  CHECK(error_of("c = \"gren\"\n", [](const TableReader& r) { r.choice("c", Colour::red, kColourNames); }) ==
        "t.toml:1: field 'c' = \"gren\": expected one of \"red\", \"green\", \"blue\"; closest known names: "
        "green, red, blue");
}

TEST_CASE("TableReader names nested fields by their table", "[io][toml][unit]") {
  CHECK(error_of("a = 1\n[memory]\nbw = 0\n", [](const TableReader& r) {
          r.sub("memory").required_number("bw", 1, 10, "a bandwidth");
        }) == "t.toml:3: field 'memory.bw' = 0: expected a bandwidth");
  CHECK(error_of("[roles.weights]\nrounding = \"up\"\n",
                 [](const TableReader& r) { r.sub("roles").sub("weights").only({"format"}); }) ==
        "t.toml:2: field 'roles.weights.rounding' = \"up\": expected a known key (format); closest known "
        "names: format");
  // Missing fields of an absent table point at the enclosing one.
  CHECK(error_of("a = 1\n", [](const TableReader& r) { r.sub("memory").required_str("source"); }) ==
        "t.toml:1: field 'memory.source' = (missing): expected a string");
  CHECK(error_of("[[item]]\nv = 1\n[[item]]\nv = \"x\"\n", [](const TableReader& r) {
          for (const auto& i : r.tables("item")) i.required_integer("v", 0, 9);
        }) == "t.toml:4: field 'item.v' = \"x\": expected an integer in 0..9");
}

TEST_CASE("TomlWriter writes what TableReader reads back exactly", "[io][records][unit]") {
  using lpemu::io::detail::TomlWriter;
  const std::vector<double> reals = {0.1, 0.1 + 0.2, -0.0,  0.0,     1e300, 5e-324,
                                     448, 9.3e18,    -1e22, 1.0 / 3, 65504, 2.5e-7};
  TomlWriter w;
  for (std::size_t i = 0; i < reals.size(); ++i) w.number("x" + std::to_string(i), reals[i]);
  const std::string odd = "quote \" backslash \\ tab \t newline \n bell \a unicode \xc2\xa7";
  w.str("s", odd).strings("list", {"a", "b\"c"}).integers("ints", std::vector<long long>{-1, 0, 7});
  w.table("t.u")
      .boolean("flag", true)
      .raw("inline", TomlWriter::inline_table({{"k", "1"}, {"odd key", "2"}}));
  const toml::table t = lpemu::io::detail::parse(w.text(), "w.toml");
  const TableReader r(t, "w.toml");
  for (std::size_t i = 0; i < reals.size(); ++i) {
    INFO(w.text());
    const double back = r.required_number("x" + std::to_string(i), -1e308 * 10, 1e308 * 10, "a number");
    CHECK(std::bit_cast<std::uint64_t>(back) == std::bit_cast<std::uint64_t>(reals[i]));
  }
  CHECK(r.str("s") == odd);
  CHECK(r.strings("list") == std::vector<std::string>{"a", "b\"c"});
  CHECK(r.integers<long long>("ints", -10, 10) == std::vector<long long>{-1, 0, 7});
  CHECK(r.sub("t").sub("u").boolean("flag", false));
  CHECK(t["t"]["u"]["inline"]["odd key"].value<int>() == 2);
}

TEST_CASE("a UTF-8 byte-order mark at the start of a TOML file is skipped, elsewhere refused",
          "[io][toml][unit][regression]") {
  const toml::table t = lpemu::io::detail::parse("\xEF\xBB\xBFname = \"x\"\nbits = 8\n", "bom.toml");
  const TableReader r(t, "bom.toml");
  CHECK(r.required_str("name") == "x");
  CHECK(r.required_integer("bits", 1, 64, "an integer in 1..64") == 8);
  // Only the leading mark is dropped: one after the first byte is a character outside a string.
  CHECK_THROWS_AS(lpemu::io::detail::parse("n\xEF\xBB\xBF = 1\n", "bom.toml"), lpemu::SpecError);
  CHECK_THROWS_AS(lpemu::io::detail::parse("\xEF\xBB\xBF\xEF\xBB\xBFn = 1\n", "bom.toml"), lpemu::SpecError);
}
