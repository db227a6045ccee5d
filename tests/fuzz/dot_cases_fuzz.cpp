// libFuzzer target: the case-file reader of `lpemu dot --cases` (CSV header, hex codes, block
// scales, expected_result, row), then the dot product and its exact value for every case read,
// on an unscaled FP16, an FP8 and a block-scaled MXFP4 datapath.
#include <sstream>
#include <string>

#include "fuzz/fuzz_support.hpp"
#include "lpemu/datapath/dot.hpp"
#include "lpemu/datapath/dot_cases.hpp"
#include "lpemu/datapath/exact.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(lpemu::test::as_text(data, size));
  const auto& reg = lpemu::datapath::DatapathRegistry::builtin();
  for (const char* name : {"v100_fp16_fp32", "h100_e4m3_fp32", "b200_mxfp4_fp32"}) {
    const lpemu::datapath::Datapath& dp = reg.get(name);
    std::istringstream in(text);
    lpemu::test::expect_clean([&] {
      lpemu::datapath::read_dot_cases(in, "fuzz.csv", dp, {}, [&](const lpemu::datapath::DotCase& k) {
        const auto scales = k.scales();
        (void)lpemu::datapath::dot(dp, k.a, k.b, k.c, scales, k.row.value_or(0));
        (void)lpemu::datapath::exact_dot(dp, k.a, k.b, k.c, scales).to_string(25);
      });
    });
  }
  return 0;
}
