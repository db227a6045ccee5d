// SentencePiece-style BPE with byte fallback, exactly as llama2.c `run.c` encodes and decodes
// (rules in data/models/stories260K/README.md, "Tokenizer").
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lpemu::engine {

class BpeTokenizer;

/// A llama2.c tokenizer: pieces with merge scores; ids 3..258 are the byte pieces <0x00>..<0xFF>.
/// Or, built by from_hf_json, a Hugging Face tokenizer.json tokenizer (lpemu/engine/bpe_tokenizer.hpp)
/// behind the same interface.
class Tokenizer {
 public:
  Tokenizer() = default;
  /// Builds from pieces (' ' for SentencePiece's '▁') and scores; throws SpecError on size mismatch.
  Tokenizer(std::vector<std::string> pieces, std::vector<float> scores, int bos_id = 1, int eos_id = 2,
            int byte_offset = 3);

  /// A tokenizer.json tokenizer; `origin` names it in errors; BOS/EOS ids as the model's config says.
  static Tokenizer from_hf_json(std::string json, const std::string& origin, int bos_id, int eos_id);

  /// True when no pieces are loaded.
  bool empty() const { return pieces_.empty() && hf_ == nullptr; }
  /// Number of pieces.
  int size() const;
  /// The tokenizer.json text this tokenizer was built from ("" for a llama2.c tokenizer).
  const std::string& hf_json() const { return hf_json_; }
  /// The piece of token `id`.
  const std::string& piece(int id) const;
  /// The merge score of token `id`.
  float score(int id) const { return hf_ ? 0.0F : scores_.at(static_cast<std::size_t>(id)); }
  /// Token ids of `text`: optional BOS, the dummy-prefix " ", code points, then greedy merges.
  /// (tokenizer.json: the BPE pipeline; `bos` adds the post-processor's special tokens.)
  std::vector<int> encode(std::string_view text, bool bos = true, bool eos = false) const;
  /// The bytes token `id` stands for when it follows `prev` (llama2.c `decode`).
  std::string decode(int prev, int id) const;
  /// Concatenates decode(prev, id) over a sequence (the first token is taken to follow nothing).
  std::string decode(const std::vector<int>& ids) const;
  /// The id of `piece`, or -1.
  int find(std::string_view piece) const;
  /// BOS id.
  int bos_id() const { return bos_id_; }
  /// EOS id.
  int eos_id() const { return eos_id_; }

 private:
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int> index_;
  int bos_id_ = 1;
  int eos_id_ = 2;
  int byte_offset_ = 3;
  std::shared_ptr<const BpeTokenizer> hf_;
  std::string hf_json_;
};

/// Token ids from a 1-D integer .npy file, each checked against `vocab_size`; throws IoError
/// naming the file, the index and the value.
std::vector<int> load_token_ids(const std::filesystem::path& file, int vocab_size);

}  // namespace lpemu::engine
