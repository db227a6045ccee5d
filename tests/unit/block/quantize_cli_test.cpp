// End-to-end runs of `lpemu quantize` on tiny .npy files: exit codes, outputs, messages.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/io/npy.hpp"
#include "support/test_support.hpp"

namespace {

namespace fs = std::filesystem;

using lpemu::test::Run;
using lpemu::test::Scratch;

// `lpemu ARGS` with stderr merged into Run::out.
Run run(const std::string& args) { return lpemu::test::run_lpemu_merged(args); }

TEST_CASE("lpemu quantize writes the block-quantised tensor and refuses to overwrite", "[block][cli]") {
  const Scratch s("quantize_cli");
  const fs::path& dir = s.dir;
  std::vector<float> x(64);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1F * static_cast<float>(i) - 3.0F;
  const std::vector<std::size_t> shape{2, 32};
  lpemu::io::write_npy_floats(dir / "x.npy", shape, x.data());
  const std::string in = (dir / "x.npy").string(), out = (dir / "y.npy").string();

  Run r = run("quantize --format mxfp4 " + in + " " + out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Matchers::Contains("quantized 64 elements with mxfp4"));
  std::vector<std::size_t> got_shape;
  const auto y = lpemu::io::read_npy_floats(out, got_shape);
  CHECK(got_shape == shape);
  std::vector<float> want(x.size());
  lpemu::block::quantize(lpemu::block::BlockRegistry::builtin().get("mxfp4"), x, want, shape);
  CHECK(y == want);

  r = run("quantize --format mxfp4 " + in + " " + out);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Matchers::Contains("output exists; pass --force to overwrite it"));

  r = run("quantize --format nvfp4 --force --stats --json " + in + " " + out);
  CHECK(r.status == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["format"] == "nvfp4");
  CHECK(j["stats"]["sqnr_db"].is_number());

  r = run("quantize --format mxfp44 " + in + " " + out + " --force");
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Matchers::Contains("unknown format 'mxfp44'") && Catch::Matchers::Contains("mxfp4"));

  r = run("quantize --format fp8_e4m3 --block 16 " + in + " " + out + " --force");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Matchers::Contains("need a block format"));

  r = run("quantize --format mxfp4 --axis 5 " + in + " " + out + " --force");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Matchers::Contains("axis 5 is out of range for a tensor of rank 2"));

  r = run("quantize --format mxfp4 " + (dir / "missing.npy").string() + " " + out + " --force");
  CHECK(r.status == 2);

  r = run("quantize --format mxfp4 --packed " + (dir / "p.h5").string() + " " + in + " " +
          (dir / "z.h5").string() + ":/q/x");
  CHECK(r.status == 0);
  CHECK(fs::exists(dir / "p.h5"));
  CHECK(fs::exists(dir / "z.h5"));
}

}  // namespace
