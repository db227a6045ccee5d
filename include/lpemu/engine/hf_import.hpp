// Hugging Face checkpoint folders (config.json, *.safetensors, tokenizer.json) read into an
// engine Model: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and GPT2LMHeadModel,
// following each architecture's transformers modelling code (weight names, RoPE convention).
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "lpemu/engine/model.hpp"

namespace lpemu::engine {

/// A model read from a Hugging Face folder, with what is needed to record its provenance.
struct HfCheckpoint {
  Model model;
  std::string architecture;      ///< config.json "architectures"[0]
  std::string config_json;       ///< config.json as read
  std::filesystem::path source;  ///< the folder
  /// (file name, lower-case hex SHA-256) of config.json, every safetensors file and tokenizer.json.
  std::vector<std::pair<std::string, std::string>> files;
};

/// Architectures `import_hf` accepts, in config.json spelling.
std::vector<std::string> hf_architectures();

/// Reads a Hugging Face checkpoint folder: config.json, model.safetensors or the shards listed in
/// model.safetensors.index.json (F32, F16, BF16 tensors), and tokenizer.json when present.
/// Throws SpecError for unsupported architectures or options (named), IoError/ShapeError for
/// missing or misshapen tensors.
HfCheckpoint import_hf(const std::filesystem::path& dir);

/// Writes the model (data/README.md schema) plus provenance attributes: hf_architecture,
/// hf_config (the JSON text), source_dir, and /provenance/{files,sha256}.
void save_hf_checkpoint(const HfCheckpoint& ckpt, const std::filesystem::path& file);

}  // namespace lpemu::engine
