// libFuzzer target: the block-format TOML loader (names resolved against the built-in elements).
#include "fuzz/fuzz_support.hpp"
#include "lpemu/block/block_format.hpp"
#include "lpemu/format/registry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  lpemu::test::expect_clean([&] {
    (void)lpemu::block::parse_block_format_toml(lpemu::test::as_text(data, size), "fuzz.toml",
                                                lpemu::format::Registry::builtin());
  });
  return 0;
}
