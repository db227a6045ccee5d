// libFuzzer target: the experiment TOML loader.
#include "fuzz/fuzz_support.hpp"
#include "lpemu/experiment/experiment.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  lpemu::test::expect_clean([&] {
    (void)lpemu::experiment::parse_experiment_toml(lpemu::test::as_text(data, size), "fuzz/experiment.toml");
  });
  return 0;
}
