// libFuzzer target: the safetensors header reader (the bytes become a scratch .safetensors file),
// then every tensor it accepts is read: offsets, shapes and sizes must all have been checked.
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz/fuzz_support.hpp"
#include "lpemu/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path file = lpemu::test::scratch_path("model.safetensors");
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  lpemu::test::expect_clean([&] {
    const lpemu::io::SafetensorsFile f = lpemu::io::SafetensorsFile::open(file);
    for (const auto& entry : f.entries()) (void)f.read_bytes(entry.first);
  });
  return 0;
}
