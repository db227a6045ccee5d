// Regression tests for bad inputs and unsafe outputs (label cli): each case runs the built `lpemu`
// on an input checked in under tests/regression/ (or made here from a shipped file) and checks
// the exit status, the message and that no file was destroyed or left half-written.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <hdf5.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "lpemu/io/hdf5.hpp"
#include "lpemu/io/npy.hpp"
#include "support/test_support.hpp"

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

using lpemu::test::Run;
using lpemu::test::run_lpemu;
using lpemu::test::Scratch;
using lpemu::test::slurp;

std::string regression(const std::string& f) { return lpemu::test::source_path("tests/regression/" + f); }

}  // namespace

TEST_CASE("bad .npy headers are errors naming the file, and nothing is written", "[cli][regression]") {
  Scratch s("npy");
  struct Case {
    const char* file;
    const char* says;
  };
  for (const Case c :
       {Case{"npy_shape_overflow.npy", "overflows the address space"},
        Case{"npy_dim_wraps.npy", "does not fit in 64 bits"},
        Case{"npy_negative_dim.npy", "non-negative integers"},
        Case{"npy_float_dim.npy", "non-negative integers"},
        Case{"npy_fortran_one.npy", "'fortran_order' must be True or False"},
        Case{"npy_declares_5e8.npy", "declares 2000000000 data bytes but the file holds 16"},
        Case{"npy_declares_1e12.npy", "declares 4000000000000 data bytes but the file holds 16"}}) {
    INFO(c.file);
    const Run r =
        run_lpemu("quantize --format fp8_e4m3 '" + regression(c.file) + "' '" + (s / "o.npy").string() + "'");
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Contains(c.file) && Contains(c.says));
    CHECK_FALSE(fs::exists(s / "o.npy"));
    const Run v =
        run_lpemu("convert --to fp8_e4m3 '" + regression(c.file) + "' '" + (s / "o.npy").string() + "'");
    CHECK(v.status == 2);
    CHECK_THAT(v.err, Contains(c.file));
    CHECK_FALSE(fs::exists(s / "o.npy"));
  }
}

TEST_CASE("packed weights are a memory budget, not a result: eval is the same without them",
          "[cli][regression]") {
  const std::string args = "eval --plan h100_e4m3 --text '" +
                           lpemu::test::source_path("data/models/stories260K/paragraph.txt") + "'";
  const Run packed = run_lpemu(args);
  const Run unpacked = run_lpemu(args, "", "LPEMU_PACKED_WEIGHTS_MB=0");
  REQUIRE(packed.status == 0);
  REQUIRE(unpacked.status == 0);
  CHECK_THAT(packed.out, Contains("plan h100_e4m3"));
  CHECK(unpacked.out == packed.out);
  const Run bad = run_lpemu(args, "", "LPEMU_PACKED_WEIGHTS_MB=lots");
  CHECK(bad.status == 2);
  CHECK_THAT(bad.err, Contains("LPEMU_PACKED_WEIGHTS_MB = 'lots': expected a whole number of MiB"));
}

TEST_CASE("outputs need --force, and --force never destroys an input", "[cli][regression]") {
  Scratch s("force");
  const fs::path x = s / "x.npy";
  fs::copy_file(regression("npy_ok4.npy"), x);
  const std::string before = slurp(x);
  Run r = run_lpemu("convert --force --to fp8_e4m3 '" + x.string() + "' '" + x.string() + "'");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("is also an input"));
  CHECK(slurp(x) == before);
  r = run_lpemu("quantize --force --format fp8_e4m3 '" + x.string() + "' '" + x.string() + "'");
  CHECK(r.status == 2);
  CHECK(slurp(x) == before);

  // dot --cases c.csv --out c.csv
  const fs::path csv = s / "c.csv";
  std::ofstream(csv) << "a,b,c\n3c;3c,3c;3c,0\n";
  const std::string cases = slurp(csv);
  r = run_lpemu("dot --force --datapath ideal --cases '" + csv.string() + "' --out '" + csv.string() + "'");
  CHECK(r.status == 2);
  CHECK(slurp(csv) == cases);
  // dot --out over an existing file needs --force, and leaves no temporary file behind.
  const fs::path res = s / "r.csv";
  std::ofstream(res) << "keep me\n";
  r = run_lpemu("dot --datapath ideal --cases '" + csv.string() + "' --out '" + res.string() + "'");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("pass --force"));
  CHECK(slurp(res) == "keep me\n");
  r = run_lpemu("dot --force --datapath ideal --cases '" + csv.string() + "' --out '" + res.string() + "'");
  CHECK(r.status == 0);
  CHECK_THAT(slurp(res), Contains("a,b,c,d,d_value,exact"));
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(s.dir)) ++files;
  CHECK(files == 3);
}

TEST_CASE("an HDF5 group is never replaced and HDF5 failures are named errors", "[cli][regression]") {
  Scratch s("h5");
  const std::string x = regression("npy_ok4.npy");
  const std::string h5 = (s / "o.h5").string();
  REQUIRE(run_lpemu("quantize --format fp8_e4m3 '" + x + "' '" + h5 + ":/g/a'").status == 0);
  Run r = run_lpemu("quantize --force --format fp8_e4m3 '" + x + "' '" + h5 + ":/g'");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains(h5 + ":/g: is a group"));
  // A dataset under a dataset: HDF5 refuses; lpemu reports it instead of terminating.
  r = run_lpemu("quantize --format fp8_e4m3 '" + x + "' '" + h5 + ":/g/a/b'");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains(h5 + ":/g/a/b: HDF5 error"));
  // The file still holds /g/a: read it back through quantize.
  r = run_lpemu("quantize --format fp8_e4m3 '" + h5 + ":/g/a' '" + (s / "back.npy").string() + "'");
  CHECK(r.status == 0);
}

TEST_CASE("flipped bytes in a model file give an error, never a crash", "[cli][regression]") {
  Scratch s("flip");
  const std::string model = lpemu::test::source_path("data/models/stories260K/model.h5");
  const std::string bytes = slurp(model);
  int errors = 0;
  // Offsets spread over the superblock, object headers and data (fixed, so the test is repeatable).
  for (const std::size_t at : {0UL, 8UL, 40UL, 96UL, 200UL, 800UL, 1500UL, 3000UL, 6000UL, 20000UL}) {
    std::string b = bytes;
    b[at] = static_cast<char>(b[at] ^ 0xff);
    const fs::path p = s / "model.h5";
    std::ofstream(p, std::ios::binary | std::ios::trunc) << b;
    const Run r = run_lpemu("run --steps 2 --model '" + p.string() + "'");
    INFO("offset " << at << ": " << r.err);
    CHECK((r.status == 0 || r.status == 2));
    if (r.status == 2) ++errors;
  }
  CHECK(errors > 0);
}

TEST_CASE("write failures make commands fail", "[cli][regression]") {
  CHECK(run_lpemu("formats list", "/dev/full").status == 2);
  CHECK(run_lpemu("encode fp8_e4m3 1.5", "/dev/full").status == 2);
  CHECK(run_lpemu("decode fp8_e4m3 0x38", "/dev/full").status == 2);
  const Run r = run_lpemu("convert --to fp8_e4m3 '" + regression("npy_ok4.npy") + "' /dev/full");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("/dev/full: write failed"));
}

TEST_CASE("CLI usage errors exit 2, and negative numbers are values", "[cli][regression]") {
  Run r = run_lpemu("--threads 0 formats list");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("--threads") && Contains("not in range 1 to"));
  CHECK(run_lpemu("no-such-command").status == 2);
  CHECK(run_lpemu("encode").status == 2);
  r = run_lpemu("encode fp8_e5m2 -inf");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Contains("0xfc"));  // E5M2: -inf = 1'11111'00
  r = run_lpemu("encode fp8_e4m3 -1.5");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Contains("0xbc"));  // E4M3: -1.5 = 1'0111'100
}

TEST_CASE("inputs that are not regular files are refused or bounded", "[cli][regression]") {
  const Run r = run_lpemu("eval --text /dev/zero");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("/dev/zero"));
  Scratch s("dir");
  const Run d =
      run_lpemu("quantize --format fp8_e4m3 '" + s.dir.string() + "/.npy' '" + (s / "o.npy").string() + "'");
  CHECK(d.status == 2);
}

TEST_CASE("JSON output is valid and writes non-finite numbers as null", "[cli][regression]") {
  Scratch s("json");
  // All-zero input: no noise, so SQNR is +inf and must print as null.
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::string file =
      std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size()) + '\0' + h + std::string(16, '\0');
  std::ofstream(s / "z.npy", std::ios::binary) << file;
  const Run r = run_lpemu("quantize --stats --json --format fp8_e4m3 '" + (s / "z.npy").string() + "' '" +
                          (s / "o\"q.npy").string() + "'");
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["stats"]["sqnr_db"].is_null());
  CHECK(j["stats"]["mse"] == 0.0);
  CHECK(j["output"] == (s / "o\"q.npy").string());
}

TEST_CASE("sweep never writes into a folder lpemu did not create", "[cli][regression]") {
  Scratch s("sweep");
  std::ofstream(s / "report.md") << "my own notes\n";
  const Run r = run_lpemu("sweep '" + lpemu::test::source_path("experiments/default.toml") + "' --out '" +
                          s.dir.string() + "'");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("was not written by lpemu"));
  CHECK(slurp(s / "report.md") == "my own notes\n");
}

TEST_CASE("proposal verify reads only files inside the package", "[cli][regression]") {
  Scratch s("manifest");
  const std::string sha_of_empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
  std::ofstream(s / "results.csv") << "file,row,code\n";
  for (const std::string name : {"/etc/hostname", "../outside.csv", "a/../../outside.csv"}) {
    std::ofstream(s / "MANIFEST", std::ios::trunc) << sha_of_empty << "  " << name << "\n";
    const Run r = run_lpemu("proposal verify '" + s.dir.string() + "' --results '" +
                            (s / "results.csv").string() + "'");
    INFO(name);
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Contains("expected a path inside"));
  }
  std::ofstream(s / "MANIFEST", std::ios::trunc) << "xyz  spec.md\n";
  const Run r =
      run_lpemu("proposal verify '" + s.dir.string() + "' --results '" + (s / "results.csv").string() + "'");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("MANIFEST: line 'xyz  spec.md': expected 64 lowercase hex digits"));
}

TEST_CASE("proposal verify exits 1, without an error line, when results differ", "[cli][regression]") {
  Scratch s("verify_rc");
  std::ofstream(s / "MANIFEST") << "";
  std::ofstream(s / "results.csv") << "file,row,code\nvectors.csv,0,0x00\n";
  const Run r =
      run_lpemu("proposal verify '" + s.dir.string() + "' --results '" + (s / "results.csv").string() + "'");
  CHECK(r.status == 1);
  CHECK_THAT(r.out, Contains("1 problems"));
  CHECK_THAT(r.err, !Contains("error"));
  // The same report to a full disk: exit 2, saying the report was lost.
  const Run lost =
      run_lpemu("proposal verify '" + s.dir.string() + "' --results '" + (s / "results.csv").string() + "'",
                "/dev/full");
  CHECK(lost.status == 2);
  CHECK_THAT(lost.err, Contains("write failed") && Contains("the report on standard output was lost"));
}

TEST_CASE("quantize --stats counts finite inputs that became NaN as unbounded error", "[cli][regression]") {
  Scratch s("nanstats");
  // fp8_e4m3 has no infinity: with --overflow native, 1000 (> 448) becomes NaN.
  const std::string in = regression("npy_overflows_e4m3.npy");
  Run r = run_lpemu("quantize --stats --json --overflow native --format fp8_e4m3 '" + in + "' '" +
                    (s / "o.npy").string() + "'");
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["stats"]["sqnr_db"].is_null());  // -inf
  CHECK(j["stats"]["max_abs_error"].is_null());
  CHECK(j["stats"]["nonfinite_outputs"] == 1);
  r = run_lpemu("quantize --stats --overflow native --format fp8_e4m3 '" + in + "' '" +
                (s / "p.npy").string() + "'");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Contains("SQNR            -inf dB") && Contains("non-finite outputs of finite inputs 1"));
}

TEST_CASE("datapath-error refuses inputs that encode the draws as NaN instead of reporting NaN statistics",
          "[cli][regression]") {
  const Run r = run_lpemu("datapath-error --inputs e8m0 --trials 5 --k 16");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("'e8m0'") && Contains("NaN") && Contains("unsigned"));
  CHECK_THAT(r.out, !Contains("nan"));
}

TEST_CASE("quantize --stats counts saturation from the element codes, whatever the scale format",
          "[cli][regression]") {
  Scratch s("saturated");
  // NVFP4: E4M3 block scales (not powers of two). Every block's largest element reaches the FP4
  // maximum 6 (the scale is amax / 6 rounded to E4M3, within 6.25 %), so at least 1 in 16 saturates.
  const Run r = run_lpemu("quantize --stats --json --format nvfp4 '" + regression("npy_normal_64x64.npy") +
                          "' '" + (s / "o.npy").string() + "'");
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["stats"]["saturated"].get<double>() >= 1.0 / 16.0);
  CHECK(j["stats"]["saturated"].get<double>() >= j["stats"]["clipped"].get<double>());
}

TEST_CASE("an experiment's [cost] names are checked before any plan runs", "[cli][regression]") {
  Scratch s("costnames");
  struct Case {
    const char* file;
    const char* says;
  };
  for (const Case c :
       {Case{"experiment_cost_target_nope.toml", "cost.target = \"nope\": unknown target 'nope'"},
        Case{"experiment_cost_shape_nope.toml", "cost.shape = \"nope\": unknown model shape 'nope'"},
        Case{"experiment_cost_phase_nope.toml",
             "'cost.phase' = \"nope\": expected \"decode\" or \"prefill\""},
        Case{"experiment_cost_parallel_overflow.toml", "tp = 4294967296: expected at most 1048576"},
        Case{"experiment_cost_parallel_mismatch.toml", "uses 8 devices; cost.devices is 16"}}) {
    INFO(c.file);
    const Run r = run_lpemu("sweep '" + regression(c.file) + "' --out '" + (s / "out").string() + "'");
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Contains(c.file) && Contains(c.says));
    CHECK_FALSE(fs::exists(s / "out" / "plans" / "0000.h5"));  // nothing ran
  }
  // The message lists the closest valid names.
  const Run r = run_lpemu("sweep '" + regression("experiment_cost_target_nope.toml") + "' --out '" +
                          (s / "o").string() + "'");
  CHECK_THAT(r.err, Contains("closest known names: "));
}

TEST_CASE("codes wider than their format are errors wherever codes are read", "[cli][regression]") {
  Scratch s("widecodes");
  Run r = run_lpemu("decode fp4_e2m1 0xff");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("CODE = '0xff': code 0xff is wider than format 'fp4_e2m1' (4 bits)"));
  // Raw stream, one code per byte: element 2 is 0xff.
  r = run_lpemu("convert --from fp4_e2m1 --to fp32 '" + regression("fp4_codes_0xff.bin") + "' '" +
                (s / "o.f32").string() + "'");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("fp4_codes_0xff.bin: element 2") &&
                        Contains("code 0xff is wider than format 'fp4_e2m1'"));
  CHECK_FALSE(fs::exists(s / "o.f32"));
  // .npy of uint8 codes.
  r = run_lpemu("convert --from fp4_e2m1 --to fp32 '" + regression("fp4_codes_0xff.npy") + "' '" +
                (s / "o.npy").string() + "'");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("fp4_codes_0xff.npy: element 2") && Contains("0xff is wider"));
  CHECK_FALSE(fs::exists(s / "o.npy"));
  // Packed input has no spare bits: the same bytes are 8 valid codes.
  r = run_lpemu("convert --packed --from fp4_e2m1 --to fp32 '" + regression("fp4_codes_0xff.bin") + "' '" +
                (s / "p.f32").string() + "'");
  CHECK(r.status == 0);
  CHECK(fs::file_size(s / "p.f32") == 8 * 4);
}

TEST_CASE("element, block and datapath names never shadow each other", "[cli][regression]") {
  Run r = run_lpemu("--formats-dir '" + regression("formats_block_alias_shadows_element") + "' formats list");
  CHECK(r.status == 2);
  CHECK_THAT(
      r.err,
      Contains("my_e4m3_block.toml: block format alias 'e4m3' is already the element format 'fp8_e4m3'"));
  r = run_lpemu("--formats-dir '" + regression("formats_element_named_like_block") + "' formats list");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("block format name 'mxfp4' is already the element format 'mxfp4'") &&
                        Contains("formats_element_named_like_block/element/mxfp4.toml"));
  r = run_lpemu("--formats-dir '" + regression("formats_datapath_named_fp32") + "' datapath list");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("fp32.toml: datapath name 'fp32' is reserved"));
}

TEST_CASE("a user hardware or shape file never replaces a built-in one", "[cli][regression]") {
  const std::string common = " --model stories260K --plan fp32";
  Run r = run_lpemu("cost --cost-dir '" + regression("cost_dir_reuses_h100_sxm") + "' --target h100_sxm" +
                    common);
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("cost_dir_reuses_h100_sxm/hardware/h100_sxm.toml: name = \"h100_sxm\"") &&
                        Contains("already defined by builtin:data/hardware/h100_sxm.toml"));
  r = run_lpemu("cost --target '" + regression("cost_dir_reuses_h100_sxm/hardware/h100_sxm.toml") + "'" +
                common);
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("already defined by builtin:data/hardware/h100_sxm.toml"));
  r = run_lpemu("cost --cost-dir '" + regression("cost_dir_reuses_shape") + "' --target h100_sxm" + common);
  CHECK(r.status == 2);
  CHECK_THAT(
      r.err,
      Contains("the model shape 'stories260K' is already defined by builtin:data/shapes/stories260K.toml"));
  // The shipped file itself, by path, is the built-in target.
  r = run_lpemu("cost --target '" + lpemu::test::source_path("data/hardware/h100_sxm.toml") + "'" + common);
  CHECK(r.status == 0);
}

TEST_CASE("an experiment whose text is a device fails instead of hanging", "[cli][regression]") {
  Scratch s("devzero");
  const Run r = run_lpemu("sweep '" + regression("experiment_text_dev_zero.toml") + "' --out '" +
                          (s / "out").string() + "'");
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("source.text' = \"/dev/zero\": expected an existing regular text file"));
}

TEST_CASE("encode takes a negative number without --, also for formats without infinities",
          "[cli][regression]") {
  // fp8_e4m3 has no infinity: -inf becomes its NaN by default (1'1111'111).
  const Run r = run_lpemu("encode fp8_e4m3 -inf");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Contains("0xff  1'1111'111"));
}

TEST_CASE("more commands fail when stdout cannot be written", "[cli][regression]") {
  CHECK(run_lpemu("cost --target h100_sxm --model stories260K --plan fp32", "/dev/full").status == 2);
  CHECK(run_lpemu("quantize --json --format fp8_e4m3 '" + regression("npy_ok4.npy") + "' /dev/null",
                  "/dev/full")
            .status == 2);
  CHECK(run_lpemu("datapath list", "/dev/full").status == 2);
  CHECK(run_lpemu("eval --model stories260K --plan fp32 --text '" +
                      lpemu::test::source_path("data/models/stories260K/paragraph.txt") + "'",
                  "/dev/full")
            .status == 2);
}

TEST_CASE("sweep merge never writes into a folder lpemu did not create", "[cli][regression]") {
  Scratch s("merge");
  fs::create_directories(s / "shard");
  fs::create_directories(s / "mine");
  std::ofstream(s / "mine" / "results.csv") << "my own table\n";
  const Run r =
      run_lpemu("sweep merge '" + (s / "shard").string() + "' --out '" + (s / "mine").string() + "'");
  CHECK(r.status == 2);
  CHECK(slurp(s / "mine" / "results.csv") == "my own table\n");
}

TEST_CASE("run sizes the KV cache by --steps, not by the model's seq_len", "[cli][regression]") {
  // seq_len = 2^30: a cache of seq_len positions would need about 1.3 TB.
  Scratch s("kv");
  const fs::path p = s / "model.h5";
  fs::copy_file(lpemu::test::source_path("data/models/stories260K/model.h5"), p);
  {
    lpemu::io::H5File f = lpemu::io::H5File::open_rw(p);
    f.set_attr("/", "seq_len", std::int64_t{1} << 30);
    f.close();
  }
  const Run r = run_lpemu("run --steps 4 --model '" + p.string() + "'");
  INFO(r.err);
  CHECK(r.status == 0);
}

TEST_CASE("a corrupt tokenizer string heap in model.h5 is an error, not a crash inside libhdf5",
          "[cli][regression]") {
  Scratch s("heap");
  const std::string bytes = slurp(lpemu::test::source_path("data/models/stories260K/model.h5"));
  // The global heap collection holding /tokenizer/pieces starts at byte 1088512; these bytes are
  // in the sizes of its first objects (flipped, libhdf5 copied far past the collection: SIGSEGV).
  const std::size_t heap = bytes.find("GCOL", 1000000);
  REQUIRE(heap == 1088512);
  for (const std::size_t at : {heap + 26, heap + 52, heap + 169}) {
    std::string b = bytes;
    b[at] = static_cast<char>(b[at] ^ 0xff);
    const fs::path p = s / "model.h5";
    std::ofstream(p, std::ios::binary | std::ios::trunc) << b;
    const Run r = run_lpemu("run --steps 2 --model '" + p.string() + "'");
    INFO("offset " << at << ": " << r.err);
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Contains(p.string() + ":tokenizer/pieces: string ") && Contains("(corrupt file?)"));
  }
}

namespace {

// A copy of the shipped model with `edit` applied to it (attributes or weights).
fs::path edited_model(const Scratch& s, const std::string& name,
                      const std::function<void(lpemu::io::H5File&)>& edit) {
  const fs::path p = s / name;
  fs::copy_file(lpemu::test::source_path("data/models/stories260K/model.h5"), p);
  lpemu::io::H5File f = lpemu::io::H5File::open_rw(p);
  edit(f);
  f.close();
  return p;
}

}  // namespace

TEST_CASE("impossible model hyper-parameters are refused by name", "[cli][regression]") {
  Scratch s("hyper");
  struct Case {
    const char* attr;
    double value;
    const char* says;
  };
  for (const Case c : {Case{"norm_eps", std::nan(""), "norm_eps = nan: expected a finite number >= 0"},
                       Case{"norm_eps", -1e-5, "norm_eps = -1e-05: expected a finite number >= 0"},
                       Case{"rope_theta", 0.0, "rope_theta = 0: expected a finite number > 0"},
                       Case{"rope_theta", -1.0, "rope_theta = -1: expected a finite number > 0"}}) {
    INFO(c.attr << " = " << c.value);
    const fs::path m = edited_model(s, std::string(c.attr) + std::to_string(c.value) + ".h5",
                                    [&](lpemu::io::H5File& f) { f.set_attr("/", c.attr, c.value); });
    const Run r = run_lpemu("eval --model '" + m.string() + "' --text '" +
                            lpemu::test::source_path("data/models/stories260K/paragraph.txt") + "' --json");
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Contains(m.filename().string()) && Contains(c.says));
  }
}

TEST_CASE("a NaN or Inf weight gives NaN metrics, never perfect agreement", "[cli][regression]") {
  Scratch s("nanweight");
  for (const float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    const fs::path m = edited_model(s, std::isnan(bad) ? "nan.h5" : "inf.h5", [&](lpemu::io::H5File& f) {
      lpemu::io::Tensor t = f.read_floats("layers/0/attention/wq");
      t.data[5] = bad;
      f.write_floats("layers/0/attention/wq", t.shape, t.data.data());
    });
    const Run r = run_lpemu("eval --model '" + m.string() + "' --plan h100_e4m3 --text '" +
                            lpemu::test::source_path("data/models/stories260K/paragraph.txt") + "' --json");
    REQUIRE(r.status == 0);
    const auto j = nlohmann::json::parse(r.out);
    INFO(r.out.substr(0, 400));
    // JSON writes NaN as null: every summary that compares the runs is unknown, not 0 or 1. (The
    // plan's own NLL may be finite: fp8_e4m3 with saturation turns an Inf weight into 448.)
    for (const char* k : {"ref_mean_nll", "mean_kl", "max_kl", "top1_agreement"}) {
      INFO(k);
      CHECK(j.at(k).is_null());
    }
  }
}

TEST_CASE("user integers are range-checked before arithmetic, with the limit named", "[cli][regression]") {
  const Run p = run_lpemu(
      "cost --target h100_sxm --model llama3_8b --system dgx_h100 --parallel tp=4294967296,pp=4294967296");
  CHECK(p.status == 2);
  CHECK_THAT(p.err, Contains("tp = 4294967296: expected at most 1048576"));
  for (const char* k : {"300000000", "1e11", "-1", "0"}) {
    INFO(k);
    const Run r = run_lpemu(std::string("datapath-error --k ") + k + " --trials 2");
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Contains("--k") && Contains("expected an integer in 1..1048576"));
  }
  for (const char* t : {"2e9", "2000000", "0"}) {
    INFO(t);
    const Run r = run_lpemu(std::string("datapath-error --k 16 --trials ") + t);
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Contains("--trials") && Contains("expected an integer in 1..1000000"));
  }
  const Run w = run_lpemu("datapath-error --k 1048576 --trials 1000");
  CHECK(w.status == 2);
  CHECK_THAT(w.err, Contains("trials x sum of k"));
  // Seeds are never wrapped (-5 -> 2^64 - 5) or clamped (a 23-digit number -> 2^64 - 1).
  for (const char* seed : {"-5", "-1", "99999999999999999999999", "1.5", "0x10"}) {
    INFO(seed);
    const Run r = run_lpemu(std::string("datapath-error --k 16 --trials 2 --seed ") + seed);
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Contains("--seed") && Contains("expected an integer in 0..18446744073709551615"));
    const Run e = run_lpemu(std::string("encode fp8_e4m3 0.3 --rounding stochastic --seed ") + seed);
    CHECK(e.status == 2);
  }
  const Run ok = run_lpemu("datapath-error --k 16 --trials 2 --seed 18446744073709551615 --json");
  CHECK(ok.status == 0);
}

TEST_CASE("an output dataset never replaces an input dataset, even with --force", "[cli][regression]") {
  Scratch s("alias");
  const fs::path h5 = s / "f.h5";
  {
    lpemu::io::H5File f = lpemu::io::H5File::open_rw(h5);
    const std::vector<float> v{1.0F, 2.5F, -3.0F, 0.3F};
    f.write_floats("a", {4}, v.data());
    f.write_floats("b", {2, 2}, v.data());
    f.close();
  }
  const std::string before = slurp(h5);
  for (const char* out : {":/a", "://a", ":a"}) {
    INFO(out);
    const Run q =
        run_lpemu("quantize --force --format fp8_e4m3 '" + h5.string() + ":/a' '" + h5.string() + out + "'");
    CHECK(q.status == 2);
    CHECK_THAT(q.err, Contains("the output is the input dataset"));
  }
  const Run g = run_lpemu("gemm --force --datapath ideal '" + h5.string() + ":/b' '" + h5.string() +
                          ":/b' '" + h5.string() + ":/b'");
  CHECK(g.status == 2);
  CHECK_THAT(g.err, Contains("the output is the input dataset"));
  CHECK(slurp(h5) == before);
  // Another dataset of the same file is fine.
  const Run other = run_lpemu("quantize --format fp8_e4m3 '" + h5.string() + ":/a' '" + h5.string() + ":/q'");
  CHECK(other.status == 0);
}

TEST_CASE("a format TOML starting with a UTF-8 byte-order mark loads", "[cli][regression]") {
  Scratch s("bom");
  fs::create_directories(s / "fmts");
  std::ofstream(s / "fmts" / "my_e3m2.toml", std::ios::binary)
      << "\xEF\xBB\xBFname = \"my_e3m2\"\nkind = \"float\"\nexponent_bits = 3\nmantissa_bits = 2\nbias = 3\n"
         "specials = \"none\"\nsubnormals = true\nsource = \"test\"\n";
  const Run r = run_lpemu("--formats-dir '" + (s / "fmts").string() + "' decode my_e3m2 0x0f");
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Contains("1.75"));  // 0b0'011'11 = 1.75 x 2^(3-3)
}

TEST_CASE("a write past the file-size limit names the failure, exits 2 and leaves nothing",
          "[cli][regression]") {
  Scratch s("fsize");
  const fs::path in = s / "x.npy";
  REQUIRE(run_lpemu("quantize --format fp8_e4m3 '" + regression("npy_normal_64x64.npy") + "' '" +
                    in.string() + "'")
              .status == 0);
  // 64 x 64 float32 = 16 KiB of data; `ulimit -f 8` allows 4 KiB per file.
  Scratch sh("fsize-sh");  // the script lives outside the folder checked for leftovers
  const auto limited = [&](const std::string& args) {
    std::ofstream(sh / "limited.sh") << "ulimit -f 8\nexec " << lpemu::test::lpemu_binary() << " " << args
                                     << "\n";
    return lpemu::test::run_shell("sh '" + (sh / "limited.sh").string() + "'");
  };
  const auto only_input_left = [&] {
    std::vector<std::string> left;
    for (const auto& e : fs::recursive_directory_iterator(s.dir))
      left.push_back(e.path().filename().string());
    return left;
  };
  struct Case {
    std::string args;
    const char* says;
  };
  for (const Case& c :
       {Case{"quantize --format fp8_e4m3 '" + in.string() + "' '" + (s / "q.npy").string() + "'", "q.npy"},
        Case{"quantize --format mxfp8_e4m3 '" + in.string() + "' '" + (s / "q.h5").string() + ":/q'", "q.h5"},
        Case{"convert --from fp32 --to fp16 '" + in.string() + "' '" + (s / "c.npy").string() + "'", "c.npy"},
        Case{"proposal fp8_e4m3 --out '" + (s / "pkg").string() + "'", "pkg"}}) {
    INFO(c.args);
    const Run r = limited(c.args);
    INFO(r.err);
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Contains("lpemu: error: ") && Contains(c.says));
    CHECK(only_input_left() == std::vector<std::string>{"x.npy"});
  }
}

TEST_CASE("a damaged attribute region of a model file is an error, never a crash or a hang",
          "[cli][regression]") {
  // Single-byte flips (x ^ 0xff) in the root object header of the shipped model.h5 (attribute
  // messages from byte 824): 975 overran a name into libhdf5's memcpy (SIGSEGV), 1027 and 1037 broke a
  // string's heap reference, 1799 set a string's character size to 0xff000001 (libhdf5 then filled
  // gigabytes: a hang). The others are further sizes, offsets and flags of the same messages.
  Scratch s("attrflip");
  const std::string model = slurp(lpemu::test::source_path("data/models/stories260K/model.h5"));
  for (const std::size_t at :
       {std::size_t{826}, std::size_t{900}, std::size_t{975}, std::size_t{1027}, std::size_t{1037},
        std::size_t{1039}, std::size_t{1053}, std::size_t{1109}, std::size_t{1750}, std::size_t{1751},
        std::size_t{1765}, std::size_t{1799}, std::size_t{1845}, std::size_t{1847}}) {
    INFO("byte " << at);
    std::string bytes = model;
    bytes[at] = static_cast<char>(bytes[at] ^ 0xff);
    const fs::path p = s / ("flip_" + std::to_string(at) + ".h5");
    std::ofstream(p, std::ios::binary) << bytes;
    const Run r = run_lpemu("run --model '" + p.string() + "' --steps 1");
    INFO(r.err);
    CHECK((r.status == 0 || r.status == 2));
    if (r.status == 2) CHECK_THAT(r.err, Contains(p.filename().string()));
  }
}

namespace {

// Every file under `dir` (relative path -> bytes): what a failed run must leave unchanged.
std::map<std::string, std::string> tree(const fs::path& dir) {
  std::map<std::string, std::string> files;
  if (!fs::exists(dir)) return files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string rel = fs::relative(e.path(), dir).generic_string();
    files[rel] = e.is_regular_file() ? slurp(e.path()) : std::string("<dir>");
  }
  return files;
}

// Runs `lpemu ARGS` with a file-size limit of 4 KiB (`ulimit -f 8`); the script lives in `sh`.
Run run_limited(const fs::path& sh, const std::string& args) {
  std::ofstream(sh / "limited.sh") << "ulimit -f 8\nexec " << lpemu::test::lpemu_binary() << " " << args
                                   << "\n";
  return lpemu::test::run_shell("sh '" + (sh / "limited.sh").string() + "'");
}

}  // namespace

TEST_CASE("a result that cannot be reported leaves no output, and a replaced output comes back",
          "[cli][regression]") {
  // Each command printed its result to a full stdout (exit 2) after its output file was in place.
  Scratch s("lost");
  const fs::path in = s / "in" / "x.npy";
  fs::create_directories(s / "in");
  fs::copy_file(regression("npy_normal_64x64.npy"), in);
  const fs::path out = s / "out";
  fs::create_directories(out);
  {
    lpemu::io::H5File f = lpemu::io::H5File::open_rw(out / "have.h5");
    const std::vector<float> v{1.0F, 2.0F};
    f.write_floats("a", {2}, v.data());
    f.close();
  }
  REQUIRE(run_lpemu("quantize --format fp8_e4m3 '" + in.string() + "' '" + (out / "q.npy").string() + "'")
              .status == 0);
  const auto before = tree(out);
  const std::string x = "'" + in.string() + "' ";
  for (const std::string& args :
       {"quantize --json --format fp8_e4m3 " + x + "'" + (out / "new.npy").string() + "'",
        "quantize --json --force --format fp4_e2m1 " + x + "'" + (out / "q.npy").string() + "'",
        "quantize --json --format mxfp8_e4m3 " + x + "'" + (out / "have.h5").string() + ":/b'",
        "quantize --json --format mxfp8_e4m3 " + x + "'" + (out / "new.h5").string() + ":/q' --packed '" +
            (out / "p.bin").string() + "'",
        "convert --json --from fp32 --to fp16 " + x + "'" + (out / "c.npy").string() + "'",
        "proposal fp8_e4m3 --json --out '" + (out / "pkg").string() + "'",
        "datapath-error --json --datapath ideal --k 16 --trials 2 --out '" + (out / "de").string() + "'",
        "sweep merge --json '" + (out / "none").string() + "' --out '" + (out / "m").string() + "'"}) {
    INFO(args);
    const Run r = run_lpemu(args, "/dev/full");
    INFO(r.err);
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Contains("lpemu: error: "));
    CHECK(tree(out) == before);
  }
}

TEST_CASE("sweep checks every plan before it computes or writes anything", "[cli][regression]") {
  Scratch s("gridnope");
  const Run r = run_lpemu("sweep '" + regression("experiment_grid_datapath_nope.toml") + "' --out '" +
                          (s / "o").string() + "'");
  INFO(r.err);
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("nope"));
  CHECK_FALSE(fs::exists(s / "o"));  // not even the folder: no plan was computed
}

TEST_CASE("a failed sweep merge leaves --out as it was", "[cli][regression]") {
  Scratch s("mergefail");
  const std::string exp = "'" + regression("experiment_two_plans.toml") + "'";
  for (const char* shard : {"0", "1"}) {
    const Run r = run_lpemu("sweep " + exp + " --shard " + std::string(shard) + "/2 --out '" +
                            (s / ("s" + std::string(shard))).string() + "'");
    INFO(r.err);
    REQUIRE(r.status == 0);
  }
  const std::string both = "'" + (s / "s0").string() + "' '" + (s / "s1").string() + "'";
  // A missing plan (shard 1 not given), a corrupt plan, a plan of another experiment, a full disk.
  fs::copy(s / "s1", s / "bad", fs::copy_options::recursive);
  fs::resize_file(s / "bad" / "plans" / "0001.h5", 100);
  fs::copy(s / "s1", s / "foreign", fs::copy_options::recursive);
  fs::copy_file(s / "s0" / "plans" / "0000.h5", s / "foreign" / "plans" / "0001.h5",
                fs::copy_options::overwrite_existing);
  Scratch sh("mergefail-sh");
  struct Case {
    std::string args;
    const char* says;
    bool limited;
  };
  for (const Case& c :
       {Case{"'" + (s / "s0").string() + "'", "is in none of the directories", false},
        Case{"'" + (s / "s0").string() + "' '" + (s / "bad").string() + "'", "0001.h5", false},
        Case{"'" + (s / "s0").string() + "' '" + (s / "foreign").string() + "'",
             "made by a different experiment", false},
        Case{both, "lpemu: error: ", true}}) {
    INFO(c.args);
    const std::string args = "sweep merge " + c.args + " --out '" + (s / "m").string() + "'";
    const Run r = c.limited ? run_limited(sh.dir, args) : run_lpemu(args);
    INFO(r.err);
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Contains(c.says));
    CHECK_FALSE(fs::exists(s / "m"));
    CHECK(tree(s.dir / "m").empty());
  }
  // Into an earlier merge's folder: a failure leaves it as it was.
  REQUIRE(run_lpemu("sweep merge " + both + " --out '" + (s / "m").string() + "'").status == 0);
  fs::remove(s / "m" / "plans" / "0001.h5");
  const auto before = tree(s / "m");
  const Run r = run_lpemu("sweep merge '" + (s / "s0").string() + "' '" + (s / "bad").string() + "' --out '" +
                          (s / "m").string() + "'");
  CHECK(r.status == 2);
  CHECK(tree(s / "m") == before);
  const Run lim = run_limited(sh.dir, "sweep merge " + both + " --out '" + (s / "m").string() + "'");
  CHECK(lim.status == 2);
  CHECK(tree(s / "m") == before);
}

TEST_CASE("a sweep stopped by the file-size limit names it and leaves no partial file", "[cli][regression]") {
  Scratch s("sweepfsize");
  Scratch sh("sweepfsize-sh");
  const Run r = run_limited(
      sh.dir, "sweep '" + regression("experiment_two_plans.toml") + "' --out '" + (s / "o").string() + "'");
  INFO(r.err);
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("lpemu: error: ") && Contains((s / "o").string()));
  // No plan result was completed: the folder this run created is gone with it.
  CHECK_FALSE(fs::exists(s / "o"));
}

TEST_CASE("output paths that cannot be folders and sequences past the context exit 2, naming them",
          "[cli][regression]") {
  Scratch s("paths");
  fs::create_symlink(s / "loop1", s / "loop2");
  fs::create_symlink(s / "loop2", s / "loop1");
  std::ofstream(s / "file") << "mine\n";
  struct Case {
    std::string args;
    std::string says;
  };
  for (const Case& c :
       {Case{"--formats-dir '" + (s / "loop1").string() + "' formats list", "loop1"},
        Case{"datapath-error --k 16 --trials 2 --out /dev/full", "/dev/full: not a directory"},
        Case{"datapath-error --k 16 --trials 2 --out '" + (s / "file").string() + "'",
             "file: not a directory"},
        Case{"proposal fp8_e4m3 --out /dev/null", "/dev/null: not a directory"},
        Case{"cost --target h100_sxm --model stories260K --plan fp32 --plot /dev/full",
             "/dev/full: not a directory"}}) {
    INFO(c.args);
    const Run r = run_lpemu(c.args);
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Contains("lpemu: error: ") && Contains(c.says));
  }
  CHECK(slurp(s / "file") == "mine\n");
  // 600 tokens through a model of seq_len 512 with --logits-out: an error, not exit 0 without the file.
  {
    std::ofstream tok(s / "f.npy", std::ios::binary);
    lpemu::io::write_npy_header(tok, "<i8", {600});
    for (std::int64_t i = 0; i < 600; ++i) {
      const std::int64_t id = i % 200;
      tok.write(reinterpret_cast<const char*>(&id), sizeof id);
    }
  }
  const Run e = run_lpemu("eval --model stories260K --plan fp32 --tokens '" + (s / "f.npy").string() +
                          "' --logits-out '" + (s / "lo.npy").string() + "'");
  CHECK(e.status == 2);
  CHECK_THAT(e.err, Contains("logits_out needs one sequence within the model's context"));
  CHECK_FALSE(fs::exists(s / "lo.npy"));
}

TEST_CASE("replay of a NaN activation reports NaN errors, never 0", "[cli][regression]") {
  Scratch s("replaynan");
  const fs::path acts = s / "acts.h5";
  fs::copy_file(lpemu::test::source_path("data/models/stories260K/activations.h5"), acts);
  {
    lpemu::io::H5File f = lpemu::io::H5File::open_rw(acts);
    lpemu::io::Tensor t = f.read_floats("layers/0/attention/qkv_input");
    t.data[3] = std::numeric_limits<float>::quiet_NaN();
    f.write_floats("layers/0/attention/qkv_input", t.shape, t.data.data());
    f.close();
  }
  const Run r = run_lpemu("replay --plan fp8_e4m3 --json --activations '" + acts.string() + "'");
  INFO(r.err);
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(r.out);
  const auto& row = j["rows"][0];
  REQUIRE(row["input"] == "layers/0/attention/qkv_input");
  CHECK(row["output_error"]["max_abs"].is_null());
  CHECK(row["output_error"]["sqnr_db"].is_null());
  CHECK(row["input_error"]["max_abs"].is_null());
}

namespace {

// Replaces (or adds) dataset `name` of `file` by an empty float32 one through the HDF5 C API: a null
// dataspace when `dims` is empty, else a simple dataspace of `dims` (one of them 0).
void write_empty_dataset(const fs::path& file, const std::string& name, const std::vector<hsize_t>& dims) {
  const hid_t f = fs::exists(file) ? H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)
                                   : H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(f >= 0);
  if (H5Lexists(f, name.c_str(), H5P_DEFAULT) > 0) REQUIRE(H5Ldelete(f, name.c_str(), H5P_DEFAULT) >= 0);
  const hid_t space = dims.empty() ? H5Screate(H5S_NULL)
                                   : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t ds = H5Dcreate2(f, name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(ds >= 0);
  REQUIRE(H5Dclose(ds) >= 0);
  REQUIRE(H5Sclose(space) >= 0);
  REQUIRE(H5Fclose(f) >= 0);
}

}  // namespace

TEST_CASE("an empty HDF5 dataset is a named error or an empty result, never one element",
          "[cli][regression]") {
  Scratch s("emptyh5");
  // quantize: a null dataspace is refused by name; a zero-size array quantizes to an empty array of
  // its shape, whose error statistics are unknown (null), not perfect.
  const fs::path in = s / "e.h5";
  write_empty_dataset(in, "null", {});
  write_empty_dataset(in, "zero", {0, 32});
  const Run q =
      run_lpemu("quantize --format fp8_e4m3 '" + in.string() + ":/null' '" + (s / "q.npy").string() + "'");
  CHECK(q.status == 2);
  CHECK_THAT(q.err, Contains("e.h5:/null: is empty (a null dataspace): expected an array"));
  CHECK_FALSE(fs::exists(s / "q.npy"));
  for (const char* fmt : {"fp8_e4m3", "mxfp4"}) {
    INFO(fmt);
    const Run z = run_lpemu("quantize --force --stats --json --format " + std::string(fmt) + " '" +
                            in.string() + ":/zero' '" + (s / "z.npy").string() + "'");
    INFO(z.err);
    REQUIRE(z.status == 0);
    const auto j = nlohmann::json::parse(z.out);
    CHECK(j["elements"] == 0);
    CHECK(j["stats"]["mse"].is_null());
    CHECK(j["stats"]["sqnr_db"].is_null());
    CHECK(j["stats"]["max_abs_error"].is_null());
    std::vector<std::size_t> shape;
    CHECK(lpemu::io::read_npy_floats(s / "z.npy", shape).empty());
    CHECK(shape == std::vector<std::size_t>{0, 32});
  }
  // replay: an activation of no token (null or [0, 64]) is refused by name.
  for (const bool null : {true, false}) {
    INFO("null dataspace: " << null);
    const fs::path acts = s / "acts.h5";
    fs::copy_file(lpemu::test::source_path("data/models/stories260K/activations.h5"), acts,
                  fs::copy_options::overwrite_existing);
    write_empty_dataset(acts, "layers/0/attention/qkv_input",
                        null ? std::vector<hsize_t>{} : std::vector<hsize_t>{0, 64});
    const Run r = run_lpemu("replay --plan fp8_e4m3 --json --activations '" + acts.string() + "'");
    CHECK(r.status == 2);
    CHECK_THAT(r.err, Contains("acts.h5") && Contains("layers/0/attention/qkv_input"));
    CHECK_THAT(r.err,
               Contains(null ? "is empty (a null dataspace)" : "holds 0 tokens: expected at least one"));
  }
  // a model whose weight is empty: eval and run refuse it, naming the dataset and its expected shape.
  for (const bool null : {true, false}) {
    INFO("null dataspace: " << null);
    const fs::path m = s / "model.h5";
    fs::copy_file(lpemu::test::source_path("data/models/stories260K/model.h5"), m,
                  fs::copy_options::overwrite_existing);
    write_empty_dataset(m, "layers/0/attention/wk",
                        null ? std::vector<hsize_t>{} : std::vector<hsize_t>{0, 64});
    for (const std::string& cmd :
         {"eval --plan fp8_e4m3 --text '" +
              lpemu::test::source_path("data/models/stories260K/paragraph.txt") + "' --model '",
          std::string("run --steps 2 --model '")}) {
      const Run r = run_lpemu(cmd + m.string() + "'");
      INFO(cmd);
      CHECK(r.status == 2);
      CHECK_THAT(r.err,
                 Contains("model.h5") && Contains("layers/0/attention/wk") && Contains("expected [32, 64]"));
    }
  }
}
