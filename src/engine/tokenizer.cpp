#include "lpemu/engine/tokenizer.hpp"

#include <cmath>
#include <cstdio>

#include "lpemu/engine/bpe_tokenizer.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/npy.hpp"

namespace lpemu::engine {

Tokenizer::Tokenizer(std::vector<std::string> pieces, std::vector<float> scores, int bos_id, int eos_id,
                     int byte_offset)
    : pieces_(std::move(pieces)),
      scores_(std::move(scores)),
      bos_id_(bos_id),
      eos_id_(eos_id),
      byte_offset_(byte_offset) {
  if (pieces_.size() != scores_.size()) {
    throw SpecError("tokenizer: " + std::to_string(pieces_.size()) + " pieces but " +
                    std::to_string(scores_.size()) + " scores");
  }
  for (std::size_t i = 0; i < scores_.size(); ++i) {
    if (!std::isfinite(scores_[i])) {
      throw SpecError("tokenizer: scores[" + std::to_string(i) + "] = " + std::to_string(scores_[i]) +
                      ": expected a finite merge score");
    }
  }
  // Byte fallback maps byte b to piece byte_offset + b: all 256 must be pieces.
  if (byte_offset_ < 0 || static_cast<std::size_t>(byte_offset_) + 256 > pieces_.size()) {
    if (byte_offset_ < 0 || !pieces_.empty()) {
      throw SpecError("tokenizer: byte_fallback_offset = " + std::to_string(byte_offset_) +
                      ": expected an integer in 0.." +
                      std::to_string(pieces_.size() >= 256 ? pieces_.size() - 256 : 0) + " (" +
                      std::to_string(pieces_.size()) + " pieces; the 256 byte pieces follow the offset)");
    }
  }
  for (std::size_t i = 0; i < pieces_.size(); ++i) index_.emplace(pieces_[i], static_cast<int>(i));
}

Tokenizer Tokenizer::from_hf_json(std::string json, const std::string& origin, int bos_id, int eos_id) {
  Tokenizer t;
  t.hf_ = BpeTokenizer::parse(json, origin);
  t.hf_json_ = std::move(json);
  t.bos_id_ = bos_id;
  t.eos_id_ = eos_id;
  return t;
}

int Tokenizer::size() const { return hf_ ? hf_->size() : static_cast<int>(pieces_.size()); }

const std::string& Tokenizer::piece(int id) const {
  if (hf_) return hf_->piece(id);
  if (id < 0 || id >= size()) throw ShapeError("tokenizer: token id " + std::to_string(id) + " out of range");
  return pieces_[static_cast<std::size_t>(id)];
}

int Tokenizer::find(std::string_view piece) const {
  if (hf_) return hf_->find(piece);
  const auto it = index_.find(std::string(piece));
  return it == index_.end() ? -1 : it->second;
}

std::vector<int> Tokenizer::encode(std::string_view text, bool bos, bool eos) const {
  if (hf_) {
    std::vector<int> ids = hf_->encode(text, bos);
    if (eos) ids.push_back(eos_id_);
    return ids;
  }
  std::vector<int> tokens;
  if (bos) tokens.push_back(bos_id_);
  // llama2.c: the dummy prefix " " goes first whenever the text is non-empty.
  if (!text.empty()) {
    const int dummy = find(" ");
    if (dummy >= 0) tokens.push_back(dummy);
  }
  // One token per UTF-8 code point (at most 4 bytes); unknown code points fall back to bytes.
  std::string buf;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0U) != 0x80U) buf.clear();
    buf.push_back(static_cast<char>(c));
    const bool next_cont = i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0U) == 0x80U;
    if (next_cont && buf.size() < 4) continue;
    const int id = find(buf);
    if (id >= 0) {
      tokens.push_back(id);
    } else {
      for (const char b : buf)
        tokens.push_back(static_cast<int>(static_cast<unsigned char>(b)) + byte_offset_);
    }
    buf.clear();
  }
  // Merge the adjacent pair with the highest score (leftmost on ties) until none merges.
  const std::size_t first = bos ? 1 : 0;
  while (true) {
    float best = -1e10F;
    int best_id = -1;
    std::size_t best_idx = 0;
    for (std::size_t i = first; i + 1 < tokens.size(); ++i) {
      const std::string merged = piece(tokens[i]) + piece(tokens[i + 1]);
      const int id = find(merged);
      if (id >= 0 && scores_[static_cast<std::size_t>(id)] > best) {
        best = scores_[static_cast<std::size_t>(id)];
        best_id = id;
        best_idx = i;
      }
    }
    if (best_id < 0) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_idx) + 1);
  }
  if (eos) tokens.push_back(eos_id_);
  return tokens;
}

std::string Tokenizer::decode(int prev, int id) const {
  if (hf_) {
    // The text `id` adds after `prev` (decoders such as Strip look at the whole sequence).
    if (prev < 0 || prev == bos_id_) return hf_->decode({id});
    const std::string before = hf_->decode({prev});
    const std::string both = hf_->decode({prev, id});
    return both.starts_with(before) ? both.substr(before.size()) : hf_->decode({id});
  }
  std::string_view p = piece(id);
  // llama2.c: a piece that follows BOS loses one leading space.
  if (prev == bos_id_ && !p.empty() && p.front() == ' ') p.remove_prefix(1);
  // Byte pieces <0xHH> stand for the raw byte.
  if (p.size() == 6 && p.substr(0, 3) == "<0x" && p.back() == '>') {
    unsigned value = 0;
    if (std::sscanf(std::string(p.substr(3, 2)).c_str(), "%2x", &value) == 1) {
      return std::string(1, static_cast<char>(value));
    }
  }
  return std::string(p);
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  if (hf_) {
    std::vector<int> kept;
    for (const int id : ids) {
      if (id != bos_id_ && id != eos_id_) kept.push_back(id);
    }
    return hf_->decode(kept);
  }
  std::string out;
  int prev = -1;
  for (const int id : ids) {
    if (id == bos_id_ || id == eos_id_) {
      prev = id;
      continue;
    }
    out += decode(prev, id);
    prev = id;
  }
  return out;
}

std::vector<int> load_token_ids(const std::filesystem::path& file, int vocab_size) {
  std::vector<std::size_t> shape;
  const std::vector<std::int64_t> v = io::read_npy_ints(file, shape);
  if (shape.size() != 1)
    throw IoError(file.string() + ": token ids must be a 1-D array, got " + std::to_string(shape.size()) +
                  " dimensions");
  std::vector<int> ids;
  ids.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0 || v[i] >= vocab_size) {
      throw IoError(file.string() + ": token [" + std::to_string(i) + "] = " + std::to_string(v[i]) +
                    ": expected an id in 0.." + std::to_string(vocab_size - 1));
    }
    ids.push_back(static_cast<int>(v[i]));
  }
  return ids;
}

}  // namespace lpemu::engine
