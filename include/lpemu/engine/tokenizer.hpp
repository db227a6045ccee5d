// SentencePiece-style BPE with byte fallback, exactly as llama2.c `run.c` encodes and decodes
// (rules in data/models/stories260K/README.md, "Tokenizer").
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lpemu::engine {

/// A llama2.c tokenizer: pieces with merge scores; ids 3..258 are the byte pieces <0x00>..<0xFF>.
class Tokenizer {
 public:
  Tokenizer() = default;
  /// Builds from pieces (' ' for SentencePiece's '▁') and scores; throws SpecError on size mismatch.
  Tokenizer(std::vector<std::string> pieces, std::vector<float> scores, int bos_id = 1, int eos_id = 2,
            int byte_offset = 3);

  /// True when no pieces are loaded.
  bool empty() const { return pieces_.empty(); }
  /// Number of pieces.
  int size() const { return static_cast<int>(pieces_.size()); }
  /// The piece of token `id`.
  const std::string& piece(int id) const;
  /// The merge score of token `id`.
  float score(int id) const { return scores_.at(static_cast<std::size_t>(id)); }
  /// Token ids of `text`: optional BOS, the dummy-prefix " ", code points, then greedy merges.
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
};

}  // namespace lpemu::engine
