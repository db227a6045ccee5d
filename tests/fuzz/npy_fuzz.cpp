// libFuzzer target: the .npy header reader (strict dict parse, shape overflow, declared size).
#include <sstream>
#include <string>

#include "fuzz/fuzz_support.hpp"
#include "lpemu/io/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(lpemu::test::as_text(data, size)));
  lpemu::test::expect_clean([&] {
    const lpemu::io::NpyHeader h = lpemu::io::read_npy_header(in, "fuzz.npy");
    (void)h.count();
  });
  return 0;
}
