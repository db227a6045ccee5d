// Golden vectors for block formats: tests/golden/vectors/mx/*.toml, each citing its source.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include "io/toml.hpp"  // toml++ as lpemu builds it

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/pack.hpp"
#include "lpemu/block/quantize.hpp"
#include "support/test_support.hpp"

namespace {

namespace lb = lpemu::block;

std::vector<double> reals(const toml::table& t, const char* key) {
  std::vector<double> out;
  const toml::array* a = t[key].as_array();
  REQUIRE(a != nullptr);
  for (const auto& n : *a)
    out.push_back(n.is_integer() ? static_cast<double>(*n.value<std::int64_t>()) : *n.value<double>());
  return out;
}

std::vector<std::uint64_t> ints(const toml::table& t, const char* key) {
  std::vector<std::uint64_t> out;
  const toml::array* a = t[key].as_array();
  REQUIRE(a != nullptr);
  for (const auto& n : *a) out.push_back(static_cast<std::uint64_t>(*n.value<std::int64_t>()));
  return out;
}

TEST_CASE("MX golden vectors: quantize, encode, scales and packed bytes", "[block][golden]") {
  const std::filesystem::path dir = lpemu::test::source_path("tests/golden/vectors/mx");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".toml") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 5);
  for (const auto& file : files) {
    INFO(file.filename().string());
    const toml::table t = toml::parse_file(file.string());
    REQUIRE(t["source"].is_string());
    REQUIRE_FALSE(t["source"].value<std::string>()->empty());
    const auto& fmt = lb::BlockRegistry::builtin().get(*t["format"].value<std::string>());
    std::vector<std::size_t> shape;
    for (auto v : ints(t, "shape")) shape.push_back(static_cast<std::size_t>(v));
    std::vector<float> in;
    for (double v : reals(t, "input")) in.push_back(static_cast<float>(v));
    const auto expected = reals(t, "output");
    REQUIRE(expected.size() == in.size());
    std::vector<float> out(in.size());
    lb::quantize(fmt, in, out, shape);
    for (std::size_t i = 0; i < in.size(); ++i) {
      INFO("element " << i << " input " << in[i] << " got " << out[i] << " expected " << expected[i]);
      const bool ok = lpemu::test::same_bits_or_nan(static_cast<double>(out[i]), expected[i]) ||
                      (std::isnan(out[i]) && std::isnan(expected[i]));
      CHECK(ok);
    }
    const auto enc = lb::encode(fmt, in, shape);
    const auto scales = ints(t, "scales");
    REQUIRE(enc.scales.size() == scales.size());
    for (std::size_t b = 0; b < scales.size(); ++b) CHECK(enc.scales[b] == scales[b]);
    if (t.contains("packed")) {
      const auto packed = lb::pack_codes(enc.codes, fmt.element.bits);
      const auto want = ints(t, "packed");
      REQUIRE(packed.size() == want.size());
      for (std::size_t i = 0; i < want.size(); ++i) CHECK(packed[i] == want[i]);
    }
  }
}

}  // namespace
