// Transformer models loaded from HDF5 (schema: data/README.md). Llama family (RMSNorm, RoPE,
// GQA, SwiGLU) and GPT-2 family (LayerNorm with bias, learned positions, GELU MLP, biases),
// chosen by the file's config attributes.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "lpemu/engine/tensor.hpp"
#include "lpemu/engine/tokenizer.hpp"
#include "lpemu/engine/weights.hpp"

namespace lpemu::io {
class H5File;
}  // namespace lpemu::io

namespace lpemu::engine {

/// Normalisation layer kind.
enum class NormType { rmsnorm, layernorm };
/// How RoPE pairs features inside a head: (2j, 2j+1) or (j, j + head_dim/2).
enum class RopeStyle { interleaved, half };
/// How positions enter the model.
enum class PositionKind { rope, learned };
/// Feed-forward network kind: gated SwiGLU (w1 gate, w3 up, w2 down) or plain MLP (w1, w2).
enum class FfnKind { swiglu, mlp };
/// Activation function of the FFN.
enum class Activation { silu, gelu, gelu_tanh };

/// Model hyper-parameters (the HDF5 root attributes).
struct Config {
  std::string name;
  std::string family = "llama";  ///< "llama" or "gpt2": sets the defaults of the fields below
  int dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int hidden_dim = 0;
  int vocab_size = 0;
  int seq_len = 0;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  NormType norm = NormType::rmsnorm;
  RopeStyle rope_style = RopeStyle::interleaved;
  PositionKind positions = PositionKind::rope;
  FfnKind ffn = FfnKind::swiglu;
  Activation activation = Activation::silu;
  bool tied_embeddings = false;
  int bos_id = 1;
  int eos_id = 2;
  /// RoPE frequency scaling: "none", or "llama3" (Llama 3.1/3.2 `rope_scaling`, the four fields below).
  std::string rope_scaling = "none";
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int rope_original_max_positions = 8192;
  /// Sliding-window attention span (Mistral); 0 = full causal attention. Positions past it are refused.
  int sliding_window = 0;
  /// Sparse mixture of experts (Mixtral): experts per block (0 = one dense FFN) and experts per token.
  int n_experts = 0;
  int n_experts_per_token = 0;
};

/// Refuses hyper-parameters no forward pass can use, naming the field, its value and what was
/// expected (`where` prefixes the message: a file or a model name); throws SpecError. Sizes must be
/// positive, norm_eps finite and >= 0, RoPE's theta finite and > 0 and head_dim even, the llama3
/// scaling factors those Hugging Face transformers validates (`_validate_llama3_parameters`), and
/// bos/eos ids inside the vocabulary.
void check_config(const Config& c, const std::string& where);

/// RoPE inverse frequencies θ^(−2j/head_dim), j < head_dim/2, after the config's rope_scaling
/// (llama3: Hugging Face transformers `_compute_llama3_parameters`), in double.
std::vector<double> rope_frequencies(const Config& c);

/// One expert of a sparse mixture-of-experts block: a SwiGLU FFN (w1 gate, w3 up, w2 down).
struct ExpertWeights {
  WeightMatrix w1, w2, w3;
};

/// The weights of one transformer block. Biases and `w3` are empty when the model has none; a
/// mixture-of-experts block has `router` [n_experts, dim] and `experts` instead of w1/w2/w3.
/// Matrices keep their stored precision; norm weights and biases are float32.
struct LayerWeights {
  Vec<float> attention_norm, attention_norm_bias;
  WeightMatrix wq, wk, wv, wo;
  Vec<float> bq, bk, bv, bo;
  Vec<float> ffn_norm, ffn_norm_bias;
  WeightMatrix w1, w2, w3;
  Vec<float> b1, b2, b3;
  WeightMatrix router;
  std::vector<ExpertWeights> experts;
};

/// A loaded model: config, weights and (optionally) tokenizer.
struct Model {
  Config config;
  WeightMatrix tok_embeddings;  ///< [vocab, dim]
  WeightMatrix pos_embeddings;  ///< [seq_len, dim] for learned positions, else empty
  std::vector<LayerWeights> layers;
  Vec<float> norm, norm_bias;
  WeightMatrix output;  ///< [vocab, dim] classifier (shares tok_embeddings' storage when tied)
  Tokenizer tokenizer;  ///< empty when the file has no tokenizer group
  std::filesystem::path path;

  /// Throws ShapeError if any weight's shape disagrees with the config (`with_layers` false: all
  /// but the layers, which a ModelWriter checks one by one with validate_layer).
  void validate(bool with_layers = true) const;
  /// Throws ShapeError if a layer's shapes disagree with the config.
  void validate_layer(const LayerWeights& layer) const;
  /// Bytes of every weight as held in memory (matrices in their stored precision, vectors in
  /// float32; storage shared by tied embeddings counted once).
  std::size_t weight_bytes() const;
};

/// Loads a model from an HDF5 file (schema in data/README.md); throws IoError/SpecError/ShapeError.
Model load_model(const std::filesystem::path& file);
/// Writes a model in the same schema (used to make test models), replacing `file`.
void save_model(const Model& model, const std::filesystem::path& file);

/// Writes a model into an open HDF5 file in save_model's schema one layer at a time, so that a
/// model need not be held in memory whole: the config's attributes first, then each layer as it
/// comes (in order), then everything else.
class ModelWriter {
 public:
  /// Writes `config`'s attributes into `file`, which must stay open while the writer is used.
  ModelWriter(io::H5File& file, const Config& config);
  /// Writes layer `index` (the next one) after checking its shapes against the config.
  void write_layer(int index, const LayerWeights& layer);
  /// Writes embeddings, final norm, classifier and tokenizer of `model` (whose config must be the
  /// writer's; its layers are not read) after checking them and that every layer was written.
  void finish(const Model& model);

 private:
  io::H5File& file_;
  Config config_;
  int written_ = 0;
};
/// Resolves `--model`: an existing path, or a shipped model name looked up as
/// data/models/NAME/model.h5 under each of `search_dirs` (then LPEMU_DATA_DIR, then the
/// working directory); throws IoError listing the places tried.
std::filesystem::path resolve_model_path(const std::string& name_or_path,
                                         const std::vector<std::filesystem::path>& search_dirs = {});

}  // namespace lpemu::engine
