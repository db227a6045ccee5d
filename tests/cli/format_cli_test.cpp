// End-to-end runs of the `lpemu` command on tiny data (label cli): formats list/show,
// encode/decode, convert (raw, .npy, --packed, --force) and bad inputs. Expected codes come
// from the independent reference (tests/support/reference), never from lpemu itself.
#include <sys/wait.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/format/registry.hpp"
#include "support/reference/element_reference.hpp"
#include "support/test_support.hpp"

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

using lpemu::test::Run;
using lpemu::test::run_lpemu;
using lpemu::test::Scratch;
using lpemu::test::slurp;

void write_bytes(const fs::path& p, const void* data, std::size_t n) {
  std::ofstream out(p, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

// A minimal NumPy .npy (format 1.0) writer and reader, independent of lpemu's io layer.
void write_npy_f4(const fs::path& p, const std::vector<float>& v) {
  std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(v.size()) + ",), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes = "\x93NUMPY";
  bytes += '\x01';
  bytes += '\x00';
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  const std::size_t at = bytes.size();
  bytes.resize(at + v.size() * sizeof(float));
  std::memcpy(bytes.data() + at, v.data(), v.size() * sizeof(float));
  write_bytes(p, bytes.data(), bytes.size());
}

struct Npy {
  std::string header;
  std::string data;
};

Npy read_npy(const fs::path& p) {
  const std::string all = slurp(p);
  REQUIRE(all.size() >= 10);
  REQUIRE(all.substr(0, 6) == "\x93NUMPY");
  const std::size_t hlen = static_cast<unsigned char>(all[8]) |
                           (static_cast<std::size_t>(static_cast<unsigned char>(all[9])) << 8);
  REQUIRE(all.size() >= 10 + hlen);
  return {all.substr(10, hlen), all.substr(10 + hlen)};
}

const std::vector<float> kInputs = {0.0F,
                                    -0.0F,
                                    1.0F,
                                    1.3F,
                                    448.0F,
                                    464.0F,
                                    465.0F,
                                    -1e9F,
                                    0.001F,
                                    1e-6F,
                                    std::numeric_limits<float>::infinity(),
                                    std::numeric_limits<float>::quiet_NaN()};

std::vector<std::uint8_t> reference_codes(const char* format, const std::vector<float>& in,
                                          lpemu::test::ref::Options o = {}) {
  const lpemu::test::ref::Table t(lpemu::format::Registry::builtin().get(format));
  std::vector<std::uint8_t> out;
  for (const float x : in) out.push_back(static_cast<std::uint8_t>(t.round(static_cast<double>(x), o)));
  return out;
}

TEST_CASE("lpemu formats list names every built-in format", "[cli]") {
  const Run r = run_lpemu("formats list");
  REQUIRE(r.status == 0);
  for (const auto& name : lpemu::format::Registry::builtin().names()) {
    CHECK_THAT(r.out, Contains("\n" + name + " "));
  }
}

TEST_CASE("lpemu formats show prints the limits and special encodings", "[cli]") {
  const Run r = run_lpemu("formats show float8_e4m3fn");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Contains("name:            fp8_e4m3\n"));
  CHECK_THAT(r.out, Contains("max finite:      448\n"));
  CHECK_THAT(r.out, Contains("min normal:      0.015625  (2^-6)\n"));
  CHECK_THAT(r.out, Contains("min subnormal:   0.001953125\n"));
  CHECK_THAT(r.out, Contains("machine epsilon: 0.125  (2^-3)\n"));
  CHECK_THAT(r.out, Contains("finite values:   254\n"));
  CHECK_THAT(r.out, Contains("NaN:             0x7f and 0xff"));
  const Run v = run_lpemu("formats show fp4_e2m1 --values");
  REQUIRE(v.status == 0);
  CHECK_THAT(v.out, Contains("0x7  0'11'1  6\n"));
  CHECK_THAT(v.out, Contains("0x9  1'00'1  -0.5\n"));
  CHECK_THAT(v.out, Contains("0x1  0'00'1  0.5\n"));
}

TEST_CASE("lpemu encode and decode print hex, fielded binary and value", "[cli]") {
  CHECK(run_lpemu("encode fp8_e4m3 448").out == "0x7e  0'1111'110  448\n");
  CHECK(run_lpemu("encode fp8_e4m3 464").out == "0x7e  0'1111'110  448\n");
  CHECK(run_lpemu("encode fp8_e4m3 465").out == "0x7f  0'1111'111  nan\n");
  CHECK(run_lpemu("encode fp8_e4m3 465 --overflow saturate").out == "0x7e  0'1111'110  448\n");
  CHECK(run_lpemu("encode fp8_e4m3 -1e9 --overflow saturate").out == "0xfe  1'1111'110  -448\n");
  CHECK(run_lpemu("encode fp8_e4m3 1.3 --rounding toward_positive").out == "0x3b  0'0111'011  1.375\n");
  CHECK(run_lpemu("encode fp8_e5m2 61440").out == "0x7c  0'11111'00  inf\n");
  CHECK(run_lpemu("encode fp8_e4m3 0.001 --ftz").out == "0x00  0'0000'000  0\n");
  const Run a = run_lpemu("encode fp8_e4m3 1.3 --rounding stochastic --seed 5 --sr-bits 4");
  const Run b = run_lpemu("encode fp8_e4m3 1.3 --rounding stochastic --seed 5 --sr-bits 4");
  REQUIRE(a.status == 0);
  CHECK(a.out == b.out);
  CHECK((a.out == "0x3a  0'0111'010  1.25\n" || a.out == "0x3b  0'0111'011  1.375\n"));
  CHECK(run_lpemu("decode fp8_e4m3 0x7e").out == "0x7e  0'1111'110  448\n");
  CHECK(run_lpemu("decode fp4_e2m1 0b1111").out == "0xf  1'11'1  -6\n");
  CHECK(run_lpemu("decode int8 0xff").out == "0xff  11111111  -1\n");
  CHECK(run_lpemu("decode e8m0 127").out == "0x7f  01111111  1\n");
}

TEST_CASE("lpemu convert fp32 -> fp8_e4m3 -> fp32 on raw files matches the reference", "[cli]") {
  Scratch s("raw");
  write_bytes(s / "in.f32", kInputs.data(), kInputs.size() * sizeof(float));
  Run r = run_lpemu("convert --from fp32 --to fp8_e4m3 '" + (s / "in.f32").string() + "' '" +
                    (s / "out.u8").string() + "'");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.err, Contains("converted 12 elements from fp32 to fp8_e4m3"));
  const std::string codes = slurp(s / "out.u8");
  const auto want = reference_codes("fp8_e4m3", kInputs);
  REQUIRE(codes.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i << " input " << kInputs[i]);
    CHECK(static_cast<unsigned>(static_cast<unsigned char>(codes[i])) == want[i]);
  }
  // Saturating conversion too.
  r = run_lpemu("convert --from fp32 --to fp8_e4m3 --overflow saturate '" + (s / "in.f32").string() + "' '" +
                (s / "sat.u8").string() + "'");
  REQUIRE(r.status == 0);
  const auto want_sat = reference_codes(
      "fp8_e4m3", kInputs, {lpemu::format::RoundingMode::nearest_even, lpemu::format::Overflow::saturate});
  const std::string sat = slurp(s / "sat.u8");
  REQUIRE(sat.size() == want_sat.size());
  for (std::size_t i = 0; i < want_sat.size(); ++i) CHECK(static_cast<unsigned char>(sat[i]) == want_sat[i]);
  // And back to float32: the reference values of the codes.
  r = run_lpemu("convert --from fp8_e4m3 --to fp32 '" + (s / "out.u8").string() + "' '" +
                (s / "back.f32").string() + "'");
  REQUIRE(r.status == 0);
  const std::string back = slurp(s / "back.f32");
  REQUIRE(back.size() == 4 * want.size());
  const lpemu::test::ref::Table t(lpemu::format::Registry::builtin().get("fp8_e4m3"));
  for (std::size_t i = 0; i < want.size(); ++i) {
    float v = 0;
    std::memcpy(&v, back.data() + 4 * i, 4);
    const double expect = t.value(want[i]);
    INFO("element " << i);
    if (std::isnan(expect)) {
      CHECK(std::isnan(v));
    } else {
      CHECK(lpemu::test::hex32(v) == lpemu::test::hex32(static_cast<float>(expect)));
    }
  }
}

TEST_CASE("lpemu convert reads and writes .npy files", "[cli]") {
  Scratch s("npy");
  write_npy_f4(s / "in.npy", kInputs);
  const Run r =
      run_lpemu("convert --to fp8_e4m3 '" + (s / "in.npy").string() + "' '" + (s / "out.npy").string() + "'");
  REQUIRE(r.status == 0);
  const Npy out = read_npy(s / "out.npy");
  CHECK_THAT(out.header, Contains("'descr': '|u1'"));
  CHECK_THAT(out.header, Contains("'shape': (12,)"));
  CHECK((10 + out.header.size()) % 16 == 0);
  const auto want = reference_codes("fp8_e4m3", kInputs);
  REQUIRE(out.data.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(static_cast<unsigned char>(out.data[i]) == want[i]);
}

TEST_CASE("lpemu convert --packed puts fp4 code 0 in the low nibble", "[cli]") {
  Scratch s("packed");
  const std::vector<float> in = {1.0F, 6.0F, -0.5F, 2.0F, 3.0F};  // codes 2, 7, 9, 4, 5
  write_bytes(s / "in.f32", in.data(), in.size() * sizeof(float));
  Run r = run_lpemu("convert --from fp32 --to fp4_e2m1 --packed '" + (s / "in.f32").string() + "' '" +
                    (s / "out.bin").string() + "'");
  REQUIRE(r.status == 0);
  const std::string packed = slurp(s / "out.bin");
  REQUIRE(packed.size() == 3);
  CHECK(static_cast<unsigned char>(packed[0]) == 0x72);
  CHECK(static_cast<unsigned char>(packed[1]) == 0x49);
  CHECK(static_cast<unsigned char>(packed[2]) == 0x05);
  // Unpacked: one code per byte.
  r = run_lpemu("convert --from fp32 --to fp4_e2m1 '" + (s / "in.f32").string() + "' '" +
                (s / "one.bin").string() + "'");
  REQUIRE(r.status == 0);
  CHECK(slurp(s / "one.bin") == std::string("\x02\x07\x09\x04\x05", 5));
  // And back from packed codes.
  r = run_lpemu("convert --from fp4_e2m1 --to fp32 --packed '" + (s / "out.bin").string() + "' '" +
                (s / "back.f32").string() + "'");
  REQUIRE(r.status == 0);
  const std::string back = slurp(s / "back.f32");
  REQUIRE(back.size() >= 4 * in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    float v = 0;
    std::memcpy(&v, back.data() + 4 * i, 4);
    CHECK(v == in[i]);
  }
}

TEST_CASE("lpemu convert reads a file of many chunks in parallel as a stream reads it in order", "[cli]") {
  // 3 chunks of 64 Ki codes and a partial fourth, each holding specials and boundary values.
  Scratch s("chunks");
  std::vector<float> in((std::size_t{3} << 16) + 4099);
  for (std::size_t i = 0; i < in.size(); ++i) {
    in[i] = i % 1000 < kInputs.size() ? kInputs[i % 1000]
                                      : std::ldexp(static_cast<float>(i % 4093) - 2046.5F, -7);
  }
  write_bytes(s / "in.f32", in.data(), in.size() * sizeof(float));
  write_npy_f4(s / "in.npy", in);
  const auto want = reference_codes("fp8_e4m3", in);
  const std::string want_bytes(want.begin(), want.end());
  const std::string in_f32 = "'" + (s / "in.f32").string() + "'";
  Run r = run_lpemu("convert --from fp32 --to fp8_e4m3 " + in_f32 + " '" + (s / "file.u8").string() + "'");
  REQUIRE(r.status == 0);
  CHECK(slurp(s / "file.u8") == want_bytes);
  r = run_lpemu("convert --from fp32 --to fp8_e4m3 - - < " + in_f32);
  REQUIRE(r.status == 0);
  CHECK(r.out == want_bytes);
  r = run_lpemu("convert --to fp8_e4m3 '" + (s / "in.npy").string() + "' '" + (s / "file.npy").string() +
                "'");
  REQUIRE(r.status == 0);
  CHECK(read_npy(s / "file.npy").data == want_bytes);
  // Packed FP4 codes (an odd count) back to float32: file and stream agree.
  r = run_lpemu("convert --from fp32 --to fp4_e2m1 --packed " + in_f32 + " '" + (s / "p.bin").string() + "'");
  REQUIRE(r.status == 0);
  r = run_lpemu("convert --from fp4_e2m1 --to fp32 --packed '" + (s / "p.bin").string() + "' '" +
                (s / "p.f32").string() + "'");
  REQUIRE(r.status == 0);
  const Run piped =
      run_lpemu("convert --from fp4_e2m1 --to fp32 --packed - - < '" + (s / "p.bin").string() + "'");
  REQUIRE(piped.status == 0);
  CHECK(slurp(s / "p.f32") == piped.out);
  CHECK(piped.out.size() == 4 * (in.size() + 1));  // the zero padding of the last byte is a code
  // A .npy file shorter than its header is refused before any chunk is read.
  std::string cut = slurp(s / "in.npy");
  cut.resize(cut.size() - 4 * 70000 - 2);
  write_bytes(s / "cut.npy", cut.data(), cut.size());
  r = run_lpemu("convert --to fp8_e4m3 '" + (s / "cut.npy").string() + "' '" + (s / "cut.u8").string() + "'");
  CHECK(r.status != 0);
  CHECK_THAT(r.err, Contains("cut.npy: .npy shape (" + std::to_string(in.size()) + ",) of <f4 declares " +
                             std::to_string(4 * in.size()) + " data bytes but the file holds " +
                             std::to_string(4 * (in.size() - 70000) - 2)));
  CHECK_FALSE(fs::exists(s / "cut.u8"));
  const std::string raw = slurp(s / "in.f32").substr(0, 4 * (in.size() - 70000));
  write_bytes(s / "cut.raw", raw.data(), raw.size());
  r = run_lpemu("convert --from fp32 --to fp8_e4m3 '" + (s / "cut.raw").string() + "' '" +
                (s / "cut.u8").string() + "'");
  CHECK(r.status == 0);
  CHECK(slurp(s / "cut.u8") == want_bytes.substr(0, in.size() - 70000));
  // A bad code in the third chunk is the one named, whichever thread read it first.
  std::vector<std::uint8_t> codes(in.size());
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>(i % 16);
  codes[150001] = 0xF0;
  codes[200000] = 0xF1;  // and one in the last chunk
  write_bytes(s / "bad.u8", codes.data(), codes.size());
  r = run_lpemu("convert --from fp4_e2m1 --to fp32 '" + (s / "bad.u8").string() + "' '" +
                (s / "bad.f32").string() + "'");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("bad.u8: element 150001") && Contains("code 0xf0 is wider"));
  CHECK_FALSE(fs::exists(s / "bad.f32"));
}

TEST_CASE("lpemu convert refuses to overwrite without --force", "[cli]") {
  Scratch s("force");
  write_bytes(s / "in.f32", kInputs.data(), kInputs.size() * sizeof(float));
  write_bytes(s / "out.u8", "keep", 4);
  const std::string args =
      "--from fp32 --to fp8_e4m3 '" + (s / "in.f32").string() + "' '" + (s / "out.u8").string() + "'";
  Run r = run_lpemu("convert " + args);
  CHECK(r.status != 0);
  CHECK_THAT(r.err, Contains((s / "out.u8").string() + ": output exists; pass --force to overwrite it"));
  CHECK(slurp(s / "out.u8") == "keep");
  r = run_lpemu("convert --force " + args);
  CHECK(r.status == 0);
  CHECK(slurp(s / "out.u8").size() == kInputs.size());
}

TEST_CASE("bad command-line inputs give a non-zero exit and a message", "[cli]") {
  Scratch s("bad");
  struct Bad {
    std::string args;
    std::string message;
  };
  write_bytes(s / "odd.f32", "12345", 5);
  for (const Bad& b : std::vector<Bad>{
           {"encode fp8_e4m9 1", "unknown format 'fp8_e4m9'; closest known names: fp8_e4m3"},
           {"encode fp8_e4m3 abc", "value 'abc': expected a real number"},
           {"encode fp8_e4m3 1 --rounding nearest", "--rounding: nearest not in {nearest_even,nearest_away,"},
           {"encode fp8_e4m3 1 --overflow clamp", "--overflow: clamp not in {saturate,native}"},
           {"encode fp8_e4m3 1 --rounding stochastic --sr-bits 33",
            "--sr-bits: Value 33 not in range 1 to 32"},
           {"decode fp8_e4m3 zz", "expected an unsigned integer code"},
           {"convert --from fp32 --to fp8_e4m3 '" + (s / "missing.f32").string() + "' '" +
                (s / "o").string() + "'",
            "cannot open input"},
           {"convert --from fp32 --to fp8_e4m3 '" + (s / "odd.f32").string() + "' '" + (s / "o2").string() +
                "'",
            "5 bytes is not a whole number of 4-byte 'fp32' codes"},
           {"convert --to fp8_e4m3 '" + (s / "odd.f32").string() + "' '" + (s / "o3").string() + "'",
            "--from is required for raw input"},
           {"formats show nope", "unknown format 'nope'"},
       }) {
    INFO("lpemu " << b.args);
    const Run r = run_lpemu(b.args);
    CHECK(r.status != 0);
    CHECK_THAT(r.err, Contains(b.message));
  }
}

TEST_CASE("option values are checked while parsing: exit 2 and a message naming the option", "[cli]") {
  struct Bad {
    std::string args;
    std::string message;
  };
  for (const Bad& b : std::vector<Bad>{
           // a choice outside a fixed set (names from the library's tables)
           {"encode fp8_e4m3 1 --rounding 2", "--rounding: 2 not in {nearest_even,"},
           {"quantize --format mxfp4 --scale-rule rounded in.npy out.npy",
            "--scale-rule: field 'scale_rule' = \"rounded\": expected one of \"ocp\", \"ceil\", \"rceil\""},
           {"cost --target h100_sxm --model llama3_8b --phase both_ways",
            "--phase: both_ways not in {prefill,decode,both,train}"},
           {"cost --system dgx_h100 --model llama3_70b --phase train --recompute most",
            "--recompute: most not in {none,selective,full}"},
           // a bad number
           {"datapath-error --trials 0", "--trials: 0: expected an integer in 1..1000000"},
           {"run --steps -3", "--steps: -3: expected an integer >= 1"},
           {"sweep '" + lpemu::test::source_path("experiments/default.toml") + "' --shard 0/x",
            "--shard: x: expected an integer >= 0"},
           // a bad element of a comma-separated list
           {"datapath-error --k 16,x,64", "--k: x: expected an integer in 1..1048576"},
           {"cost --system dgx_h100 --model llama3_70b --parallel tp=8 --batches 1,0,4",
            "--batches: 0: expected an integer >= 1"},
           {"datapath-error --datapath ideal,h100_e4m3_fp33 --k 16 --trials 2",
            "unknown datapath 'h100_e4m3_fp33'; closest known names: h100_e4m3_fp32"},
       }) {
    INFO("lpemu " << b.args);
    const Run r = run_lpemu(b.args);
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Contains(b.message));
    CHECK(r.out.empty());
  }
}

TEST_CASE("comma-separated options take spaces around their elements", "[cli]") {
  const Run r = run_lpemu("datapath-error --datapath 'ideal, h100_e4m3_fp32' --k '16, 32' --trials 2");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Contains("ideal") && Contains("h100_e4m3_fp32") && Contains("\n32 "));
}

}  // namespace
