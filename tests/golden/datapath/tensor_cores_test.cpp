// Published tensor-core behaviour (tests/golden/vectors/tensor-cores/*.toml), each file citing its
// source; expected codes were written by hand from the cited studies.
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include "io/toml.hpp"  // toml++ as lpemu builds it

#include "lpemu/datapath/dot.hpp"
#include "lpemu/format/codec.hpp"
#include "support/test_support.hpp"

namespace {

using namespace lpemu::datapath;

std::uint64_t hex(const std::string& s) { return std::stoull(s, nullptr, 16); }

std::vector<std::uint64_t> hex_list(const toml::array& arr) {
  std::vector<std::uint64_t> out;
  for (const auto& e : arr) out.push_back(hex(*e.value<std::string>()));
  return out;
}

std::vector<std::filesystem::path> vector_files() {
  std::vector<std::filesystem::path> out;
  for (const auto& e :
       std::filesystem::directory_iterator(lpemu::test::source_path("tests/golden/vectors/tensor-cores"))) {
    if (e.path().extension() == ".toml") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST_CASE("tensor-core vector files cite their source and hold cases", "[datapath][golden]") {
  const auto files = vector_files();
  REQUIRE(files.size() >= 5);
  for (const auto& f : files) {
    INFO(f.string());
    const toml::table t = toml::parse_file(f.string());
    REQUIRE(t["source"].value<std::string>().has_value());
    CHECK(!t["source"].value<std::string>()->empty());
    REQUIRE(t["case"].as_array() != nullptr);
    CHECK(!t["case"].as_array()->empty());
  }
}

TEST_CASE("presets reproduce the published tensor-core results", "[datapath][golden]") {
  const auto& reg = DatapathRegistry::builtin();
  int checked = 0;
  for (const auto& f : vector_files()) {
    const toml::table t = toml::parse_file(f.string());
    for (const auto& node : *t["case"].as_array()) {
      const toml::table& c = *node.as_table();
      const Datapath& dp = reg.get(*c["datapath"].value<std::string>());
      const auto a = hex_list(*c["a"].as_array());
      const auto b = hex_list(*c["b"].as_array());
      const std::uint64_t cc = hex(*c["c"].value<std::string>());
      const std::uint64_t want = hex(*c["d"].value<std::string>());
      const std::uint64_t got = dot(dp, a, b, cc);
      INFO(f.filename().string() << ": " << *c["name"].value<std::string>() << " [" << dp.name
                                 << "] expected " << lpemu::format::hex_code(dp.output(), want) << " ("
                                 << lpemu::format::decode(dp.output(), want) << "), got "
                                 << lpemu::format::hex_code(dp.output(), got) << " ("
                                 << lpemu::format::decode(dp.output(), got) << ")");
      CHECK(got == want);
      ++checked;
    }
  }
  CHECK(checked >= 15);
}

}  // namespace
