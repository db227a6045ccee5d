#include <bit>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/experiment/proposal.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "support/test_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace lpemu;

constexpr const char* kE3M3 =
    "name = \"fp7_e3m3\"\nsource = \"test proposal\"\nkind = \"float\"\nexponent_bits = 3\n"
    "mantissa_bits = 3\nbias = 3\nspecials = \"fn\"\n";

std::vector<std::vector<std::string>> read_csv(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::vector<std::vector<std::string>> rows;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::vector<std::string> c;
    std::stringstream s(line);
    std::string cell;
    while (std::getline(s, cell, ',')) c.push_back(cell);
    if (line.back() == ',') c.emplace_back();
    rows.push_back(c);
  }
  return rows;
}

// Results computed by the bulk (vectorised) codec, a separate implementation from the scalar
// path the vectors come from.
void write_results(const fs::path& dir, const format::Format& f, const fs::path& out, bool corrupt) {
  std::ofstream res(out);
  res << "file,row,code\n";
  for (const std::string name : {"conversion_float32.csv", "conversion_bf16.csv"}) {
    for (const auto& c : read_csv(dir / name)) {
      const auto bits = static_cast<std::uint32_t>(std::stoul(c[2], nullptr, 16));
      const float x =
          name == "conversion_bf16.csv" ? std::bit_cast<float>(bits << 16) : std::bit_cast<float>(bits);
      format::ConvertOptions o;
      o.rounding = format::parse_rounding(c[4]);
      o.overflow = format::parse_overflow(c[5]);
      if (!c[6].empty()) {
        o.sr_bits = std::stoi(c[6]);
        o.seed = 1;
        o.index_offset = std::stoull(c[0]);
      }
      std::vector<std::uint8_t> code(1);
      format::encode(f, std::span<const float>(&x, 1), std::span<std::uint8_t>(code), o);
      unsigned v = code[0];
      if (corrupt && name == "conversion_float32.csv" && c[0] == "100") v ^= 1U;
      res << name << ',' << c[0] << ",0x" << std::hex << v << std::dec << '\n';
    }
  }
}

TEST_CASE("a proposal for a non-built-in E3M3 round-trips through verify", "[experiment][unit]") {
  const test::Scratch s("proposal");
  const fs::path& dir = s.dir;
  experiment::ProposalRequest req;
  req.format_toml = kE3M3;
  req.format = format::parse_format_toml(kE3M3, "e3m3.toml");
  req.out = dir / "pkg";
  const auto files = experiment::write_proposal(req);
  REQUIRE(files.size() == 5);
  for (const auto& f : files) CHECK(fs::file_size(f) > 0);

  // The vectors cover the E3M3 overflow tie: max 28 = 1.110·2^4 (0x3e), ulp 2, tie at 29.
  // 28's mantissa is even, so nearest_even keeps the tie at max; one float ulp above is NaN (0x3f).
  int seen = 0;
  for (const auto& c : read_csv(req.out / "conversion_float32.csv")) {
    if (c[4] != "nearest_even" || c[5] != "native") continue;
    if (c[3] == "29") {
      ++seen;
      CHECK(c[8] == "0x3e");
    }
    if (c[3] == "29.000002") {
      ++seen;
      CHECK(c[8] == "0x3f");
    }
  }
  CHECK(seen == 2);

  write_results(req.out, req.format, dir / "good.csv", false);
  const auto good = experiment::verify_proposal(req.out, dir / "good.csv");
  CHECK(good.ok());
  CHECK(good.checked > 10000);

  write_results(req.out, req.format, dir / "bad.csv", true);
  const auto bad = experiment::verify_proposal(req.out, dir / "bad.csv");
  REQUIRE(bad.problems.size() == 1);
  CHECK_THAT(bad.problems[0], Catch::StartsWith("conversion_float32.csv row 100 field code: expected"));

  // A tampered vector file is caught by the manifest.
  { std::ofstream(req.out / "conversion_bf16.csv", std::ios::app) << "\n"; }
  const auto tampered = experiment::verify_proposal(req.out, dir / "good.csv");
  CHECK_THAT(tampered.problems.at(0), Catch::Contains("conversion_bf16.csv does not match its SHA-256"));

  // An existing package is not overwritten without force.
  CHECK_THROWS_WITH(experiment::write_proposal(req), Catch::Contains("pass --force"));
}

TEST_CASE("lpemu proposal verify exits non-zero on a mismatch", "[experiment][cli]") {
  const test::Scratch s("proposal_cli");
  const fs::path& dir = s.dir;
  { std::ofstream(dir / "e3m3.toml") << kE3M3; }
  REQUIRE(test::run_lpemu("proposal " + (dir / "e3m3.toml").string() + " --out " + (dir / "pkg").string(),
                          "/dev/null")
              .status == 0);
  const auto f = format::parse_format_toml(kE3M3, "e3m3.toml");
  write_results(dir / "pkg", f, dir / "bad.csv", true);
  const test::Run r = test::run_lpemu("proposal verify " + (dir / "pkg").string() + " --results " +
                                      (dir / "bad.csv").string());
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Catch::Contains("1 problems") && Catch::Contains("row 100 field code"));
}

}  // namespace
