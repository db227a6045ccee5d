// Golden vectors of the element formats: tests/golden/vectors/<spec>/*.toml. Each file names its
// `source`; [[decode]] tables list code -> value, [[encode]] tables list input (+ rounding,
// overflow) -> code, each for one `format`. A negative NaN is written `nan, nan_sign = -1`.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include "io/toml.hpp"  // toml++ as lpemu builds it

#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "support/test_support.hpp"

namespace {

using namespace lpemu::format;
namespace fs = std::filesystem;

struct Case {
  std::string format;
  bool is_decode = false;
  std::uint64_t code = 0;
  double value = 0;  // decode: expected value; encode: input
  ConvertOptions opts;
  std::string where;
};

struct VectorFile {
  std::string source;
  std::vector<Case> cases;
};

std::uint64_t get_code(const toml::table& t, const std::string& where) {
  const auto c = t["code"].value<std::int64_t>();
  if (!c || *c < 0) throw std::runtime_error(where + ": 'code' must be a non-negative integer");
  return static_cast<std::uint64_t>(*c);
}

double get_number(const toml::table& t, const char* key, const std::string& where) {
  const auto v = t[key].value<double>();
  if (!v) throw std::runtime_error(where + ": '" + key + "' must be a number");
  return *v;
}

// Parses one vector file; throws if `source` is missing or empty or a case is malformed.
VectorFile load_vectors(std::string_view text, const std::string& origin) {
  const toml::table doc = toml::parse(text, origin);
  VectorFile out;
  out.source = doc["source"].value_or(std::string{});
  if (out.source.empty())
    throw std::runtime_error(origin + ": missing `source = \"...\"` (the spec and its section)");
  for (const char* kind : {"decode", "encode"}) {
    const toml::array* groups = doc[kind].as_array();
    if (groups == nullptr) continue;
    for (const auto& g : *groups) {
      const toml::table* group = g.as_table();
      if (group == nullptr) throw std::runtime_error(origin + ": [[" + kind + "]] must be tables");
      const std::string format = (*group)["format"].value_or(std::string{});
      const toml::array* cases = (*group)["cases"].as_array();
      if (format.empty() || cases == nullptr)
        throw std::runtime_error(origin + ": [[" + kind + "]] needs format and cases");
      for (const auto& c : *cases) {
        const toml::table* t = c.as_table();
        if (t == nullptr) throw std::runtime_error(origin + ": cases must be inline tables");
        Case k;
        k.format = format;
        k.is_decode = std::string(kind) == "decode";
        const auto line = t->source().begin.line;
        k.where = origin + ":" + std::to_string(line);
        k.code = get_code(*t, k.where);
        k.value = get_number(*t, k.is_decode ? "value" : "input", k.where);
        // toml++ drops the sign of `-nan`, so a negative NaN is written `nan, nan_sign = -1`.
        if (std::isnan(k.value)) k.value = std::copysign(k.value, (*t)["nan_sign"].value_or(1.0));
        if (auto r = (*t)["rounding"].value<std::string>()) k.opts.rounding = parse_rounding(*r);
        if (auto o = (*t)["overflow"].value<std::string>()) k.opts.overflow = parse_overflow(*o);
        out.cases.push_back(k);
      }
    }
  }
  return out;
}

std::vector<fs::path> vector_files() {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(lpemu::test::source_path("tests/golden/vectors"))) {
    if (e.is_regular_file() && e.path().extension() == ".toml") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

VectorFile load_file(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream text;
  text << in.rdbuf();
  return load_vectors(text.str(), p.string());
}

TEST_CASE("every golden vector file names its source and parses", "[format][golden]") {
  const auto files = vector_files();
  CHECK(files.size() >= 5);
  for (const auto& p : files) {
    INFO(p.string());
    VectorFile v;
    REQUIRE_NOTHROW(v = load_file(p));
    CHECK(!v.source.empty());
    // Block-format (mx/) and datapath (tensor-cores/) files hold other kinds of cases, read by
    // their own layers' golden tests; every element-format file must hold cases.
    const std::string dir = p.parent_path().filename().string();
    if (dir != "mx" && dir != "tensor-cores") CHECK(!v.cases.empty());
  }
}

TEST_CASE("the golden loader rejects a vector file without source", "[format][golden]") {
  const char* text = "[[decode]]\nformat = \"fp8_e4m3\"\ncases = [ { code = 0x7e, value = 448.0 } ]\n";
  REQUIRE_THROWS_WITH(load_vectors(text, "mem.toml"),
                      "mem.toml: missing `source = \"...\"` (the spec and its section)");
  REQUIRE_THROWS_WITH(load_vectors(std::string("source = \"\"\n") + text, "mem.toml"),
                      "mem.toml: missing `source = \"...\"` (the spec and its section)");
}

TEST_CASE("golden vectors: decode gives the published value and encode the published code",
          "[format][golden]") {
  const auto& reg = Registry::builtin();
  std::size_t n = 0;
  for (const auto& p : vector_files()) {
    for (const Case& c : load_file(p).cases) {
      ++n;
      const Format& f = reg.get(c.format);
      INFO(c.where << ": " << c.format << (c.is_decode ? " decode " : " encode ") << hex_code(f, c.code)
                   << " / " << c.value << " (" << to_string(c.opts.rounding) << ", "
                   << to_string(c.opts.overflow) << ")");
      if (c.is_decode) {
        const double got = decode(f, c.code);
        if (std::isnan(c.value)) {
          CHECK(std::isnan(got));
          if (f.specials != Specials::fnuz) CHECK(std::signbit(got) == std::signbit(c.value));
        } else {
          CHECK(lpemu::test::hex64(got) == lpemu::test::hex64(c.value));
        }
      } else {
        CHECK(hex_code(f, encode(f, c.value, c.opts)) == hex_code(f, c.code));
        // The float32 entry points agree where the input is a float32.
        const auto xf = static_cast<float>(c.value);
        if (static_cast<double>(xf) == c.value || std::isnan(c.value)) {
          CHECK(hex_code(f, encode(f, xf, c.opts)) == hex_code(f, c.code));
        }
      }
    }
  }
  CHECK(n >= 100);
}

}  // namespace
