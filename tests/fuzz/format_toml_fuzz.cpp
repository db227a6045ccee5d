// libFuzzer target: the element-format TOML loader.
#include "fuzz/fuzz_support.hpp"
#include "lpemu/format/registry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  lpemu::test::expect_clean(
      [&] { (void)lpemu::format::parse_format_toml(lpemu::test::as_text(data, size), "fuzz.toml"); });
  return 0;
}
