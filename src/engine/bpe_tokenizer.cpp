#include "lpemu/engine/bpe_tokenizer.hpp"

#include <algorithm>
#include <climits>
#include <unordered_map>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include "lpemu/error.hpp"

namespace lpemu::engine {
namespace {

using nlohmann::json;

const std::string kSpace = "\xE2\x96\x81";  // U+2581 '▁', SentencePiece's space

std::string utf8(std::uint32_t cp) {
  std::string o;
  if (cp < 0x80) {
    o += static_cast<char>(cp);
  } else if (cp < 0x800) {
    o += static_cast<char>(0xC0 | (cp >> 6));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    o += static_cast<char>(0xE0 | (cp >> 12));
    o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    o += static_cast<char>(0xF0 | (cp >> 18));
    o += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return o;
}

// Length of the UTF-8 sequence starting with byte b (1 for stray continuation bytes).
std::size_t utf8_len(unsigned char b) { return b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1; }

std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = std::min(utf8_len(static_cast<unsigned char>(s[i])), s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// GPT-2 encoder.py bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68
// bytes to U+0100.. in byte order.
struct ByteMap {
  std::string to_char[256];
  std::unordered_map<std::string, unsigned char> to_byte;
  ByteMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = utf8(keep ? static_cast<std::uint32_t>(b) : static_cast<std::uint32_t>(256 + n++));
      to_byte[to_char[b]] = static_cast<unsigned char>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string o;
  std::size_t i = 0;
  for (std::size_t j; (j = s.find(from, i)) != std::string::npos; i = j + from.size())
    o += s.substr(i, j - i) + to;
  return o + s.substr(i);
}

// A compiled PCRE2 pattern (UTF + Unicode properties), splitting text into matches and gaps.
class Regex {
 public:
  Regex(const std::string& pattern, const std::string& origin) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                          &err, &off, nullptr);
    if (code_ == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw SpecError(origin + ": pre_tokenizer regex /" + pattern + "/ at offset " + std::to_string(off) +
                      ": " + reinterpret_cast<const char*>(msg));
    }
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex() { pcre2_code_free(code_); }

  // Isolated split (tokenizers SplitDelimiterBehavior::Isolated): matches and the gaps between them.
  std::vector<std::string> split(const std::string& s) const {
    std::vector<std::string> out;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    std::size_t pos = 0, last = 0;
    while (pos <= s.size()) {
      const int rc =
          pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos, 0, md, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[1] == ov[0]) {  // empty match: step one code point
        pos = ov[0] + (ov[0] < s.size() ? utf8_len(static_cast<unsigned char>(s[ov[0]])) : 1);
        continue;
      }
      if (ov[0] > last) out.push_back(s.substr(last, ov[0] - last));
      out.push_back(s.substr(ov[0], ov[1] - ov[0]));
      last = pos = ov[1];
    }
    if (last < s.size()) out.push_back(s.substr(last));
    pcre2_match_data_free(md);
    return out;
  }

 private:
  pcre2_code* code_ = nullptr;
};

// GPT-2's pre-tokenizer pattern (openai/gpt-2 src/encoder.py), used by ByteLevel with use_regex.
const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Step {
  std::string type;
  std::string a, b;           // Prepend: a; Replace: a -> b; Strip: a = content
  int start = 0, stop = 0;    // Strip
  bool flag = false;          // ByteLevel add_prefix_space; Metaspace split
  std::string scheme;         // Metaspace prepend_scheme
  std::shared_ptr<Regex> re;  // Split / ByteLevel use_regex
};

}  // namespace

struct BpeTokenizer::Impl {
  std::string origin;
  std::unordered_map<std::string, int> vocab;
  std::vector<std::string> pieces;
  std::unordered_map<std::string, int> ranks;  // "left\0right" -> merge rank
  bool byte_fallback = false;
  bool ignore_merges = false;
  bool space_split_safe = true;  // no piece has '▁' right after another character
  int unk = -1;
  std::vector<std::pair<std::string, int>> added;  // longest first
  std::vector<Step> normalizers, pre, decoders;
  std::vector<int> prefix, suffix;  // post-processor specials around a single sequence

  [[noreturn]] void fail(const std::string& field, const json& v, const std::string& expected) const {
    throw SpecError(origin + ": " + field + " = " + v.dump().substr(0, 200) + ": expected " + expected);
  }

  static std::string pattern_of(const json& p) {
    if (p.contains("String")) return p["String"].get<std::string>();
    return p.at("Regex").get<std::string>();
  }

  void add_steps(const json& j, const std::string& field, std::vector<Step>& out) {
    if (j.is_null()) return;
    const std::string t = j.value("type", "");
    Step s;
    s.type = t;
    if (t == "Sequence") {
      const char* key = j.contains("normalizers")     ? "normalizers"
                        : j.contains("pretokenizers") ? "pretokenizers"
                                                      : "decoders";
      for (const auto& e : j.at(key)) add_steps(e, field + "." + key, out);
      return;
    }
    if (field.starts_with("normalizer") && t == "Prepend") {
      s.a = j.at("prepend").get<std::string>();
    } else if ((field.starts_with("normalizer") || field.starts_with("decoder")) && t == "Replace") {
      if (!j.at("pattern").contains("String")) fail(field + ".pattern", j["pattern"], "a String pattern");
      s.a = j["pattern"]["String"].get<std::string>();
      s.b = j.at("content").get<std::string>();
    } else if (field.starts_with("normalizer") && t == "NFC") {
      // Applied as identity: inputs are taken to be NFC already (docs/plans-and-engine.md, "Your own model").
    } else if (field.starts_with("pre_tokenizer") && t == "ByteLevel") {
      s.flag = j.value("add_prefix_space", false);
      if (j.value("use_regex", true)) s.re = std::make_shared<Regex>(kGpt2Pattern, origin);
    } else if (field.starts_with("pre_tokenizer") && t == "Split") {
      if (j.value("behavior", "") != "Isolated" || j.value("invert", false)) {
        fail(field + ".behavior", j, "behavior \"Isolated\" with invert false");
      }
      const json& p = j.at("pattern");
      s.re = std::make_shared<Regex>(p.contains("Regex") ? pattern_of(p) : std::string(), origin);
      if (!p.contains("Regex")) fail(field + ".pattern", p, "a Regex pattern");
    } else if ((field.starts_with("pre_tokenizer") || field.starts_with("decoder")) && t == "Metaspace") {
      s.a = j.value("replacement", kSpace);
      s.scheme = j.value("prepend_scheme", j.value("add_prefix_space", true) ? "always" : "never");
      s.flag = j.value("split", true);
    } else if (field.starts_with("decoder") && (t == "ByteLevel" || t == "ByteFallback" || t == "Fuse")) {
    } else if (field.starts_with("decoder") && t == "Strip") {
      s.a = j.at("content").get<std::string>();
      s.start = j.value("start", 0);
      s.stop = j.value("stop", 0);
    } else {
      fail(field + ".type", j.value("type", json()),
           "a supported " + field.substr(0, field.find('.')) + " (see lpemu/engine/bpe_tokenizer.hpp)");
    }
    out.push_back(std::move(s));
  }

  std::string normalize(std::string s) const {
    for (const Step& n : normalizers) {
      if (n.type == "Prepend") s = n.a + s;
      if (n.type == "Replace") s = replace_all(s, n.a, n.b);
    }
    return s;
  }

  std::vector<std::string> pretokenize(const std::string& s, bool first) const {
    if (pre.empty()) return space_split_safe ? split_spaces(s) : std::vector<std::string>{s};
    std::vector<std::string> parts{s};
    for (const Step& p : pre) {
      std::vector<std::string> next;
      for (std::size_t i = 0; i < parts.size(); ++i) {
        std::string w = parts[i];
        if (p.type == "ByteLevel") {
          if (p.flag && first && i == 0 && !w.starts_with(" ")) w = " " + w;
          const std::vector<std::string> ws = p.re ? p.re->split(w) : std::vector<std::string>{w};
          for (const auto& x : ws) {
            std::string m;
            for (const unsigned char c : x) m += byte_map().to_char[c];
            next.push_back(m);
          }
        } else if (p.type == "Split") {
          for (auto& x : p.re->split(w)) next.push_back(std::move(x));
        } else if (p.type == "Metaspace") {
          w = replace_all(w, " ", p.a);
          if ((p.scheme == "always" || (p.scheme == "first" && first && i == 0)) && !w.starts_with(p.a))
            w = p.a + w;
          if (!p.flag) {
            next.push_back(w);
            continue;
          }
          std::size_t b = 0;
          for (std::size_t j = p.a.size(); (j = w.find(p.a, j)) != std::string::npos; j += p.a.size()) {
            next.push_back(w.substr(b, j - b));
            b = j;
          }
          next.push_back(w.substr(b));
        }
      }
      parts = std::move(next);
    }
    return parts;
  }

  // Without a pre-tokenizer (Llama 2, Mistral) the whole text is one BPE word, quadratic in its
  // length. SentencePiece trained with split_by_whitespace (the default) has no piece with '▁'
  // after another character, so no merge crosses the start of a run of '▁': splitting there
  // gives the same tokens in linear time (parse() checks the vocabulary for such pieces).
  static std::vector<std::string> split_spaces(const std::string& s) {
    std::vector<std::string> out;
    std::size_t b = 0;
    for (std::size_t j = s.find(kSpace, 1); j != std::string::npos; j = s.find(kSpace, j + kSpace.size())) {
      const bool after_space = j >= kSpace.size() && s.compare(j - kSpace.size(), kSpace.size(), kSpace) == 0;
      if (!after_space && j > b) {
        out.push_back(s.substr(b, j - b));
        b = j;
      }
    }
    out.push_back(s.substr(b));
    return out;
  }

  void bpe(const std::string& word, std::vector<int>& out) const {
    if (word.empty()) return;
    if (ignore_merges) {
      if (const auto it = vocab.find(word); it != vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    std::vector<std::string> sym = code_points(word);
    for (;;) {
      int best = INT_MAX;
      std::size_t at = 0;
      for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
        const auto it = ranks.find(sym[i] + '\0' + sym[i + 1]);
        if (it != ranks.end() && it->second < best) {
          best = it->second;
          at = i;
        }
      }
      if (best == INT_MAX) break;
      sym[at] += sym[at + 1];
      sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
    for (const auto& s : sym) {
      if (const auto it = vocab.find(s); it != vocab.end()) {
        out.push_back(it->second);
      } else if (byte_fallback) {
        for (const unsigned char c : s) {
          char name[8];
          std::snprintf(name, sizeof name, "<0x%02X>", c);
          const auto b = vocab.find(name);
          if (b == vocab.end())
            throw SpecError(origin + ": byte_fallback needs piece " + name + ", absent from vocab");
          out.push_back(b->second);
        }
      } else if (unk >= 0) {
        out.push_back(unk);
      } else {
        throw ShapeError(origin + ": no token for \"" + s +
                         "\" and the model has no unk_token or byte_fallback");
      }
    }
  }
};

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeTokenizer::~BpeTokenizer() = default;

std::shared_ptr<const BpeTokenizer> BpeTokenizer::parse(const std::string& text, const std::string& origin,
                                                        int vocab_size) {
  auto im = std::make_unique<Impl>();
  im->origin = origin;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw SpecError(origin + ": not valid JSON: " + e.what());
  }
  try {
    const json& m = j.at("model");
    if (m.value("type", "BPE") != "BPE") im->fail("model.type", m["type"], "\"BPE\"");
    // Ids index a table of pieces: bounded, so a 6 KB file cannot ask for gigabytes (the largest
    // published vocabularies have about 2^18 entries), and never past 32 bits (an id would wrap
    // onto another piece).
    constexpr std::int64_t kMaxId = (std::int64_t{1} << 21) - 1;
    // With a model, every id must name one of its embedding rows (an id past them would index
    // outside the embedding table).
    const std::int64_t max_id = vocab_size > 0 ? std::int64_t{vocab_size} - 1 : kMaxId;
    const std::string range = vocab_size > 0
                                  ? "a token id in 0.." + std::to_string(max_id) +
                                        " (the model's vocab_size is " + std::to_string(vocab_size) + ")"
                                  : "a token id in 0.." + std::to_string(kMaxId);
    const auto token_id = [&](const std::string& field, const json& id) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
          (id.is_number_unsigned() && id.get<std::uint64_t>() > std::uint64_t(max_id)) ||
          id.get<std::int64_t>() > max_id) {
        im->fail(field, id, range);
      }
      return static_cast<int>(id.get<std::int64_t>());
    };
    for (const auto& [piece, id] : m.at("vocab").items()) {
      const int i = token_id("model.vocab." + piece, id);
      im->vocab[piece] = i;
      if (static_cast<std::size_t>(i) >= im->pieces.size())
        im->pieces.resize(static_cast<std::size_t>(i) + 1);
      im->pieces[static_cast<std::size_t>(i)] = piece;
    }
    int rank = 0;
    for (const auto& mg : m.at("merges")) {
      std::string l, r;
      if (mg.is_string()) {
        const std::string s = mg.get<std::string>();
        const auto sp = s.find(' ');
        if (sp == std::string::npos)
          im->fail("model.merges[" + std::to_string(rank) + "]", mg, "\"left right\"");
        l = s.substr(0, sp);
        r = s.substr(sp + 1);
      } else {
        if (!mg.is_array() || mg.size() != 2)
          im->fail("model.merges[" + std::to_string(rank) + "]", mg, "[left, right]");
        l = mg[0].get<std::string>();
        r = mg[1].get<std::string>();
      }
      im->ranks.emplace(l + '\0' + r, rank++);
    }
    for (const auto& [piece, id] : im->vocab) {
      for (std::size_t at = piece.find(kSpace, 1); at != std::string::npos; at = piece.find(kSpace, at + 1)) {
        if (at < kSpace.size() || piece.compare(at - kSpace.size(), kSpace.size(), kSpace) != 0) {
          im->space_split_safe = false;
        }
      }
    }
    im->byte_fallback = m.value("byte_fallback", false);
    im->ignore_merges = m.value("ignore_merges", false);
    if (m.contains("unk_token") && m["unk_token"].is_string()) {
      const auto it = im->vocab.find(m["unk_token"].get<std::string>());
      if (it != im->vocab.end()) im->unk = it->second;
    }
    if (j.contains("added_tokens")) {
      for (const auto& a : j["added_tokens"]) {
        const int id = token_id("added_tokens[].id", a.at("id"));
        const std::string c = a.at("content").get<std::string>();
        im->added.emplace_back(c, id);
        im->vocab[c] = id;
        if (static_cast<std::size_t>(id) >= im->pieces.size())
          im->pieces.resize(static_cast<std::size_t>(id) + 1);
        im->pieces[static_cast<std::size_t>(id)] = c;
      }
      std::stable_sort(im->added.begin(), im->added.end(),
                       [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
    }
    im->add_steps(j.value("normalizer", json()), "normalizer", im->normalizers);
    im->add_steps(j.value("pre_tokenizer", json()), "pre_tokenizer", im->pre);
    im->add_steps(j.value("decoder", json()), "decoder", im->decoders);
    const json pp = j.value("post_processor", json());
    std::vector<json> procs;
    if (!pp.is_null()) {
      if (pp.value("type", "") == "Sequence") {
        for (const auto& p : pp.at("processors")) procs.push_back(p);
      } else {
        procs.push_back(pp);
      }
    }
    for (const auto& p : procs) {
      const std::string t = p.value("type", "");
      if (t == "ByteLevel") continue;  // only adjusts offsets
      if (t != "TemplateProcessing")
        im->fail("post_processor.type", p.value("type", json()), "TemplateProcessing or ByteLevel");
      bool seen = false;
      for (const auto& item : p.at("single")) {
        if (item.contains("Sequence")) {
          seen = true;
          continue;
        }
        const std::string name = item.at("SpecialToken").at("id").get<std::string>();
        for (const auto& id : p.at("special_tokens").at(name).at("ids"))
          (seen ? im->suffix : im->prefix)
              .push_back(token_id("post_processor.special_tokens." + name + ".ids[]", id));
      }
    }
  } catch (const json::exception& e) {
    throw SpecError(origin + ": does not follow the tokenizer.json schema: " + e.what());
  }
  return std::shared_ptr<const BpeTokenizer>(new BpeTokenizer(std::move(im)));
}

std::vector<int> BpeTokenizer::encode(std::string_view text, bool specials) const {
  const Impl& im = *impl_;
  std::vector<int> out;
  if (specials) out = im.prefix;
  std::string rest(text);
  bool first = true;
  while (!rest.empty()) {
    // The earliest added token (longest at a tie) splits the text.
    std::size_t at = std::string::npos;
    const std::pair<std::string, int>* hit = nullptr;
    for (const auto& a : im.added) {
      const std::size_t p = rest.find(a.first);
      if (p != std::string::npos && (at == std::string::npos || p < at)) {
        at = p;
        hit = &a;
      }
    }
    const std::string chunk = rest.substr(0, at);
    if (!chunk.empty()) {
      for (const auto& w : im.pretokenize(im.normalize(chunk), first)) im.bpe(w, out);
    }
    first = false;
    if (hit == nullptr) break;
    out.push_back(hit->second);
    rest = rest.substr(at + hit->first.size());
  }
  if (specials) out.insert(out.end(), im.suffix.begin(), im.suffix.end());
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int>& ids) const {
  const Impl& im = *impl_;
  std::vector<std::string> toks;
  for (const int id : ids) toks.push_back(piece(id));
  for (const Step& d : im.decoders) {
    if (d.type == "ByteLevel") {
      for (auto& t : toks) {
        std::string b;
        for (const auto& cp : code_points(t)) {
          const auto it = byte_map().to_byte.find(cp);
          b += it != byte_map().to_byte.end() ? std::string(1, static_cast<char>(it->second)) : cp;
        }
        t = b;
      }
    } else if (d.type == "Replace") {
      for (auto& t : toks) t = replace_all(t, d.a, d.b);
    } else if (d.type == "ByteFallback") {
      // Runs of <0xXX> pieces become their bytes (invalid UTF-8 becomes U+FFFD per piece).
      std::vector<std::string> o;
      std::string bytes;
      std::size_t nb = 0;
      const auto flush = [&] {
        if (nb == 0) return;
        bool valid = true;
        for (std::size_t i = 0; i < bytes.size();) {
          const std::size_t n = utf8_len(static_cast<unsigned char>(bytes[i]));
          if ((n == 1 && static_cast<unsigned char>(bytes[i]) >= 0x80) || i + n > bytes.size()) valid = false;
          for (std::size_t k = 1; valid && k < n; ++k)
            valid = (static_cast<unsigned char>(bytes[i + k]) & 0xC0) == 0x80;
          i += n;
        }
        if (valid) {
          o.push_back(bytes);
        } else {
          for (std::size_t k = 0; k < nb; ++k) o.push_back("\xEF\xBF\xBD");
        }
        bytes.clear();
        nb = 0;
      };
      for (const auto& t : toks) {
        if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>') {
          bytes += static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
          ++nb;
        } else {
          flush();
          o.push_back(t);
        }
      }
      flush();
      toks = std::move(o);
    } else if (d.type == "Fuse") {
      std::string all;
      for (const auto& t : toks) all += t;
      toks = {all};
    } else if (d.type == "Strip") {
      for (auto& t : toks) {
        for (int k = 0; k < d.start && t.starts_with(d.a); ++k) t.erase(0, d.a.size());
        for (int k = 0; k < d.stop && t.ends_with(d.a); ++k) t.erase(t.size() - d.a.size());
      }
    } else if (d.type == "Metaspace") {
      for (std::size_t i = 0; i < toks.size(); ++i) {
        toks[i] = replace_all(toks[i], d.a, " ");
        if (i == 0 && d.scheme != "never" && toks[i].starts_with(" ")) toks[i].erase(0, 1);
      }
    }
  }
  std::string s;
  for (const auto& t : toks) s += t;
  return s;
}

int BpeTokenizer::size() const { return static_cast<int>(impl_->pieces.size()); }

const std::string& BpeTokenizer::piece(int id) const {
  if (id < 0 || id >= size())
    throw ShapeError(impl_->origin + ": token id " + std::to_string(id) + " out of range");
  return impl_->pieces[static_cast<std::size_t>(id)];
}

int BpeTokenizer::find(std::string_view p) const {
  const auto it = impl_->vocab.find(std::string(p));
  return it == impl_->vocab.end() ? -1 : it->second;
}

}  // namespace lpemu::engine
