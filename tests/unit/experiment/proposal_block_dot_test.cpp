// Block-format and datapath parts of a proposal package: the block vectors re-checked
// against the independent exact MX reference, the dot-product vectors against exact arithmetic,
// and verify catching a corrupted vendor result with its row and field.
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/pack.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/datapath/dot.hpp"
#include "lpemu/datapath/exact.hpp"
#include "lpemu/experiment/proposal.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "support/reference/block_reference.hpp"
#include "support/test_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace lpemu;

using Row = std::map<std::string, std::string>;

std::vector<Row> read_csv(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  {
    std::stringstream s(line);
    std::string cell;
    while (std::getline(s, cell, ',')) header.push_back(cell);
  }
  std::vector<Row> rows;
  while (std::getline(in, line)) {
    Row r;
    std::size_t start = 0;
    for (const auto& h : header) {
      const auto end = line.find(',', start);
      r[h] = line.substr(start, end == std::string::npos ? std::string::npos : end - start);
      start = end == std::string::npos ? line.size() : end + 1;
    }
    rows.push_back(r);
  }
  return rows;
}

std::vector<std::uint32_t> hex_words(const std::string& s) {
  std::vector<std::uint32_t> out;
  std::stringstream in(s);
  std::string tok;
  while (in >> tok) out.push_back(static_cast<std::uint32_t>(std::stoul(tok, nullptr, 16)));
  return out;
}

std::vector<float> floats(const std::string& s) {
  std::vector<float> out;
  for (const auto w : hex_words(s)) out.push_back(std::bit_cast<float>(w));
  return out;
}

TEST_CASE("mxfp4 proposal: every block vector matches the exact OCP MX reference", "[experiment][unit]") {
  const test::Scratch scratch("proposal_mxfp4");
  const fs::path& dir = scratch.dir;
  const auto& mx = block::BlockRegistry::builtin().get("mxfp4");
  experiment::ProposalRequest req;
  req.block = mx;
  req.format = mx.element;
  req.out = dir;
  const auto files = experiment::write_proposal(req);
  CHECK(fs::exists(dir / "blocks.csv"));
  CHECK(fs::exists(dir / "element.toml"));

  const auto rows = read_csv(dir / "blocks.csv");
  std::set<std::string> cases;
  for (const auto& r : rows) {
    cases.insert(r.at("case"));
    const auto x = floats(r.at("inputs"));
    const auto scales = hex_words(r.at("expected_scales"));
    const auto decoded = floats(r.at("expected_decoded"));
    REQUIRE(decoded.size() == x.size());
    REQUIRE(scales.size() == (x.size() + 31) / 32);
    for (std::size_t blk = 0; blk < scales.size(); ++blk) {
      const std::vector<float> xs(x.begin() + static_cast<std::ptrdiff_t>(blk * 32),
                                  x.begin() + static_cast<std::ptrdiff_t>(std::min(x.size(), blk * 32 + 32)));
      const auto ref = test::ref::mx_block(xs, test::ref::fp4_e2m1(), "ocp", test::ref::Mode::nearest_even);
      INFO("row " << r.at("row") << " (" << r.at("case") << ") block " << blk);
      if (ref.nan) {
        CHECK(scales[blk] == 0xFF);
      } else {
        CHECK(static_cast<int>(scales[blk]) - 127 == ref.shared_exp);
      }
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const float got = decoded[blk * 32 + i];
        if (ref.nan) {
          CHECK(std::isnan(got));
        } else {
          CHECK(test::same_bits_or_nan(static_cast<double>(got), ref.out[i]));
        }
      }
    }
    // Packed bytes: FP4 element 2i in the low nibble of byte i, 2i+1 in the high nibble.
    const auto packed = hex_words(r.at("expected_packed"));
    REQUIRE(packed.size() == (x.size() + 1) / 2);
    const block::BlockTensor t = block::encode(mx, x, std::vector<std::size_t>{x.size()});
    for (std::size_t i = 0; i < x.size(); ++i) {
      CHECK(((packed[i / 2] >> (4 * (i % 2))) & 0xF) == t.codes[i]);
    }
  }
  for (const char* c :
       {"all_zero", "signed_zeros", "element_values", "ties", "nan_inside", "inf_inside", "scale_underflow",
        "float32_subnormals", "max_float32", "partial_last_block", "random"}) {
    CHECK(cases.count(c) == 1);
  }

  // A vendor's results from lpemu's own block codec pass; one corrupted nibble is named.
  const auto results = [&](bool corrupt) {
    const fs::path p = dir.parent_path() / (corrupt ? "mx_bad.csv" : "mx_good.csv");
    std::ofstream out(p);
    out << "file,row,scales,packed,decoded\n";
    for (const auto& r : rows) {
      const auto x = floats(r.at("inputs"));
      const block::BlockTensor t = block::encode(mx, x, std::vector<std::size_t>{x.size()});
      auto bytes = block::pack_codes(t.codes, 4);
      if (corrupt && r.at("case") == "ties") bytes[3] ^= 0x10;
      std::vector<float> dec(x.size());
      block::decode(mx, t, dec);
      out << "blocks.csv," << r.at("row") << ',';
      for (std::size_t i = 0; i < t.scales.size(); ++i) out << (i ? " " : "") << std::hex << t.scales[i];
      out << ',';
      for (std::size_t i = 0; i < bytes.size(); ++i) out << (i ? " " : "") << static_cast<unsigned>(bytes[i]);
      out << ',';
      for (std::size_t i = 0; i < dec.size(); ++i)
        out << (i ? " " : "") << std::bit_cast<std::uint32_t>(dec[i]);
      out << std::dec << '\n';
    }
    return p;
  };
  const auto good = experiment::verify_proposal(dir, results(false));
  CHECK(good.problems.empty());
  CHECK(good.checked == rows.size());
  const auto bad = experiment::verify_proposal(dir, results(true));
  REQUIRE(bad.problems.size() == 1);
  CHECK_THAT(bad.problems[0], Catch::Contains("blocks.csv row") &&
                                  Catch::Contains("field packed: expected") &&
                                  Catch::Contains("at position 3") && Catch::Contains("case ties"));
}

TEST_CASE("nvfp4 proposal: two-level scale rows carry the tensor scale", "[experiment][unit]") {
  const auto& nv = block::BlockRegistry::builtin().get("nvfp4");
  const auto rows = experiment::block_vectors(nv, 3);
  bool multi = false;
  for (const auto& v : rows) {
    // g = fp32(amax / (6·448)) from the row's own tensor (docs/block-formats.md, NVFP4 two-level scale).
    double amax = 0;
    for (const float x : v.inputs) {
      if (std::isfinite(x)) amax = std::max(amax, std::fabs(static_cast<double>(x)));
    }
    const float g = static_cast<float>(amax / (6.0 * 448.0));
    if (std::isfinite(g) && g > 0 &&
        std::none_of(v.inputs.begin(), v.inputs.end(), [](float x) { return std::isnan(x); })) {
      INFO(v.name);
      CHECK(v.tensor_scale == g);
    }
    CHECK(v.scales.size() == (v.inputs.size() + 15) / 16);
    multi = multi || v.scales.size() == 4;
  }
  CHECK(multi);
}

TEST_CASE("a block format whose FP8 scale can overflow gets a NaN scale_overflow row", "[experiment][unit]") {
  const auto f = block::parse_block_format_toml(
      "name = \"fp4_fp8scale\"\nelement = \"fp4_e2m1\"\nscale = \"fp8_e4m3\"\ngranularity = \"block\"\n"
      "block_size = 16\nscale_rule = \"amax_over_max\"\n",
      "s.toml", format::Registry::builtin());
  int seen = 0;
  for (const auto& v : experiment::block_vectors(f, 1)) {
    if (v.name != "scale_overflow") continue;
    ++seen;
    CHECK(v.scales.at(0) == 0x7F);  // E4M3's NaN: amax / 6 > 448 (scale_overflow = "nan")
    for (const float x : v.decoded) CHECK(std::isnan(x));
  }
  CHECK(seen == 1);
}

TEST_CASE("datapath vectors: ideal rounds the exact sum, truncating datapaths never round up",
          "[experiment][unit]") {
  const auto& reg = datapath::DatapathRegistry::builtin();
  {
    const auto& ideal = reg.get("ideal");
    const auto rows = experiment::dot_vectors(ideal, 7);
    int exact_rows = 0;
    for (const auto& v : rows) {
      const auto ex = datapath::exact_dot(ideal, v.a, v.b, v.c, {v.scale_a, v.scale_b});
      const double d = ex.to_double();
      const double got = format::decode(ideal.output(), v.expected);
      if (ex.nan) {
        CHECK(std::isnan(got));
        continue;
      }
      // Where the exact sum is a value of the output format, ideal returns exactly it.
      if (!ex.inf && std::isfinite(d) && format::quantize(ideal.output(), d) == d && d != 0) {
        INFO(v.name << " row " << v.row);
        CHECK(got == d);
        ++exact_rows;
      }
    }
    CHECK(exact_rows > 10);
  }
  for (const char* name : {"h100_e4m3_fp32", "h100_e4m3_fp32_promote128", "b200_mxfp4_fp32"}) {
    const auto& dp = reg.get(name);
    const auto rows = experiment::dot_vectors(dp, 7);
    std::set<std::string> kinds;
    for (const auto& v : rows) {
      kinds.insert(v.name.substr(0, v.name.find('_')));
      const auto ex = datapath::exact_dot(dp, v.a, v.b, v.c, {v.scale_a, v.scale_b});
      const double got = format::decode(dp.output(), v.expected);
      if (ex.nan || ex.inf || !std::isfinite(got)) continue;
      INFO(name << ": " << v.name << " row " << v.row << " exact " << ex.to_string());
      // When every term has one sign, truncating each term's magnitude and rounding the result
      // toward zero never exceed the exact magnitude.
      int pos = 0;
      int neg = 0;
      const auto count = [&](double x) {
        pos += x > 0 ? 1 : 0;
        neg += x < 0 ? 1 : 0;
      };
      for (std::size_t i = 0; i < v.a.size(); ++i)
        count(format::decode(dp.a, v.a[i]) * format::decode(dp.b, v.b[i]));
      count(format::decode(dp.output(), v.c));
      if (pos == 0 || neg == 0) CHECK(std::fabs(got) <= std::fabs(ex.to_double()) * (1 + 1e-15));
      CHECK(v.expected == datapath::dot(dp, v.a, v.b, v.c, {v.scale_a, v.scale_b}, v.row));
    }
    CHECK(kinds.count("alignment") == 1);
    CHECK(kinds.count("truncation") == 1);
    CHECK(kinds.count("fused") == 1);
    CHECK(kinds.count("random") == 1);
    if (dp.promote_every > 0) CHECK(kinds.count("promotion") == 1);
    if (dp.scale_application != datapath::ScaleApplication::none) CHECK(kinds.count("scales") == 1);
    if (dp.a.subnormals) CHECK(kinds.count("subnormal") == 1);
  }
}

TEST_CASE("a proposal's datapath is retargeted to the proposed format and its dot rows verify",
          "[experiment][unit]") {
  const test::Scratch scratch("proposal_dot");
  const fs::path& dir = scratch.dir;
  const std::string e3m3 =
      "name = \"fp7_e3m3\"\nkind = \"float\"\nexponent_bits = 3\nmantissa_bits = 3\nbias = 3\nspecials = "
      "\"fn\"\n";
  experiment::ProposalRequest req;
  req.format = format::parse_format_toml(e3m3, "e3m3.toml");
  req.format_toml = e3m3;
  const auto& preset = datapath::DatapathRegistry::builtin().get("h100_e4m3_fp32");
  req.datapath = experiment::retarget_datapath(preset, req.format);
  CHECK(req.datapath->name == "h100_e4m3_fp32.fp7_e3m3");
  CHECK(req.datapath->a.name == "fp7_e3m3");
  CHECK(req.datapath->fraction_bits == preset.fraction_bits);
  req.out = dir;
  // The rewritten TOML reads back as the retargeted datapath (given the proposed format).
  std::string text;
  format::Registry formats = format::Registry::with_user_paths();
  formats.add(req.format, "e3m3.toml");
  {
    std::ifstream in(test::source_path("formats/datapath/h100_e4m3_fp32.toml"));
    std::stringstream s;
    s << in.rdbuf();
    text = s.str();
  }
  req.datapath_toml = experiment::retarget_datapath_toml(text, "h100_e4m3_fp32.toml", *req.datapath);
  const auto back = datapath::parse_datapath_toml(req.datapath_toml, "datapath.toml", formats);
  CHECK(back.name == req.datapath->name);
  CHECK(back.a.name == "fp7_e3m3");
  CHECK(back.fused_terms == preset.fused_terms);
  experiment::write_proposal(req);

  const auto rows = read_csv(dir / "dot.csv");
  REQUIRE(rows.size() > 50);
  const fs::path res = dir.parent_path() / "dot_results.csv";
  {
    std::ofstream out(res);
    out << "file,row,result\n";
    for (const auto& r : rows) {
      const auto a = hex_words(r.at("a"));
      const auto b = hex_words(r.at("b"));
      std::vector<std::uint64_t> a64(a.begin(), a.end()), b64(b.begin(), b.end());
      const std::uint64_t c = std::stoull(r.at("c"), nullptr, 16);
      std::uint64_t d = datapath::dot(back, a64, b64, c, {}, std::stoull(r.at("row")));
      if (r.at("row") == "7") d ^= 1;
      out << "dot.csv," << r.at("row") << ",0x" << std::hex << d << std::dec << '\n';
    }
  }
  const auto rep = experiment::verify_proposal(dir, res);
  REQUIRE(rep.problems.size() == 1);
  CHECK_THAT(rep.problems[0], Catch::StartsWith("dot.csv row 7 field result: expected"));
  CHECK(rep.missing > 0);  // conversion rows were not given
  CHECK(rep.per_file.at("dot.csv").first == rows.size());
  CHECK(rep.per_file.at("dot.csv").second == 0);
  CHECK(rep.per_file.at("conversion_float32.csv").first == 0);
}

TEST_CASE("lpemu proposal --model writes summary.md against bf16 and mxfp8", "[experiment][cli]") {
  const test::Scratch scratch("proposal_model");
  const fs::path& dir = scratch.dir;
  {
    std::ofstream(dir / "e3m3.toml") << "name = \"fp7_e3m3\"\nkind = \"float\"\nexponent_bits = "
                                        "3\nmantissa_bits = 3\nbias = 3\nspecials = \"fn\"\n";
  }
  const test::Run r = test::run_lpemu_merged(
      "proposal " + (dir / "e3m3.toml").string() +
      " --datapath h100_e4m3_fp32 --model stories260K --max-tokens 48 --out " + (dir / "pkg").string());
  INFO(r.out);
  REQUIRE(r.status == 0);
  std::ifstream in(dir / "pkg" / "summary.md");
  std::stringstream s;
  s << in.rdbuf();
  const std::string md = s.str();
  for (const char* want : {"| bf16 |", "| mxfp8_e4m3 |", "| fp7_e3m3 |", "| fp7_e3m3_per_tensor |",
                           "| fp7_e3m3+h100_e4m3_fp32.fp7_e3m3 |", "tokens/s", "| fp7_e3m3 | mxfp8_e4m3 |"}) {
    CHECK_THAT(md, Catch::Contains(want));
  }
  std::ifstream mf(dir / "pkg" / "MANIFEST");
  std::stringstream m;
  m << mf.rdbuf();
  for (const char* want :
       {"summary.md", "accuracy/results.csv", "accuracy/experiment.toml", "dot.csv", "datapath.toml"}) {
    CHECK_THAT(m.str(), Catch::Contains(want));
  }
}

}  // namespace

namespace {

TEST_CASE("lpemu proposal takes a user block format by name from --formats-dir", "[experiment][cli]") {
  const test::Scratch scratch("proposal_user_block");
  const fs::path dir = scratch / "pkg";
  REQUIRE(test::run_lpemu("--formats-dir " + test::source_path("experiments/proposals") +
                              " proposal mx7_e3m3 --datapath b200_mxfp8_fp32 --out " + dir.string(),
                          "/dev/null")
              .status == 0);
  for (const char* f :
       {"spec.md", "format.toml", "element.toml", "blocks.csv", "dot.csv", "datapath.toml", "MANIFEST"}) {
    CHECK(fs::exists(dir / f));
  }
  std::ifstream in(dir / "datapath.toml");
  std::stringstream s;
  s << in.rdbuf();
  // datapath::to_toml spells strings with double quotes (toml++ printed single quotes before).
  CHECK_THAT(s.str(),
             Catch::Contains("a = \"fp7_e3m3\"") && Catch::Contains("scale_application = \"product\""));
  // Seven-bit codes pack 8 elements into 7 bytes.
  const auto rows = read_csv(dir / "blocks.csv");
  REQUIRE(!rows.empty());
  CHECK(hex_words(rows.front().at("expected_packed")).size() == 28);
}

}  // namespace

namespace {

TEST_CASE("lpemu proposal checks --text, --target and --shape before writing anything", "[experiment][cli]") {
  const test::Scratch scratch("proposal_bad_input");
  const fs::path dir = scratch / "pkg";
  const std::string base = "proposal fp8_e4m3 --model stories260K --out " + dir.string();
  for (const char* bad : {" --text /nonexistent/paragraph.txt", " --target no_such_gpu",
                          " --shape no_such_model", " --phase training"}) {
    INFO(bad);
    CHECK(test::run_lpemu(base + bad).status == 2);
    CHECK(!fs::exists(dir));
  }
}

}  // namespace
