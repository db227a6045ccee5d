// libFuzzer target: the precision-plan TOML loader (names checked against the built-ins).
#include "fuzz/fuzz_support.hpp"
#include "lpemu/block/block_format.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/quantizer.hpp"
#include "lpemu/format/registry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto quantizers = lpemu::engine::QuantizerFactory::standard(
      lpemu::format::Registry::builtin(), &lpemu::block::BlockRegistry::builtin());
  static const auto gemms =
      lpemu::engine::GemmFactory::with_datapaths(lpemu::datapath::DatapathRegistry::builtin());
  lpemu::test::expect_clean([&] {
    (void)lpemu::engine::parse_plan_toml(lpemu::test::as_text(data, size), "fuzz.toml", quantizers, gemms);
  });
  return 0;
}
