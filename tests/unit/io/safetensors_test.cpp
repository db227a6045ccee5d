// safetensors reader against files written byte by byte here (layout: 8-byte little-endian
// header length, JSON header, data; github.com/huggingface/safetensors "Format").
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/error.hpp"
#include "lpemu/io/safetensors.hpp"
#include "support/test_support.hpp"

namespace {

namespace fs = std::filesystem;

fs::path write_file(const fs::path& dir, const std::string& name, const std::string& header,
                    const std::vector<std::uint8_t>& data) {
  const fs::path p = dir / ("lpemu_st_" + name + ".safetensors");
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xFF));
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  return p;
}

}  // namespace

TEST_CASE("safetensors: header parsed and tensor bytes read", "[io][safetensors]") {
  const lpemu::test::Scratch s("safetensors");
  // a: F32 [2] = {1, -2}; b: BF16 [1, 2] = {0x3F80, 0xC000}.
  std::vector<std::uint8_t> data(12);
  const float a[2] = {1.0F, -2.0F};
  std::memcpy(data.data(), a, 8);
  const std::uint8_t b[4] = {0x80, 0x3F, 0x00, 0xC0};
  std::memcpy(data.data() + 8, b, 4);
  const fs::path p =
      write_file(s.dir, "ok",
                 R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]}})",
                 data);
  const auto f = lpemu::io::SafetensorsFile::open(p);
  REQUIRE(f.entries().size() == 2);
  CHECK(f.entry("b").dtype == "BF16");
  CHECK(f.entry("b").shape == std::vector<std::size_t>{1, 2});
  const auto bytes = f.read_bytes("a");
  float got[2];
  std::memcpy(got, bytes.data(), 8);
  CHECK(got[0] == 1.0F);
  CHECK(got[1] == -2.0F);
  CHECK(f.read_bytes("b") == std::vector<std::uint8_t>(b, b + 4));
  CHECK_THROWS_WITH(f.entry("c"), p.string() + ": no tensor 'c'");
}

TEST_CASE("safetensors: corrupt files are refused with the entry at fault", "[io][safetensors]") {
  const lpemu::test::Scratch s("safetensors");
  const std::vector<std::uint8_t> four(4);
  const auto err = [](const fs::path& p) {
    try {
      (void)lpemu::io::SafetensorsFile::open(p);
    } catch (const lpemu::IoError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  fs::path p = write_file(s.dir, "span", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", four);
  CHECK(err(p) ==
        p.string() + ": tensor 'a': data_offsets span 4 bytes, expected 8 for its shape and dtype F32");
  p = write_file(s.dir, "past", R"({"a":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})", four);
  CHECK(err(p) == p.string() + ": tensor 'a': data_offsets [0, 8] lie outside the data section of 4 bytes");
  p = write_file(s.dir, "dtype", R"({"a":{"dtype":"Q4","shape":[4],"data_offsets":[0,4]}})", four);
  CHECK(err(p) == p.string() + ": tensor 'a': dtype \"Q4\" is not a known safetensors dtype");
  p = write_file(s.dir, "json", R"({"a":)", four);
  CHECK_THAT(err(p), Catch::StartsWith(p.string() + ": header is not valid JSON"));
  p = write_file(s.dir, "shape", R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,4]}})", four);
  CHECK_THAT(err(p), Catch::Contains("tensor 'a': expected {\"dtype\": string"));
  // A header length beyond the file.
  const fs::path q = s / "lpemu_st_len.safetensors";
  {
    std::ofstream out(q, std::ios::binary | std::ios::trunc);
    const unsigned char len[8] = {0xFF, 0xFF, 0, 0, 0, 0, 0, 0};
    out.write(reinterpret_cast<const char*>(len), 8);
    out << "{}";
  }
  CHECK_THAT(err(q), Catch::Contains("header length 65535 exceeds the file (10 bytes)"));
}

TEST_CASE("safetensors: tensors must tile the data section as the reference loader requires",
          "[io][safetensors][regression]") {
  const lpemu::test::Scratch s("safetensors");
  const std::vector<std::uint8_t> eight(8);
  const auto err = [](const fs::path& p) {
    try {
      (void)lpemu::io::SafetensorsFile::open(p);
    } catch (const lpemu::IoError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  // Two tensors sharing bytes 2..4.
  fs::path p = write_file(s.dir, "overlap",
                          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                          eight);
  CHECK_THAT(err(p), Catch::Contains("tensor 'b': data_offsets [2, 6] overlap the tensor before it"));
  // Bytes 4..8 are used by nothing, before a tensor and at the end.
  p = write_file(s.dir, "gap", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight);
  CHECK_THAT(err(p), Catch::Contains("tensor 'a': data_offsets [4, 8] leave unused bytes before it"));
  p = write_file(s.dir, "tail", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight);
  CHECK_THAT(err(p), Catch::Contains("the tensors cover 4 of the 8 data bytes"));
  // 2^62 x 4 bytes wraps to 0 in 64 bits: it used to pass as an empty tensor.
  p = write_file(s.dir, "wrap", R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})",
                 {});
  CHECK_THAT(err(p), Catch::Contains("tensor 'a': the shape's byte count overflows 64 bits"));
  p = write_file(s.dir, "wrap2",
                 R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", {});
  CHECK_THAT(err(p), Catch::Contains("element count overflows 64 bits"));
  // Tiled exactly, in any header order, with an empty tensor: fine.
  p = write_file(
      s.dir, "tiled",
      R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      eight);
  CHECK(err(p) == "(no error)");
}
