// End-to-end runs of `lpemu gemm` and the block-scale inputs of `lpemu dot` (label cli via the
// [cli] tag). Expected values are exact sums computed here in double from small integers.
#include <bit>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/io/hdf5.hpp"
#include "support/test_support.hpp"

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

using lpemu::test::Run;
using lpemu::test::Scratch;

// `lpemu ARGS` with stderr merged into Run::out.
Run run(const std::string& args) { return lpemu::test::run_lpemu_merged(args); }

lpemu::io::Tensor integers(std::size_t rows, std::size_t cols, int seed) {
  lpemu::io::Tensor t{{rows, cols}, std::vector<float>(rows * cols)};
  for (std::size_t i = 0; i < t.data.size(); ++i)
    t.data[i] = static_cast<float>(static_cast<int>((i * 7 + seed * 13) % 17) - 8);
  return t;
}

TEST_CASE("lpemu gemm multiplies quantised operands on a datapath", "[engine][cli]") {
  const Scratch s("gemm_cli");
  const fs::path& dir = s.dir;
  const auto a = integers(3, 40, 1), b = integers(4, 40, 2);
  lpemu::io::write_tensor((dir / "a.npy").string(), a, lpemu::io::OutputPolicy{true, {}});
  lpemu::io::write_tensor((dir / "w.h5").string() + ":/b", b, lpemu::io::OutputPolicy{true, {}});
  const std::string out = (dir / "c.npy").string();
  const std::string args = "gemm --datapath h100_e4m3_fp32 --a-format fp8_e4m3 --b-format fp8_e4m3 " +
                           (dir / "a.npy").string() + " " + (dir / "w.h5").string() + ":/b " + out;
  Run r = run(args);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Contains("wrote [3, 4] float32"));
  const auto c = lpemu::io::read_tensor(out);
  REQUIRE(c.shape == std::vector<std::size_t>{3, 4});
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < 4; ++j) {
      double want = 0;  // small integers: exact in fp8_e4m3, and every partial sum exact in fp32
      for (std::size_t k = 0; k < 40; ++k)
        want += static_cast<double>(a.data[i * 40 + k]) * static_cast<double>(b.data[j * 40 + k]);
      CHECK(static_cast<double>(c.data[i * 4 + j]) == want);
    }
  }
  r = run(args);  // OUT exists
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Contains("pass --force"));
  r = run("gemm --datapath h100_e4m3_fp32 --a-format bf16 --b-format fp8_e4m3 --force " +
          (dir / "a.npy").string() + " " + (dir / "w.h5").string() + ":/b " + out);
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Contains("'bf16'") && Contains("'h100_e4m3_fp32'"));
}

TEST_CASE("lpemu gemm takes NVFP4 codes and scales as they were encoded", "[engine][cli]") {
  const Scratch s("gemm_nvfp4");
  const fs::path& dir = s.dir;
  lpemu::io::Tensor a{{2, 48}, std::vector<float>(96)}, b{{3, 48}, std::vector<float>(144)};
  for (std::size_t i = 0; i < a.data.size(); ++i) a.data[i] = std::sin(0.37F * static_cast<float>(i)) * 3.0F;
  for (std::size_t i = 0; i < b.data.size(); ++i) b.data[i] = std::cos(0.11F * static_cast<float>(i)) * 0.02F;
  lpemu::io::write_tensor((dir / "a.npy").string(), a, lpemu::io::OutputPolicy{true, {}});
  lpemu::io::write_tensor((dir / "b.npy").string(), b, lpemu::io::OutputPolicy{true, {}});
  Run r =
      run("gemm --datapath b200_nvfp4_fp32 --a-format nvfp4 --b-format nvfp4 " + (dir / "a.npy").string() +
          " " + (dir / "b.npy").string() + " " + (dir / "values.npy").string());
  REQUIRE(r.status == 0);
  // The same operands as codes + scale codes + tensor scale.
  const auto& nv = lpemu::block::BlockRegistry::builtin().get("nvfp4");
  const auto as_floats = [](const std::vector<std::uint32_t>& v) {
    return std::vector<float>(v.begin(), v.end());
  };
  const auto ea = lpemu::block::encode(nv, a.data, a.shape);
  const auto eb = lpemu::block::encode(nv, b.data, b.shape);
  lpemu::io::write_tensor((dir / "ac.npy").string(), {a.shape, as_floats(ea.codes)},
                          lpemu::io::OutputPolicy{true, {}});
  lpemu::io::write_tensor((dir / "bc.npy").string(), {b.shape, as_floats(eb.codes)},
                          lpemu::io::OutputPolicy{true, {}});
  lpemu::io::write_tensor((dir / "as.npy").string(), {{ea.scales.size()}, as_floats(ea.scales)},
                          lpemu::io::OutputPolicy{true, {}});
  lpemu::io::write_tensor((dir / "bs.npy").string(), {{eb.scales.size()}, as_floats(eb.scales)},
                          lpemu::io::OutputPolicy{true, {}});
  char ts[96];
  std::snprintf(ts, sizeof ts, " --a-tensor-scale %.9g --b-tensor-scale %.9g ",
                static_cast<double>(ea.tensor_scale), static_cast<double>(eb.tensor_scale));
  r = run("gemm --datapath b200_nvfp4_fp32 --a-format nvfp4 --b-format nvfp4 --codes --a-scales " +
          (dir / "as.npy").string() + " --b-scales " + (dir / "bs.npy").string() + ts +
          (dir / "ac.npy").string() + " " + (dir / "bc.npy").string() + " " + (dir / "codes.npy").string());
  REQUIRE(r.status == 0);
  const auto v = lpemu::io::read_tensor((dir / "values.npy").string());
  const auto c = lpemu::io::read_tensor((dir / "codes.npy").string());
  REQUIRE(v.data.size() == 6);
  for (std::size_t i = 0; i < 6; ++i)
    CHECK(std::bit_cast<std::uint32_t>(v.data[i]) == std::bit_cast<std::uint32_t>(c.data[i]));
}

TEST_CASE("lpemu dot takes per-block scale columns, --inputs and proposal dot.csv rows", "[engine][cli]") {
  const Scratch s("dot_scales");
  const fs::path& dir = s.dir;
  // MX: 1.0·1.0 in block 0 (scales 2^3 · 2^1) and in block 1 (2^-2 · 2^0): 16 + 0.25 = 16.25.
  std::string codes;
  for (int k = 0; k < 64; ++k) codes += (k % 32 == 0 ? "38" : "00") + std::string(k < 63 ? " " : "");
  std::ofstream(dir / "mx.csv") << "row,case,k,a,b,c,scale_a,scale_b,expected_result\n0,t,64," << codes << ","
                                << codes << ",0,3 -2,1 0,41820000\n";
  Run r = run("dot --datapath b200_mxfp8_fp32 --cases " + (dir / "mx.csv").string());
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Contains(",3 -2,1 0,41820000,16.25,1.625") && Contains("1 of 1 results match"));
  // NVFP4: E4M3 scale codes 0x3c (1.5) and 0x40 (2): 1.0 · 1.5 · 1.5 · 2 = 4.5.
  std::ofstream(dir / "nv.csv") << "a,b,c,scale_a,scale_b\n2;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0,"
                                << "3;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0,0,0x3c,0x40\n";
  r = run("dot --datapath b200_nvfp4_fp32 --cases " + (dir / "nv.csv").string());
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Contains(",0x3c,0x40,40900000,4.5,4.5000"));
  // --inputs: e5m2 codes 0x3c (1.0) and 0x40 (2.0) on the h100 FP8 datapath.
  std::ofstream(dir / "e5.csv") << "a,b,c\n3c,40,0\n";
  r = run("dot --datapath h100_e4m3_fp32 --inputs fp8_e5m2 --cases " + (dir / "e5.csv").string());
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Contains("3c,40,0,40000000,2,2.000"));
  // The dot.csv of a proposal package reads as it is, and every row matches its expected_result.
  for (const char* fd : {"fp8_e4m3 --datapath h100_e4m3_fp32", "mxfp4 --datapath b200_mxfp4_fp32"}) {
    INFO(fd);
    const fs::path pkg = dir / (std::string("pkg_") + (fd[0] == 'm' ? "mx" : "e4"));
    r = run("proposal " + std::string(fd) + " --target '' --force --out " + pkg.string());
    REQUIRE(r.status == 0);
    const std::string dp = std::string(fd).substr(std::string(fd).find("--datapath ") + 11);
    r = run("dot --datapath " + dp + " --cases " + (pkg / "dot.csv").string() + " --out " +
            (pkg / "dot_out.csv").string() + " --force");
    CHECK(r.status == 0);
    CHECK_THAT(r.out, Contains(" results match expected_result"));
    CHECK_THAT(r.out, !Contains("differ"));
  }
  // A wrong expected_result is reported and fails the command.
  std::ofstream(dir / "bad.csv") << "a,b,c,expected_result\n3c,40,0,40000001\n";
  r = run("dot --datapath h100_e4m3_fp32 --inputs fp8_e5m2 --cases " + (dir / "bad.csv").string());
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Contains("0 of 1 results match") && Contains("1 results differ from expected_result"));
}

}  // namespace
