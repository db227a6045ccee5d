// libFuzzer target: the Hugging Face tokenizer.json reader (BPE model, added tokens, normalizers,
// pre-tokenizers, decoders, post-processor), then an encode and decode of a fixed text with it.
#include <string>

#include "fuzz/fuzz_support.hpp"
#include "lpemu/engine/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  lpemu::test::expect_clean([&] {
    const lpemu::engine::Tokenizer t = lpemu::engine::Tokenizer::from_hf_json(
        std::string(lpemu::test::as_text(data, size)), "fuzz.json", 0, 0);
    const auto ids = t.encode("Hello world, <s> héllo\n 123", true, true);
    (void)t.decode(ids);
  });
  return 0;
}
