// libFuzzer target: the proposal MANIFEST reader of `proposal verify` (the bytes become
// DIR/MANIFEST of a scratch package; no results file exists, so a valid MANIFEST ends in IoError).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz/fuzz_support.hpp"
#include "lpemu/experiment/proposal.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  static const fs::path dir =
      fs::temp_directory_path() / ("lpemu_fuzz_manifest_" + std::to_string(::getpid()));
  static const bool made = fs::create_directories(dir) || true;
  (void)made;
  std::ofstream(dir / "MANIFEST", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  lpemu::test::expect_clean([&] { (void)lpemu::experiment::verify_proposal(dir, dir / "no_results.csv"); });
  return 0;
}
