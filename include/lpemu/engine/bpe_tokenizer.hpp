// Tokenizers described by a Hugging Face `tokenizer.json` (schema of the `tokenizers` library):
// a BPE model with merges, byte-level (GPT-2, Llama 3, Qwen2: bytes mapped to printable code
// points as GPT-2's `encoder.py` bytes_to_unicode does, pre-split by a PCRE2 regex) or
// SentencePiece-style (Llama 2, Mistral: '▁' for spaces, byte fallback <0xXX> pieces).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lpemu::engine {

/// A tokenizer.json BPE tokenizer: normalizer, pre-tokenizer, BPE model, post-processor prefix, decoder.
class BpeTokenizer {
 public:
  /// Parses tokenizer.json text; `origin` names it in errors. Throws SpecError naming the field for
  /// anything outside the supported subset (BPE model; normalizers Prepend, Replace, NFC, Sequence;
  /// pre-tokenizers ByteLevel, Split, Metaspace, Sequence; decoders ByteLevel, Replace,
  /// ByteFallback, Fuse, Strip, Metaspace, Sequence; post-processors TemplateProcessing, ByteLevel).
  /// Every id must lie below `vocab_size`, the vocabulary of the model the tokenizer belongs to
  /// (0: no model known; ids then lie in 0..2^21-1).
  static std::shared_ptr<const BpeTokenizer> parse(const std::string& json, const std::string& origin,
                                                   int vocab_size = 0);
  ~BpeTokenizer();

  /// Token ids of `text` (added tokens matched first, then normalizer, pre-tokenizer, BPE);
  /// `specials`: add the post-processor's tokens around the sequence (e.g. Llama's BOS).
  std::vector<int> encode(std::string_view text, bool specials) const;
  /// The text of a token sequence, through the decoder (added tokens as their content).
  std::string decode(const std::vector<int>& ids) const;
  /// Vocabulary size (largest id + 1, added tokens included).
  int size() const;
  /// The vocabulary string of `id` (byte-level or '▁' spelling); throws ShapeError if unknown.
  const std::string& piece(int id) const;
  /// The id of a vocabulary string or added token, or -1.
  int find(std::string_view piece) const;

  /// Implementation detail.
  struct Impl;

 private:
  explicit BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lpemu::engine
