// Writing a float32 tensor to an .h5 file: lpemu's writer (io::write_h5_atomic: HDF5's core driver
// builds the file in memory, lpemu's AtomicFile puts the bytes on disk, fsyncs and renames) beside
// the in-run baseline, the writer it replaced (libhdf5 writing the temporary file on disk itself,
// then the same fsync and rename). Sizes: 1 MiB and 100 MiB of data. Files go to the system's
// temporary folder (its page cache and disk set the figures).
#include <H5Cpp.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "lpemu/io/hdf5.hpp"
#include "lpemu/io/output.hpp"

namespace {

namespace fs = std::filesystem;
using namespace lpemu;

fs::path target() {
  return fs::temp_directory_path() / ("lpemu-io-bench-" + std::to_string(::getpid()) + ".h5");
}

std::vector<float> values(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 1000) * 0.001F;
  return v;
}

// lpemu's writer: in memory, then one atomic write of the image.
void BM_WriteH5InMemory(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0)) / sizeof(float);
  const std::vector<float> v = values(n);
  const fs::path f = target();
  for (auto _ : state) {
    io::write_h5_atomic(f, io::OutputPolicy{true, {}}, false,
                        [&](io::H5File& h) { h.write_floats("/x", {n}, v.data()); });
  }
  fs::remove(f);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

// Baseline: the previous writer, libhdf5 writing the temporary file on disk (sec2 driver).
void BM_WriteH5OnDiskBaseline(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0)) / sizeof(float);
  const std::vector<float> v = values(n);
  const fs::path f = target();
  for (auto _ : state) {
    io::AtomicFile out(f, io::OutputPolicy{true, {}});
    out.close_stream();
    fs::remove(out.temp_path());
    {
      H5::H5File h(out.temp_path().string(), H5F_ACC_TRUNC);
      const hsize_t dims = n;
      H5::DataSet ds = h.createDataSet("/x", H5::PredType::IEEE_F32LE, H5::DataSpace(1, &dims));
      ds.write(v.data(), H5::PredType::NATIVE_FLOAT);
      ds.close();
      h.flush(H5F_SCOPE_GLOBAL);
      h.close();
    }
    out.commit();
  }
  fs::remove(f);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

BENCHMARK(BM_WriteH5OnDiskBaseline)
    ->Arg(1 << 20)
    ->Arg(100 << 20)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_WriteH5InMemory)->Arg(1 << 20)->Arg(100 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
