// libFuzzer target: the datapath TOML loader.
#include "fuzz/fuzz_support.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/format/registry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  lpemu::test::expect_clean([&] {
    (void)lpemu::datapath::parse_datapath_toml(lpemu::test::as_text(data, size), "fuzz.toml",
                                               lpemu::format::Registry::builtin());
  });
  return 0;
}
