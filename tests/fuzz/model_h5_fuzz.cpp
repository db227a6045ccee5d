// libFuzzer target: the HDF5 model loader (the bytes become a scratch model.h5).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz/fuzz_support.hpp"
#include "lpemu/engine/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  static const fs::path file =
      fs::temp_directory_path() / ("lpemu_fuzz_model_" + std::to_string(::getpid()) + ".h5");
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  lpemu::test::expect_clean([&] { (void)lpemu::engine::load_model(file); });
  return 0;
}
