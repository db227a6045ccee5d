// tokenizer.json tokenizers (lpemu/engine/bpe_tokenizer.hpp) on small tokenizer.json files built here
// in the Hugging Face `tokenizers` schema. Each family is checked against token ids published for
// the real tokenizer: the test's vocabulary fragment puts the published pieces at their published
// ids (byte pieces at the ids their real vocabularies give them) and adds the merges that build
// them, so the normalizer, pre-tokenizer regex, byte mapping, BPE and post-processor must all
// agree with the real pipeline for the published ids to come out.
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "lpemu/engine/bpe_tokenizer.hpp"
#include "lpemu/engine/tokenizer.hpp"
#include "lpemu/error.hpp"

namespace {

using lpemu::engine::BpeTokenizer;
using lpemu::engine::Tokenizer;
using nlohmann::json;

std::string utf8(unsigned cp) {
  std::string o;
  if (cp < 0x80) {
    o += static_cast<char>(cp);
  } else {
    o += static_cast<char>(0xC0 | (cp >> 6));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return o;
}

// Reference: bytes_to_unicode() of openai/gpt-2 src/encoder.py, transcribed: bs lists the
// printable bytes, the rest get 256+n; GPT-2's encoder.json gives byte piece i the id i of this order.
std::vector<std::pair<int, std::string>> gpt2_byte_pieces() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<int> cs = bs;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
      bs.push_back(b);
      cs.push_back(256 + n++);
    }
  }
  std::vector<std::pair<int, std::string>> out(256);
  for (std::size_t i = 0; i < bs.size(); ++i) out[i] = {bs[i], utf8(static_cast<unsigned>(cs[i]))};
  return out;  // out[id] = {byte, piece}
}

// Byte-level vocabulary: the 256 byte pieces at their GPT-2 ids, then `extra` pieces built by
// `merges` (left-to-right order = rank), new pieces numbered from `next` unless given an id.
json byte_level(const std::vector<std::pair<std::string, std::string>>& merges,
                const std::vector<std::pair<std::string, int>>& fixed, int next) {
  json vocab = json::object();
  const auto pieces = gpt2_byte_pieces();
  for (std::size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i].second] = static_cast<int>(i);
  for (const auto& [p, id] : fixed) vocab[p] = id;
  json m = json::array();
  for (const auto& [l, r] : merges) {
    m.push_back(l + " " + r);
    if (!vocab.contains(l + r)) vocab[l + r] = next++;
  }
  return {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}, {"byte_fallback", false}};
}

// Merges that build `word` left to right from its code points (w1 w2 -> w1w2, then + w3, ...).
void chain(std::vector<std::pair<std::string, std::string>>& merges, const std::vector<std::string>& parts) {
  std::string acc = parts[0];
  for (std::size_t i = 1; i < parts.size(); ++i) {
    merges.emplace_back(acc, parts[i]);
    acc += parts[i];
  }
}

const std::string G = "\xC4\xA0";  // 'Ġ' = U+0120, GPT-2's piece for the space byte

const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json gpt2_json(const json& model) {
  return {{"version", "1.0"},
          {"added_tokens", json::array({{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}})},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"post_processor",
           {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
          {"decoder",
           {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model", model}};
}

json llama3_json(json model) {
  model["ignore_merges"] = true;
  return {
      {"version", "1.0"},
      {"added_tokens", json::array({{{"id", 128000}, {"content", "<|begin_of_text|>"}, {"special", true}},
                                    {{"id", 128001}, {"content", "<|end_of_text|>"}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", json::array({{{"type", "Split"},
                                        {"pattern", {{"Regex", kLlama3Pattern}}},
                                        {"behavior", "Isolated"},
                                        {"invert", false}},
                                       {{"type", "ByteLevel"},
                                        {"add_prefix_space", false},
                                        {"trim_offsets", true},
                                        {"use_regex", false}}})}}},
      {"post_processor",
       {{"type", "Sequence"},
        {"processors",
         json::array(
             {{{"type", "ByteLevel"},
               {"add_prefix_space", true},
               {"trim_offsets", false},
               {"use_regex", true}},
              {{"type", "TemplateProcessing"},
               {"single", json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                       {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
               {"pair", json::array()},
               {"special_tokens",
                {{"<|begin_of_text|>",
                  {{"id", "<|begin_of_text|>"},
                   {"ids", {128000}},
                   {"tokens", {"<|begin_of_text|>"}}}}}}}})}}},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model", model}};
}

const std::string S = "\xE2\x96\x81";  // '▁'

// Llama 2 / Mistral tokenizer.json layout: <unk> <s> </s>, <0x00>..<0xFF> at 3..258, then pieces.
json llama2_json(const std::vector<std::pair<std::string, int>>& pieces,
                 const std::vector<std::pair<std::string, std::string>>& merges) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    vocab[buf] = 3 + b;
  }
  for (const auto& [p, id] : pieces) vocab[p] = id;
  json m = json::array();
  for (const auto& [l, r] : merges) m.push_back(json::array({l, r}));  // newer list-of-pairs spelling
  return {{"version", "1.0"},
          {"added_tokens", json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                        {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                        {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             json::array({{{"type", "Prepend"}, {"prepend", S}},
                          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", S}}})}}},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
            {"pair", json::array()},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", S}}}, {"content", " "}},
                                      {{"type", "ByteFallback"}},
                                      {{"type", "Fuse"}},
                                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", "<unk>"},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"vocab", vocab},
            {"merges", m}}}};
}

const std::vector<std::string> kRoundTrip = {
    "Hello world",
    "  leading, double  and trailing spaces  ",
    "tabs\tand\nnew lines\r\n\n",
    "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",  // café naïve 日本語
    "emoji \xF0\x9F\x99\x82\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD and \xE2\x9D\xA4\xEF\xB8\x8F",  // 🙂👍🏽
                                                                                            // ❤️
    "it's 12345 o'clock!!",
    "",
};

}  // namespace

TEST_CASE("GPT-2 byte-level BPE gives the published ids", "[engine][tokenizer][hf]") {
  // Published: transformers GPT2Tokenizer docstring (tokenization_gpt2.py):
  //   tokenizer("Hello world")["input_ids"] == [15496, 995]; tokenizer(" Hello world") == [18435, 995].
  std::vector<std::pair<std::string, std::string>> merges;
  chain(merges, {"H", "e", "l", "l", "o"});
  chain(merges, {G + "H", "e", "l", "l", "o"});
  merges.insert(merges.begin(), {G, "H"});
  chain(merges, {G, "w", "o", "r", "l", "d"});
  merges.emplace_back(G, G);  // must not fire across the regex split of "a  b"
  const auto t = BpeTokenizer::parse(
      gpt2_json(byte_level(merges, {{"Hello", 15496}, {G + "world", 995}, {G + "Hello", 18435}}, 60000))
          .dump(),
      "gpt2.json");
  CHECK(t->encode("Hello world", true) == std::vector<int>{15496, 995});
  CHECK(t->encode(" Hello world", true) == std::vector<int>{18435, 995});
  CHECK(t->encode(" ", false) == std::vector<int>{220});  // 'Ġ' is id 220 in GPT-2's encoder.json
  // GPT-2's regex: "\s+(?!\S)" leaves the last space to the next word: "a  b" -> "a", " ", " b".
  CHECK(t->encode("a  b", false) == std::vector<int>{64, 220, 220, 65});
  CHECK(t->encode("<|endoftext|>Hello", false) == std::vector<int>{50256, 15496});
  CHECK(t->decode({18435, 995}) == " Hello world");
}

TEST_CASE("Llama 3 byte-level BPE gives the published ids", "[engine][tokenizer][hf]") {
  // Published: OpenAI cookbook "How to count tokens with tiktoken": cl100k_base encodes
  // "tiktoken is great!" as [83, 1609, 5963, 374, 2294, 0]; Llama 3's tokenizer keeps cl100k_base's
  // 100k ids and pattern and adds <|begin_of_text|> = 128000 (meta-llama/llama3 tokenizer.py).
  std::vector<std::pair<std::string, std::string>> merges = {
      {"i", "k"}, {"e", "n"}, {"t", "o"}, {"to", "k"}, {"tok", "en"}, {G, "i"}, {G + "i", "s"}};
  chain(merges, {G, "g", "r", "e", "a", "t"});
  // Digits: the pattern splits "12345" into "123" and "45", so "3 4" (rank first) must not fire.
  merges.insert(merges.begin(), {"3", "4"});
  merges.emplace_back("1", "2");
  merges.emplace_back("4", "5");
  merges.emplace_back("12", "3");
  const json model =
      byte_level(merges, {{"ik", 1609}, {"token", 5963}, {G + "is", 374}, {G + "great", 2294}}, 70000);
  const auto t = BpeTokenizer::parse(llama3_json(model).dump(), "llama3.json");
  CHECK(t->encode("tiktoken is great!", true) == std::vector<int>{128000, 83, 1609, 5963, 374, 2294, 0});
  const std::vector<int> digits = t->encode("12345", false);
  CHECK(digits == std::vector<int>{t->find("123"), t->find("45")});
  // ignore_merges: a word that is itself a vocabulary piece is one token even without a merge path.
  json m2 = model;
  m2["vocab"]["tiktoken"] = 99999;
  const auto t2 = BpeTokenizer::parse(llama3_json(m2).dump(), "llama3b.json");
  CHECK(t2->encode("tiktoken", false) == std::vector<int>{99999});
  CHECK(t->decode(t->encode("tiktoken is great!", false)) == "tiktoken is great!");
}

TEST_CASE("Llama 2 SentencePiece-style BPE gives the published ids", "[engine][tokenizer][hf]") {
  // Published: transformers LlamaTokenizer docstring (tokenization_llama.py, `legacy`):
  //   huggyllama/llama-7b, legacy=True: encode("Hello <s>.") == [1, 15043, 29871, 1, 869]
  //   (15043 '▁Hello', 29871 '▁', 869 '▁.'); "Hello world" == [1, 15043, 3186] ('▁world' 3186).
  // Byte fallback: Llama 2's <0xHH> pieces are ids 3 + HH.
  std::vector<std::pair<std::string, std::string>> merges;
  chain(merges, {S, "H", "e", "l", "l", "o"});
  chain(merges, {S, "w", "o", "r", "l", "d"});
  merges.emplace_back(S, ".");
  std::vector<std::pair<std::string, int>> pieces = {
      {S, 29871}, {S + "Hello", 15043}, {S + "world", 3186}, {S + ".", 869}, {".", 29889}};
  int next = 30000;
  for (const auto& [l, r] : merges) {
    const std::string merged = l + r;  // a name of its own: clang 14 cannot capture a structured binding
    if (std::none_of(pieces.begin(), pieces.end(), [&](const auto& p) { return p.first == merged; })) {
      pieces.emplace_back(merged, next++);
    }
  }
  for (const char* c : {"H", "e", "l", "o", "w", "r", "d", " ", "a"}) pieces.emplace_back(c, next++);
  const auto t = BpeTokenizer::parse(llama2_json(pieces, merges).dump(), "llama2.json");
  CHECK(t->encode("Hello <s>.", true) == std::vector<int>{1, 15043, 29871, 1, 869});
  CHECK(t->encode("Hello world", true) == std::vector<int>{1, 15043, 3186});
  // "🙂" (F0 9F 99 82) is not in the vocabulary: four byte pieces.
  CHECK(t->encode("\xF0\x9F\x99\x82", false) ==
        std::vector<int>{29871, 3 + 0xF0, 3 + 0x9F, 3 + 0x99, 3 + 0x82});
  CHECK(t->decode({1, 15043, 3186}) == "<s> Hello world");  // added tokens are not stripped
  // Through the engine's Tokenizer interface (what `lpemu eval`/`run` use): BOS/EOS are dropped.
  const Tokenizer tk = Tokenizer::from_hf_json(llama2_json(pieces, merges).dump(), "llama2.json", 1, 2);
  CHECK(tk.encode("Hello world") == std::vector<int>{1, 15043, 3186});
  CHECK(tk.decode(std::vector<int>{1, 15043, 3186, 2}) == "Hello world");
  CHECK(tk.decode(1, 15043) + tk.decode(15043, 3186) == "Hello world");
}

TEST_CASE("tokenizer.json tokenizers round-trip Unicode, whitespace and emoji", "[engine][tokenizer][hf]") {
  std::vector<std::pair<std::string, std::string>> merges;
  chain(merges, {G, "a", "n", "d"});
  chain(merges, {"H", "e", "l", "l", "o"});
  const auto gpt2 = BpeTokenizer::parse(gpt2_json(byte_level(merges, {}, 300)).dump(), "rt-gpt2.json");
  const auto llama3 = BpeTokenizer::parse(llama3_json(byte_level(merges, {}, 300)).dump(), "rt-llama3.json");
  std::vector<std::pair<std::string, int>> pieces;
  int next = 259;
  for (const char* c : {"a", "n", "d", "e", "o", "l", "H", "\xC3\xA9"}) pieces.emplace_back(c, next++);
  pieces.emplace_back(S, next++);  // real SentencePiece vocabularies always hold the space piece
  pieces.emplace_back(S + "a", next++);
  const auto llama2 = BpeTokenizer::parse(llama2_json(pieces, {{S, "a"}}).dump(), "rt-llama2.json");
  for (const auto& text : kRoundTrip) {
    INFO("text: \"" << text << "\"");
    CHECK(gpt2->decode(gpt2->encode(text, false)) == text);
    CHECK(llama3->decode(llama3->encode(text, false)) == text);
    CHECK(llama2->decode(llama2->encode(text, false)) == text);
  }
  // Byte-level pieces cover every byte: one id per byte when there are no merges.
  CHECK(gpt2->encode("\xF0\x9F\x99\x82", false).size() == 4);
}

TEST_CASE("tokenizer.json outside the supported subset is refused by name", "[engine][tokenizer][hf]") {
  json j = gpt2_json(byte_level({}, {}, 300));
  j["model"]["type"] = "WordPiece";
  CHECK_THROWS_WITH(BpeTokenizer::parse(j.dump(), "t.json"),
                    "t.json: model.type = \"WordPiece\": expected \"BPE\"");
  j = gpt2_json(byte_level({}, {}, 300));
  j["normalizer"] = {{"type", "NFKC"}};
  CHECK_THROWS_WITH(BpeTokenizer::parse(j.dump(), "t.json"),
                    Catch::Contains("t.json: normalizer.type = \"NFKC\": expected a supported normalizer"));
  j = llama3_json(byte_level({}, {}, 300));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  CHECK_THROWS_WITH(BpeTokenizer::parse(j.dump(), "t.json"),
                    Catch::Contains("t.json: pre_tokenizer regex /(unclosed/"));
  CHECK_THROWS_AS(BpeTokenizer::parse("{", "t.json"), lpemu::SpecError);
}

TEST_CASE("SentencePiece-style encoding splits at spaces only when no piece crosses one",
          "[engine][tokenizer][hf]") {
  std::vector<std::pair<std::string, std::string>> merges = {{S, "a"}, {S + "a", "b"}, {S, S}, {"b", "a"}};
  std::vector<std::pair<std::string, int>> pieces = {
      {S, 259}, {"a", 260}, {"b", 261}, {S + "a", 262}, {S + "ab", 263}, {S + S, 264}, {"ba", 266}};
  const auto split = BpeTokenizer::parse(llama2_json(pieces, merges).dump(), "split.json");
  // An unused piece "q▁" forces the whole-text BPE without changing any merge of this text.
  auto unsplit_pieces = pieces;
  unsplit_pieces.emplace_back("q" + S, 267);
  const auto unsplit = BpeTokenizer::parse(llama2_json(unsplit_pieces, merges).dump(), "unsplit.json");
  std::string text;
  for (int i = 0; i < 150; ++i) text += i % 3 == 0 ? "ab  a " : "ba   b ";
  const std::vector<int> ids = split->encode(text, false);
  CHECK(ids == unsplit->encode(text, false));
  CHECK(split->decode(ids) == text);
  // With a piece that does cross a space, merges across it happen: "a b" -> "▁", "a▁", "b".
  pieces.emplace_back("a" + S, 265);
  merges.insert(merges.begin(), {"a", S});
  const auto crossing = BpeTokenizer::parse(llama2_json(pieces, merges).dump(), "crossing.json");
  CHECK(crossing->encode("a b", false) == std::vector<int>{259, 265, 261});
}

TEST_CASE("Metaspace pre-tokenizer (Mistral, Llama 2 legacy=False) gives the published ids",
          "[engine][tokenizer][hf]") {
  // Published: the same LlamaTokenizer docstring, legacy=False: encode("Hello <s>.") ==
  // [1, 15043, 29871, 1, 29889] ('.' = 29889: no '▁' after a special token). Newer tokenizer.json
  // files (Mistral v0.3, Llama 2 with legacy=False) express this as a Metaspace pre-tokenizer with
  // prepend_scheme "first" and no normalizer.
  std::vector<std::pair<std::string, std::string>> merges;
  chain(merges, {S, "H", "e", "l", "l", "o"});
  chain(merges, {S, "w", "o", "r", "l", "d"});
  std::vector<std::pair<std::string, int>> pieces = {
      {S, 29871}, {S + "Hello", 15043}, {S + "world", 3186}, {".", 29889}};
  int next = 30000;
  for (const auto& [l, r] : merges) {
    const std::string merged = l + r;  // a name of its own: clang 14 cannot capture a structured binding
    if (std::none_of(pieces.begin(), pieces.end(), [&](const auto& p) { return p.first == merged; })) {
      pieces.emplace_back(merged, next++);
    }
  }
  for (const char* c : {"H", "e", "l", "o", "w", "r", "d"}) pieces.emplace_back(c, next++);
  json j = llama2_json(pieces, merges);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", S}, {"prepend_scheme", "first"}, {"split", false}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", S}, {"prepend_scheme", "first"}, {"split", false}};
  const auto t = BpeTokenizer::parse(j.dump(), "mistral.json");
  CHECK(t->encode("Hello <s>.", true) == std::vector<int>{1, 15043, 29871, 1, 29889});
  CHECK(t->encode("Hello world", true) == std::vector<int>{1, 15043, 3186});
  CHECK(t->decode({15043, 3186}) == "Hello world");
}
