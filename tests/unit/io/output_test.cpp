// Atomic outputs (io/output.hpp) and the model loader's attribute checks against the stored data.
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "lpemu/engine/model.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/hdf5.hpp"
#include "lpemu/io/output.hpp"
#include "support/test_support.hpp"

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

using lpemu::test::Scratch;
using lpemu::test::slurp;

std::size_t entries(const fs::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

}  // namespace

TEST_CASE("AtomicFile writes under a temporary name and renames on commit", "[io][output]") {
  Scratch s("atomic");
  const fs::path t = s.dir / "a.txt";
  {
    lpemu::io::AtomicFile f(t, {});
    f.stream() << "partial";
    CHECK_FALSE(fs::exists(t));  // nothing under the final name before commit
  }
  CHECK(entries(s.dir) == 0);  // an abandoned write leaves nothing behind
  lpemu::io::write_file_atomic(t, "one", {});
  CHECK(slurp(t) == "one");
  CHECK_THROWS_WITH(lpemu::io::write_file_atomic(t, "two", {}),
                    t.string() + ": output exists; pass --force to overwrite it");
  lpemu::io::write_file_atomic(t, "two", {true, {}});
  CHECK(slurp(t) == "two");
  CHECK_THROWS_WITH(lpemu::io::write_file_atomic(t, "three", {true, {s.dir / "." / "a.txt"}}),
                    Contains("is also an input of this command"));
  CHECK(slurp(t) == "two");
  CHECK_THROWS_AS(lpemu::io::write_file_atomic(s.dir, "x", {true, {}}), lpemu::IoError);
  CHECK_THROWS_WITH(lpemu::io::write_file_atomic("/dev/full", "x", {}),
                    "/dev/full: write failed (disk full or device error?)");
  CHECK(entries(s.dir) == 1);
}

TEST_CASE("check_output_dir refuses a folder lpemu did not write", "[io][output]") {
  Scratch s("dir");
  lpemu::io::check_output_dir(s.dir / "new", "MANIFEST");  // missing: fine
  lpemu::io::check_output_dir(s.dir, "MANIFEST");          // empty: fine
  std::ofstream(s.dir / "report.md") << "mine";
  CHECK_THROWS_WITH(lpemu::io::check_output_dir(s.dir, "MANIFEST"), Contains("was not written by lpemu"));
  std::ofstream(s.dir / "MANIFEST") << "fingerprint x\n";
  lpemu::io::check_output_dir(s.dir, "MANIFEST");
}

TEST_CASE("read_input is bounded and refuses folders", "[io][output]") {
  CHECK_THROWS_WITH(lpemu::io::read_input("/dev/zero", 1000),
                    "/dev/zero: larger than 1000 bytes; expected a regular text file");
  const Scratch s("folder");
  CHECK_THROWS_WITH(lpemu::io::read_input(s.dir), Contains("is a directory"));
}

TEST_CASE("model attributes are range-checked against the stored data", "[io][engine][regression]") {
  Scratch s("model");
  const fs::path shipped = lpemu::test::source_path("data/models/stories260K/model.h5");
  struct Case {
    const char* attr;
    std::int64_t value;
    const char* says;
  };
  for (const Case c : {Case{"dim", (std::int64_t{1} << 32) + 64,
                            "root attribute 'dim' = 4294967360: expected an integer in 0..2147483647"},
                       Case{"n_layers", 2, "root attribute 'n_layers' = 2: the file stores 5 layers"},
                       Case{"seq_len", 0, "model.h5: seq_len = 0: expected a positive integer"},
                       Case{"seq_len", -3, "root attribute 'seq_len' = -3"},
                       Case{"hidden_dim", 0, "feed_forward/w1' has shape [172, 64], expected [0, 64]"}}) {
    INFO(c.attr << " = " << c.value);
    const fs::path p = s.dir / "model.h5";
    fs::copy_file(shipped, p, fs::copy_options::overwrite_existing);
    {
      lpemu::io::H5File f = lpemu::io::H5File::open_rw(p);
      f.set_attr("/", c.attr, c.value);
      f.close();
    }
    CHECK_THROWS_WITH(lpemu::engine::load_model(p), Contains(c.says));
  }
}
