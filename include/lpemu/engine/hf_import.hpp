// Hugging Face checkpoint folders (config.json, *.safetensors, tokenizer.json) imported into the
// engine's model file: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, MixtralForCausalLM
// and GPT2LMHeadModel, following each architecture's transformers modelling code (weight names,
// RoPE convention).
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "lpemu/engine/model.hpp"
#include "lpemu/io/output.hpp"

namespace lpemu::engine {

/// A model read from a Hugging Face folder, with what is needed to record its provenance.
struct HfCheckpoint {
  Model model;                   ///< config, embeddings, classifier and tokenizer (layers go to the file)
  std::string architecture;      ///< config.json "architectures"[0]
  std::string config_json;       ///< config.json as read
  std::filesystem::path source;  ///< the folder
  /// (file name, lower-case hex SHA-256) of config.json, every safetensors file and tokenizer.json.
  std::vector<std::pair<std::string, std::string>> files;
};

/// Architectures `import_hf` accepts, in config.json spelling.
std::vector<std::string> hf_architectures();

/// Imports a Hugging Face checkpoint folder — config.json, model.safetensors or the shards listed
/// in model.safetensors.index.json (F32, F16, BF16 tensors), tokenizer.json when present — into a
/// model file (data/README.md schema) one layer at a time, so that only the embeddings, the classifier and
/// one layer are in memory at once, with provenance attributes: hf_architecture, hf_config (the JSON text),
/// source_dir, and /provenance/{files,sha256}. Written under a temporary name and renamed into place;
/// `policy` decides whether an existing file may be replaced. Throws SpecError for unsupported architectures
/// or options (named), IoError/ShapeError for missing or misshapen tensors (no file is left behind). Returns
/// the checkpoint without its layers (load the file to run it).
HfCheckpoint import_hf(const std::filesystem::path& dir, const std::filesystem::path& file,
                       const io::OutputPolicy& policy);

}  // namespace lpemu::engine
