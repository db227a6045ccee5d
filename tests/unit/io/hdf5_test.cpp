#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <H5Cpp.h>
#include <catch2/catch.hpp>

#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/io/hdf5.hpp"
#include "support/test_support.hpp"

namespace {

using namespace lpemu::io;

TEST_CASE("HDF5 tensors and attributes round-trip", "[io][unit]") {
  const lpemu::test::Scratch scratch("io_test");
  const auto& dir = scratch.dir;
  const auto file = dir / "t.h5";
  {
    H5File f = H5File::open_rw(file);
    const std::vector<float> v{1.5F, -2.0F, 3.25F, 0.0F, 5.0F, 6.0F};
    f.write_floats("/a/b/x", {2, 3}, v.data());
    f.set_attr("/a", "note", std::string("hello"));
    f.set_attr("/", "n", std::int64_t{7});
    f.write_strings("/s", {"one", "two"});
    f.close();  // a file open for writing reaches the disk when closed
  }
  H5File f = H5File::open(file);
  const Tensor t = f.read_floats("/a/b/x");
  REQUIRE(t.shape == std::vector<std::size_t>{2, 3});
  CHECK(t.data[2] == 3.25F);
  CHECK(f.attr_string("/a", "note") == "hello");
  CHECK(f.attr_int("/", "n") == 7);
  CHECK(f.read_strings("/s") == std::vector<std::string>{"one", "two"});
  CHECK(f.list("/a") == std::vector<std::string>{"b"});
  CHECK_THROWS_WITH(f.read_floats("/a/missing"), Catch::Contains("t.h5:/a/missing: no such dataset"));
  CHECK_THROWS_WITH(f.attr_double("/a", "zzz"), Catch::Contains("missing attribute 'zzz'"));
  CHECK_THROWS_AS(H5File::open(dir / "nope.h5"), lpemu::IoError);
}

TEST_CASE("16-bit float datasets write and read as their raw codes, in either byte order", "[io][unit]") {
  const lpemu::test::Scratch scratch("io_codes16");
  const auto& dir = scratch.dir;
  const auto file = dir / "t.h5";
  // Normal, subnormal, signed zero and largest finite values of both formats.
  const std::vector<float> v{1.5F, -2.0F, 0.0078125F, -0.0F, 3.0517578125e-05F, 65504.0F};
  {
    H5File f = H5File::open_rw(file);
    for (const auto& [name, kind] : {std::pair<std::string, std::string>{"/bf", "bf16"}, {"/h", "fp16"}}) {
      std::vector<std::uint16_t> codes(v.size());
      lpemu::format::encode(lpemu::format::Registry::builtin().get(kind), v, std::span<std::uint16_t>(codes));
      f.write_codes16(name, name == "/bf" ? std::vector<std::size_t>{2, 3} : std::vector<std::size_t>{3, 2},
                      codes.data(), kind);
    }
    f.write_floats("/f", {6}, v.data());
    f.close();
  }
  {  // IEEE binary16, big-endian, as another writer may store it.
    H5::H5File raw(file.string(), H5F_ACC_RDWR);
    const hsize_t dims[1] = {6};
    H5::FloatType be(H5::PredType::IEEE_F32BE);
    be.setFields(15, 10, 5, 0, 10);
    be.setPrecision(16);
    be.setSize(2);
    be.setEbias(15);
    H5::DataSet d16 = raw.createDataSet("/be", be, H5::DataSpace(1, dims));
    d16.write(v.data(), H5::PredType::NATIVE_FLOAT);
  }
  const H5File f = H5File::open(file);
  for (const auto& [name, kind] :
       {std::pair<std::string, std::string>{"/bf", "bf16"}, {"/h", "fp16"}, {"/be", "fp16"}}) {
    INFO(name);
    const auto c = f.read_codes16(name);
    REQUIRE(c);
    CHECK(c->kind == kind);
    CHECK(c->shape == f.shape(name));
    const auto& fmt = lpemu::format::Registry::builtin().get(kind);
    REQUIRE(c->codes.size() == v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      INFO(i);
      CHECK(c->codes[i] == lpemu::format::encode(fmt, v[i]));
    }
  }
  for (const auto& [name, kind] : {std::pair<std::string, std::string>{"/bf", "bf16"}, {"/h", "fp16"}}) {
    std::vector<float> q(v.size());  // the values the codes hold, widened exactly
    lpemu::format::quantize(lpemu::format::Registry::builtin().get(kind), v, std::span<float>(q));
    CHECK(f.read_floats(name).data == q);
  }
  CHECK_FALSE(f.read_codes16("/f"));
  CHECK_THROWS_WITH(f.read_codes16("/missing"), Catch::Contains("t.h5:/missing: no such dataset"));
}

TEST_CASE("the shipped stories260K model file reads", "[io][unit]") {
  const auto path = lpemu::test::source_path("data/models/stories260K/model.h5");
  REQUIRE(std::filesystem::exists(path));
  H5File f = H5File::open(path);
  CHECK(f.attr_int("/", "dim") == 64);
  CHECK(f.shape("/tok_embeddings") == std::vector<std::size_t>{512, 64});
  CHECK(f.read_strings("/tokenizer/pieces").size() == 512);
}

TEST_CASE("dataset references parse", "[io][unit]") {
  const auto r = parse_dataset_ref("x/acts.h5:/layers/0/w");
  REQUIRE(r.has_value());
  CHECK(r->file == "x/acts.h5");
  CHECK(r->dataset == "/layers/0/w");
  CHECK_FALSE(parse_dataset_ref("plain.npy").has_value());
}

}  // namespace

namespace {

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("an HDF5 dataset declaring more data than the file holds is refused before allocation",
          "[io][unit][regression]") {
  const lpemu::test::Scratch scratch("io_declared");
  const auto& dir = scratch.dir;
  const auto file = dir / "t.h5";
  const std::vector<float> v(12345, 1.0F);
  {
    H5File f = H5File::open_rw(file);
    f.write_floats("/x", {12345}, v.data());
    f.close();
  }
  // Patch the dataspace (current and maximum size, 8-byte little endian) to 2^40 elements.
  std::string bytes = read_all(file);
  const std::string from("\x39\x30\0\0\0\0\0\0", 8), to("\0\0\0\0\0\x01\0\0", 8);
  int patched = 0;
  for (auto at = bytes.find(from); at != std::string::npos; at = bytes.find(from, at + 8)) {
    bytes.replace(at, 8, to);
    ++patched;
  }
  REQUIRE(patched >= 1);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  const H5File f = H5File::open(file);
  CHECK_THROWS_AS(f.read_floats("/x"), lpemu::IoError);
  CHECK_THROWS_WITH(f.read_floats("/x"),
                    Catch::Matchers::Contains("declares 1099511627776 elements of 4 bytes"));
  CHECK_THROWS_WITH(f.read_doubles("/x"), Catch::Matchers::Contains("corrupt or truncated file?"));
}

TEST_CASE("read_floats_into reads every layout into the caller's buffer as read_floats does", "[io][unit]") {
  const lpemu::test::Scratch scratch("io_read_into");
  const auto file = scratch.dir / "t.h5";
  constexpr std::size_t kRows = 37, kCols = 53;
  std::vector<float> v(kRows * kCols);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.37F - 101.0F;
  {
    H5File f = H5File::open_rw(file);
    f.write_floats("/contiguous", {kRows, kCols}, v.data());  // the raw fast path
    f.close();
  }
  {  // Layouts and types the raw path must leave to libhdf5: chunked + deflate, big-endian, float64, int.
    H5::H5File raw(file.string(), H5F_ACC_RDWR);
    const hsize_t dims[2] = {kRows, kCols};
    const hsize_t chunk[2] = {8, 16};
    H5::DSetCreatPropList plist;
    plist.setChunk(2, chunk);
    plist.setDeflate(4);
    raw.createDataSet("/chunked", H5::PredType::NATIVE_FLOAT, H5::DataSpace(2, dims), plist)
        .write(v.data(), H5::PredType::NATIVE_FLOAT);
    raw.createDataSet("/big_endian", H5::PredType::IEEE_F32BE, H5::DataSpace(2, dims))
        .write(v.data(), H5::PredType::NATIVE_FLOAT);
    raw.createDataSet("/double", H5::PredType::IEEE_F64LE, H5::DataSpace(2, dims))
        .write(v.data(), H5::PredType::NATIVE_FLOAT);
    std::vector<int> ints(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) ints[i] = static_cast<int>(i) - 999;
    raw.createDataSet("/ints", H5::PredType::STD_I32LE, H5::DataSpace(2, dims))
        .write(ints.data(), H5::PredType::NATIVE_INT);
  }
  const H5File f = H5File::open(file);
  for (const std::string name : {"/contiguous", "/chunked", "/big_endian", "/double", "/ints"}) {
    INFO(name);
    const Tensor expected = f.read_floats(name);  // libhdf5's own conversion: the reference
    std::vector<float> got(kRows * kCols, -1.0F);
    f.read_floats_into(name, got);
    CHECK(got == expected.data);
  }
  std::vector<float> got(v.size());
  f.read_floats_into("/contiguous", got);
  CHECK(got == v);
  // Several threads reading one file at once get every dataset whole.
  std::vector<std::vector<float>> outs(8, std::vector<float>(v.size()));
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < outs.size(); ++t) {
    threads.emplace_back(
        [&f, &outs, t] { f.read_floats_into(t % 2 == 0 ? "/contiguous" : "/chunked", outs[t]); });
  }
  for (auto& t : threads) t.join();
  for (const auto& o : outs) CHECK(o == v);
  std::vector<float> short_buffer(v.size() - 1);
  CHECK_THROWS_WITH(f.read_floats_into("/contiguous", short_buffer),
                    Catch::Contains("t.h5:/contiguous: holds 1961 elements, expected 1960"));
  CHECK_THROWS_WITH(f.read_floats_into("/missing", got), Catch::Contains("t.h5:/missing: no such dataset"));
}

namespace {

std::vector<std::string> files_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("an .h5 file built in memory reads back through libhdf5's disk driver, whole", "[io][unit]") {
  const lpemu::test::Scratch scratch("io_mem");
  const auto file = scratch.dir / "m.h5";
  // 3 Mi floats (12 MiB) cross many of the core driver's 1 MiB increments.
  std::vector<float> big(std::size_t{3} << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.25F - 7.0F;
  const std::vector<std::int64_t> ints{-5, 0, 1LL << 40};
  const std::vector<std::string> strs{"a", "", "üñí"};
  write_h5_atomic(file, OutputPolicy{false, {}}, false, [&](H5File& f) {
    f.write_floats("/g/big", {big.size() / 4, 4}, big.data());
    f.write_ints("/ints", {3}, ints.data());
    f.write_strings("/s", strs);
    f.set_attr("/g", "note", std::string("hello"));
    f.set_attr("/", "x", 2.5);
  });
  CHECK(files_in(scratch.dir) == std::vector<std::string>{"m.h5"});
  {
    // The bytes on disk are the whole file: libhdf5 opens it with its disk (sec2) driver and its
    // end of allocated space is the file's size.
    H5::H5File raw(file.string(), H5F_ACC_RDONLY);
    CHECK(raw.getFileSize() == std::filesystem::file_size(file));
  }
  {
    const H5File f = H5File::open(file);
    const Tensor t = f.read_floats("/g/big");
    CHECK(t.shape == std::vector<std::size_t>{big.size() / 4, 4});
    CHECK(t.data == big);
    CHECK(f.read_ints("/ints") == ints);
    CHECK(f.read_strings("/s") == strs);
    CHECK(f.attr_string("/g", "note") == "hello");
    CHECK(f.attr_double("/", "x") == 2.5);
  }
  // keep_existing: a dataset added to the file in memory; everything before stays.
  const std::vector<float> more{1.0F, -0.0F};
  write_h5_atomic(file, OutputPolicy{true, {}}, true,
                  [&](H5File& f) { f.write_floats("/more", {2}, more.data()); });
  {
    const H5File f = H5File::open(file);
    CHECK(f.read_floats("/more").data == more);
    CHECK(f.read_floats("/g/big").data == big);
    CHECK(f.read_strings("/s") == strs);
  }
  // A fill that fails leaves the file as it was and nothing else; an unclosed file writes nothing.
  const auto before = std::filesystem::file_size(file);
  CHECK_THROWS_AS(write_h5_atomic(file, OutputPolicy{true, {}}, true,
                                  [&](H5File& f) {
                                    f.write_floats("/other", {2}, more.data());
                                    throw lpemu::IoError("stop");
                                  }),
                  lpemu::IoError);
  CHECK(files_in(scratch.dir) == std::vector<std::string>{"m.h5"});
  CHECK(std::filesystem::file_size(file) == before);
  { H5File f = H5File::open_rw(scratch.dir / "never.h5"); }
  CHECK(files_in(scratch.dir) == std::vector<std::string>{"m.h5"});
}
