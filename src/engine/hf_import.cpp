#include "lpemu/engine/hf_import.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "lpemu/engine/bpe_tokenizer.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/io/hdf5.hpp"
#include "lpemu/io/safetensors.hpp"
#include "lpemu/io/sha256.hpp"

namespace lpemu::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError(file.string() + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json parse_json(const fs::path& file, const std::string& text) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw IoError(file.string() + ": not valid JSON: " + e.what());
  }
}

// config.json with typed, named look-ups.
class HfConfig {
 public:
  /// `prefix` names a nested object in messages ("rope_scaling.").
  HfConfig(fs::path file, json j, std::string prefix = {})
      : file_(std::move(file)), j_(std::move(j)), prefix_(std::move(prefix)) {}

  bool has(const std::string& k) const { return j_.contains(k) && !j_[k].is_null(); }

  int integer(const std::string& k, std::optional<int> def = std::nullopt) const {
    if (!has(k)) {
      if (def) return *def;
      fail(k, "missing", "an integer");
    }
    const json& all = j_[k];
    // A list (e.g. eos_token_id of Llama 3.1): every element is checked, the first is taken.
    const json one = all.is_array() ? all : json::array({all});
    if (one.empty()) fail(k, all.dump(), "an integer or a non-empty list of integers");
    for (const json& v : one) {
      const bool fits = v.is_number_unsigned()  ? v.get<std::uint64_t>() <= std::uint64_t(kIntMax)
                        : v.is_number_integer() ? v.get<std::int64_t>() >= -std::int64_t(kIntMax) &&
                                                      v.get<std::int64_t>() <= kIntMax
                                                : false;
      if (!fits)
        fail(k, all.dump(), "an integer in -" + std::to_string(kIntMax) + ".." + std::to_string(kIntMax));
    }
    return one[0].get<int>();
  }

  double number(const std::string& k, std::optional<double> def = std::nullopt) const {
    if (!has(k)) {
      if (def) return *def;
      fail(k, "missing", "a number");
    }
    if (!j_[k].is_number()) fail(k, j_[k].dump(), "a number");
    return j_[k].get<double>();
  }

  bool boolean(const std::string& k, bool def) const {
    if (!has(k)) return def;
    if (!j_[k].is_boolean()) fail(k, j_[k].dump(), "true or false");
    return j_[k].get<bool>();
  }

  std::string string(const std::string& k, const std::string& def) const {
    if (!has(k)) return def;
    if (!j_[k].is_string()) fail(k, j_[k].dump(), "a string");
    return j_[k].get<std::string>();
  }

  const json& raw() const { return j_; }
  const fs::path& file() const { return file_; }

  [[noreturn]] void fail(const std::string& k, const std::string& value, const std::string& expected) const {
    throw SpecError(file_.string() + ": " + prefix_ + k + " = " + value + ": expected " + expected);
  }

 private:
  static constexpr std::int64_t kIntMax = 2147483647;  // the model's integers are 32-bit
  fs::path file_;
  json j_;
  std::string prefix_;
};

// Every tensor of a checkpoint, found in its safetensors file(s), decoded to float on request.
class Tensors {
 public:
  explicit Tensors(const fs::path& dir, std::vector<std::pair<std::string, std::string>>& hashes)
      : dir_(dir) {
    std::vector<fs::path> files;
    const fs::path index = dir / "model.safetensors.index.json";
    if (fs::is_regular_file(index)) {
      const std::string text = read_text(index);
      const json j = parse_json(index, text);
      if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
        throw IoError(index.string() + ": weight_map: expected an object of tensor name -> shard file");
      }
      std::set<std::string> shards;
      for (const auto& [name, shard] : j["weight_map"].items()) {
        if (!shard.is_string())
          throw IoError(index.string() + ": weight_map." + name + ": expected a file name");
        shards.insert(shard.get<std::string>());
        indexed_[name] = shard.get<std::string>();
      }
      for (const auto& s : shards) files.push_back(dir / s);
      hashes.emplace_back(index.filename().string(), io::sha256_hex(text));
    } else if (fs::is_regular_file(dir / "model.safetensors")) {
      files.push_back(dir / "model.safetensors");
    } else {
      throw IoError(dir.string() + ": no model.safetensors or model.safetensors.index.json");
    }
    for (const auto& f : files) {
      if (!fs::is_regular_file(f)) throw IoError(f.string() + ": shard listed in the index is missing");
      files_.push_back(std::make_unique<io::SafetensorsFile>(io::SafetensorsFile::open(f)));
      for (const auto& entry : files_.back()->entries()) {
        const auto [it, fresh] = where_.emplace(entry.first, files_.back().get());
        if (!fresh) {
          throw IoError(f.string() + ": tensor '" + entry.first + "' is also in " +
                        it->second->path().string() + ": expected each tensor in exactly one shard");
        }
      }
      hashes.emplace_back(f.filename().string(), io::sha256_file(f));
    }
    for (const auto& [name, shard] : indexed_) {
      const auto it = where_.find(name);
      if (it != where_.end() && it->second->path().filename() != fs::path(shard).filename()) {
        throw IoError(index.string() + ": weight_map." + name + " = \"" + shard + "\": the tensor is in " +
                      it->second->path().string() + " instead");
      }
    }
  }

  // 1 + the largest N of the tensors named PREFIX + "N." (0 when there are none): the layers stored.
  int stored_layers(const std::string& prefix) const {
    long long n = 0;
    for (const auto& entry : where_) {
      const std::string& name = entry.first;
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      const std::size_t dot = name.find('.', prefix.size());
      const std::string digits = name.substr(prefix.size(), dot - prefix.size());
      if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos)
        continue;
      n = std::max(n, std::stoll(digits) + 1);
    }
    return static_cast<int>(n);
  }

  bool has(const std::string& name) const { return where_.count(name) != 0; }

  // The tensor's values as float32 (exact). With `codes_out`, a BF16 / F16 tensor's codes go there
  // instead (the values are not decoded) and `storage` receives its precision.
  std::vector<float> floats(const std::string& name, const std::vector<std::size_t>& shape,
                            std::vector<std::uint16_t>* codes_out = nullptr,
                            WeightStorage* storage = nullptr) const {
    const auto it = where_.find(name);
    if (it == where_.end()) {
      throw IoError(dir_.string() + ": no tensor '" + name + "' in the checkpoint's safetensors files");
    }
    const io::SafetensorsFile& f = *it->second;
    const io::SafetensorsEntry& e = f.entry(name);
    if (e.shape != shape) {
      throw ShapeError(f.path().string() + ": tensor '" + name + "' has shape " + dims(e.shape) +
                       ", expected " + dims(shape) + " from config.json");
    }
    const std::vector<std::uint8_t> raw = f.read_bytes(name);
    if (codes_out != nullptr && (e.dtype == "F16" || e.dtype == "BF16")) {
      codes_out->resize(raw.size() / sizeof(std::uint16_t));
      std::memcpy(codes_out->data(), raw.data(), raw.size());
      *storage = e.dtype == "F16" ? WeightStorage::fp16 : WeightStorage::bf16;
      return {};
    }
    std::vector<float> out(raw.size() / io::safetensors_dtype_size(e.dtype));
    if (e.dtype == "F32") {
      std::memcpy(out.data(), raw.data(), raw.size());
    } else if (e.dtype == "F16" || e.dtype == "BF16") {
      std::vector<std::uint16_t> codes(out.size());
      std::memcpy(codes.data(), raw.data(), raw.size());
      format::decode(format::Registry::builtin().get(e.dtype == "F16" ? "fp16" : "bf16"), codes, out);
    } else {
      throw IoError(f.path().string() + ": tensor '" + name + "' has dtype " + e.dtype +
                    ": expected F32, F16 or BF16");
    }
    return out;
  }

  // A weight matrix in the checkpoint's precision: a BF16 / F16 tensor keeps its codes.
  WeightMatrix matrix(const std::string& name, Eigen::Index rows, Eigen::Index cols,
                      bool transpose = false) const {
    const std::vector<std::size_t> shape =
        transpose ? std::vector<std::size_t>{std::size_t(cols), std::size_t(rows)}
                  : std::vector<std::size_t>{std::size_t(rows), std::size_t(cols)};
    std::vector<std::uint16_t> codes;
    WeightStorage storage = WeightStorage::fp32;
    const std::vector<float> v = floats(name, shape, &codes, &storage);
    if (storage != WeightStorage::fp32) {
      if (transpose) {
        using Codes = Eigen::Matrix<std::uint16_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
        const Codes t = Eigen::Map<const Codes>(codes.data(), cols, rows).transpose();
        std::copy(t.data(), t.data() + t.size(), codes.begin());
      }
      return WeightMatrix::from_codes(storage, rows, cols, std::move(codes));
    }
    if (!transpose) return RowMatrix(Eigen::Map<const RowMatrix>(v.data(), rows, cols));
    return RowMatrix(Eigen::Map<const RowMatrix>(v.data(), cols, rows).transpose());
  }

  Vec<float> vector(const std::string& name, Eigen::Index n) const {
    const std::vector<float> v = floats(name, {std::size_t(n)});
    return Eigen::Map<const Vec<float>>(v.data(), n);
  }

 private:
  static std::string dims(const std::vector<std::size_t>& s) {
    std::string o = "[";
    for (std::size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
    return o + "]";
  }
  fs::path dir_;
  std::map<std::string, std::string> indexed_;  // the index's weight_map: tensor -> shard
  std::vector<std::unique_ptr<io::SafetensorsFile>> files_;
  std::map<std::string, const io::SafetensorsFile*> where_;
};

// The config's layer count must be the layers the checkpoint stores (fewer would drop layers).
void check_layers(const HfConfig& h, const std::string& key, int n_layers, int stored) {
  if (stored != n_layers) {
    h.fail(key, std::to_string(n_layers), "the " + std::to_string(stored) + " layers the checkpoint stores");
  }
}

// Receives each layer as it is read (the model's config is complete by then).
using LayerSink = std::function<void(const Config&, int, LayerWeights&&)>;

// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, MixtralForCausalLM (transformers
// modeling_llama.py, modeling_mistral.py, modeling_qwen2.py, modeling_mixtral.py): RMSNorm,
// rotate-half RoPE, GQA, SwiGLU (Mixtral: a sparse mixture of SwiGLU experts).
void read_llama_like(const HfConfig& h, const Tensors& t, const std::string& arch, Model& m,
                     const LayerSink& sink) {
  Config& c = m.config;
  c.family = "llama";
  c.dim = h.integer("hidden_size");
  c.n_layers = h.integer("num_hidden_layers");
  c.n_heads = h.integer("num_attention_heads");
  c.n_kv_heads = h.integer("num_key_value_heads", c.n_heads);
  c.head_dim = h.integer("head_dim", c.n_heads > 0 ? c.dim / c.n_heads : 0);
  c.hidden_dim = h.integer("intermediate_size");
  c.vocab_size = h.integer("vocab_size");
  c.seq_len = h.integer("max_position_embeddings");
  c.norm_eps = h.number("rms_norm_eps", 1e-6);
  c.rope_theta = h.number("rope_theta", 10000.0);
  c.norm = NormType::rmsnorm;
  c.rope_style = RopeStyle::half;  // rotate_half pairs feature j with j + head_dim/2
  c.positions = PositionKind::rope;
  c.ffn = FfnKind::swiglu;
  const std::string act = h.string("hidden_act", "silu");
  if (act != "silu") h.fail("hidden_act", "\"" + act + "\"", "\"silu\"");
  c.activation = Activation::silu;
  c.bos_id = h.integer("bos_token_id", 1);
  c.eos_id = h.integer("eos_token_id", 2);
  c.tied_embeddings = h.boolean("tie_word_embeddings", false);  // transformers' default for all three
  if (h.has("rope_scaling")) {
    const json& raw = h.raw()["rope_scaling"];
    if (!raw.is_object()) {
      h.fail("rope_scaling", raw.dump(),
             "an object such as {\"rope_type\": \"llama3\", \"factor\": 8.0, ...}");
    }
    const HfConfig rs(h.file(), raw, "rope_scaling.");
    const std::string type = rs.has("rope_type") ? rs.string("rope_type", "") : rs.string("type", "?");
    if (type != "llama3" && type != "default") {
      rs.fail(rs.has("rope_type") ? "rope_type" : "type", "\"" + type + "\"",
              "\"llama3\" (other RoPE scalings are not supported)");
    }
    if (type == "llama3") {
      c.rope_scaling = "llama3";
      c.rope_factor = rs.number("factor");
      c.rope_low_freq_factor = rs.number("low_freq_factor");
      c.rope_high_freq_factor = rs.number("high_freq_factor");
      c.rope_original_max_positions = rs.integer("original_max_position_embeddings");
    }
  }
  const bool moe = arch == "MixtralForCausalLM";
  if ((arch == "MistralForCausalLM" || moe) && h.has("sliding_window"))
    c.sliding_window = h.integer("sliding_window");
  if (moe) {
    c.n_experts = h.integer("num_local_experts");
    c.n_experts_per_token = h.integer("num_experts_per_tok");
    if (c.n_experts < 1) h.fail("num_local_experts", std::to_string(c.n_experts), "at least 1");
    if (c.n_experts_per_token < 1 || c.n_experts_per_token > c.n_experts) {
      h.fail("num_experts_per_tok", std::to_string(c.n_experts_per_token),
             "an integer in 1..num_local_experts (" + std::to_string(c.n_experts) + ")");
    }
  }
  if (arch == "Qwen2ForCausalLM" && h.boolean("use_sliding_window", false)) {
    c.sliding_window = h.integer("sliding_window");
  }
  const bool qkv_bias = arch == "Qwen2ForCausalLM" || h.boolean("attention_bias", false);
  const bool o_bias = arch == "LlamaForCausalLM" && h.boolean("attention_bias", false);
  const bool mlp_bias = arch == "LlamaForCausalLM" && h.boolean("mlp_bias", false);

  check_config(c, h.file().string());  // before any tensor is read or any layer written
  check_layers(h, "num_hidden_layers", c.n_layers, t.stored_layers("model.layers."));
  const Eigen::Index qd = Eigen::Index(c.n_heads) * c.head_dim;
  const Eigen::Index kd = Eigen::Index(c.n_kv_heads) * c.head_dim;
  m.tok_embeddings = t.matrix("model.embed_tokens.weight", c.vocab_size, c.dim);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights w;
    w.attention_norm = t.vector(p + "input_layernorm.weight", c.dim);
    w.wq = t.matrix(p + "self_attn.q_proj.weight", qd, c.dim);
    w.wk = t.matrix(p + "self_attn.k_proj.weight", kd, c.dim);
    w.wv = t.matrix(p + "self_attn.v_proj.weight", kd, c.dim);
    w.wo = t.matrix(p + "self_attn.o_proj.weight", c.dim, qd);
    if (qkv_bias) {
      w.bq = t.vector(p + "self_attn.q_proj.bias", qd);
      w.bk = t.vector(p + "self_attn.k_proj.bias", kd);
      w.bv = t.vector(p + "self_attn.v_proj.bias", kd);
    }
    if (o_bias) w.bo = t.vector(p + "self_attn.o_proj.bias", c.dim);
    w.ffn_norm = t.vector(p + "post_attention_layernorm.weight", c.dim);
    if (moe) {  // modeling_mixtral.py MixtralSparseMoeBlock: router `gate`, experts w1 (gate), w3 (up), w2
                // (down)
      const std::string b = p + "block_sparse_moe.";
      w.router = t.matrix(b + "gate.weight", c.n_experts, c.dim);
      for (int e = 0; e < c.n_experts; ++e) {
        const std::string q = b + "experts." + std::to_string(e) + ".";
        w.experts.push_back({t.matrix(q + "w1.weight", c.hidden_dim, c.dim),
                             t.matrix(q + "w2.weight", c.dim, c.hidden_dim),
                             t.matrix(q + "w3.weight", c.hidden_dim, c.dim)});
      }
      sink(c, l, std::move(w));
      continue;
    }
    w.w1 = t.matrix(p + "mlp.gate_proj.weight", c.hidden_dim, c.dim);
    w.w3 = t.matrix(p + "mlp.up_proj.weight", c.hidden_dim, c.dim);
    w.w2 = t.matrix(p + "mlp.down_proj.weight", c.dim, c.hidden_dim);
    if (mlp_bias) {
      w.b1 = t.vector(p + "mlp.gate_proj.bias", c.hidden_dim);
      w.b3 = t.vector(p + "mlp.up_proj.bias", c.hidden_dim);
      w.b2 = t.vector(p + "mlp.down_proj.bias", c.dim);
    }
    sink(c, l, std::move(w));
  }
  m.norm = t.vector("model.norm.weight", c.dim);
  m.output = (c.tied_embeddings || !t.has("lm_head.weight"))
                 ? m.tok_embeddings
                 : t.matrix("lm_head.weight", c.vocab_size, c.dim);
  if (!t.has("lm_head.weight")) c.tied_embeddings = true;
}

// GPT2LMHeadModel (transformers modeling_gpt2.py): Conv1D weights stored [in, out], fused c_attn.
void read_gpt2(const HfConfig& h, const Tensors& t, Model& m, const LayerSink& sink) {
  Config& c = m.config;
  c.family = "gpt2";
  c.dim = h.integer("n_embd");
  c.n_layers = h.integer("n_layer");
  c.n_heads = h.integer("n_head");
  c.n_kv_heads = c.n_heads;
  c.head_dim = c.n_heads > 0 ? c.dim / c.n_heads : 0;
  c.hidden_dim = h.integer("n_inner", 4 * c.dim);
  c.vocab_size = h.integer("vocab_size");
  c.seq_len = h.integer("n_positions");
  c.norm_eps = h.number("layer_norm_epsilon", 1e-5);
  c.norm = NormType::layernorm;
  c.positions = PositionKind::learned;
  c.ffn = FfnKind::mlp;
  const std::string act = h.string("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
    c.activation = Activation::gelu_tanh;
  } else if (act == "gelu") {
    c.activation = Activation::gelu;
  } else {
    h.fail("activation_function", "\"" + act + "\"", "gelu_new, gelu_pytorch_tanh or gelu");
  }
  if (!h.boolean("scale_attn_weights", true)) h.fail("scale_attn_weights", "false", "true");
  if (h.boolean("scale_attn_by_inverse_layer_idx", false))
    h.fail("scale_attn_by_inverse_layer_idx", "true", "false");
  c.bos_id = h.integer("bos_token_id", 50256);
  c.eos_id = h.integer("eos_token_id", 50256);
  c.tied_embeddings = true;
  // save_pretrained writes "transformer.h.0..."; the original hub files have no prefix.
  check_config(c, h.file().string());  // before any tensor is read or any layer written
  const std::string tp = t.has("transformer.wte.weight") ? "transformer." : "";
  check_layers(h, "n_layer", c.n_layers, t.stored_layers(tp + "h."));
  m.tok_embeddings = t.matrix(tp + "wte.weight", c.vocab_size, c.dim);
  m.pos_embeddings = t.matrix(tp + "wpe.weight", c.seq_len, c.dim);
  const Eigen::Index d = c.dim;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = tp + "h." + std::to_string(l) + ".";
    LayerWeights w;
    w.attention_norm = t.vector(p + "ln_1.weight", d);
    w.attention_norm_bias = t.vector(p + "ln_1.bias", d);
    const RowMatrix qkv = t.matrix(p + "attn.c_attn.weight", 3 * d, d, true).to_float();
    const Vec<float> qkv_b = t.vector(p + "attn.c_attn.bias", 3 * d);
    w.wq = qkv.topRows(d);
    w.wk = qkv.middleRows(d, d);
    w.wv = qkv.bottomRows(d);
    w.bq = qkv_b.head(d);
    w.bk = qkv_b.segment(d, d);
    w.bv = qkv_b.tail(d);
    w.wo = t.matrix(p + "attn.c_proj.weight", d, d, true);
    w.bo = t.vector(p + "attn.c_proj.bias", d);
    w.ffn_norm = t.vector(p + "ln_2.weight", d);
    w.ffn_norm_bias = t.vector(p + "ln_2.bias", d);
    w.w1 = t.matrix(p + "mlp.c_fc.weight", c.hidden_dim, d, true);
    w.b1 = t.vector(p + "mlp.c_fc.bias", c.hidden_dim);
    w.w2 = t.matrix(p + "mlp.c_proj.weight", d, c.hidden_dim, true);
    w.b2 = t.vector(p + "mlp.c_proj.bias", d);
    sink(c, l, std::move(w));
  }
  m.norm = t.vector(tp + "ln_f.weight", d);
  m.norm_bias = t.vector(tp + "ln_f.bias", d);
  m.output = m.tok_embeddings;
}

}  // namespace

std::vector<std::string> hf_architectures() {
  return {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "MixtralForCausalLM",
          "GPT2LMHeadModel"};
}

namespace {

// Reads a checkpoint folder, handing each layer to `sink`; the model is checked except for its layers.
HfCheckpoint read_hf(const fs::path& dir, const LayerSink& sink) {
  if (!fs::is_directory(dir))
    throw IoError(dir.string() + ": not a directory (expected a Hugging Face checkpoint folder)");
  HfCheckpoint ck;
  ck.source = dir;
  const fs::path cfg_file = dir / "config.json";
  if (!fs::is_regular_file(cfg_file))
    throw IoError(cfg_file.string() + ": missing (every checkpoint folder has one)");
  ck.config_json = read_text(cfg_file);
  ck.files.emplace_back("config.json", io::sha256_hex(ck.config_json));
  const HfConfig h(cfg_file, parse_json(cfg_file, ck.config_json));
  if (!h.has("architectures") || !h.raw()["architectures"].is_array() || h.raw()["architectures"].empty() ||
      !h.raw()["architectures"][0].is_string()) {
    h.fail("architectures", h.has("architectures") ? h.raw()["architectures"].dump() : "missing",
           "a list naming the architecture");
  }
  ck.architecture = h.raw()["architectures"][0].get<std::string>();
  std::string known;
  for (const auto& a : hf_architectures()) known += (known.empty() ? "" : ", ") + a;
  bool ok = false;
  for (const auto& a : hf_architectures()) ok = ok || a == ck.architecture;
  if (!ok) h.fail("architectures[0]", "\"" + ck.architecture + "\"", "one of " + known);
  const Tensors t(dir, ck.files);
  Model& m = ck.model;
  m.config.name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  if (ck.architecture == "GPT2LMHeadModel") {
    read_gpt2(h, t, m, sink);
  } else {
    read_llama_like(h, t, ck.architecture, m, sink);
  }
  const fs::path tok = dir / "tokenizer.json";
  if (fs::is_regular_file(tok)) {
    const std::string text = read_text(tok);
    ck.files.emplace_back("tokenizer.json", io::sha256_hex(text));
    m.tokenizer = Tokenizer::from_hf_json(text, tok.string(), m.config.bos_id, m.config.eos_id);
    // An id past the embedding rows: parsed again against the vocabulary to name its field.
    if (m.tokenizer.size() > m.config.vocab_size)
      BpeTokenizer::parse(text, tok.string(), m.config.vocab_size);
  }
  m.path = dir;
  m.validate(false);
  return ck;
}

}  // namespace

HfCheckpoint import_hf(const fs::path& dir, const fs::path& file, const io::OutputPolicy& policy) {
  HfCheckpoint ck;
  io::write_h5_atomic(file, policy, false, [&](io::H5File& f) {
    std::optional<ModelWriter> writer;
    ck = read_hf(dir, [&](const Config& c, int l, LayerWeights&& w) {
      if (!writer) writer.emplace(f, c);
      writer->write_layer(l, w);  // and dropped: one layer in memory at a time
    });
    if (!writer) writer.emplace(f, ck.model.config);  // no layers: finish() names the problem
    writer->finish(ck.model);
    f.set_attr("/", "hf_architecture", ck.architecture);
    f.set_attr("/", "hf_config", ck.config_json);
    f.set_attr("/", "source_dir", fs::absolute(ck.source).lexically_normal().string());
    std::vector<std::string> names, hashes;
    for (const auto& [n, h] : ck.files) {
      names.push_back(n);
      hashes.push_back(h);
    }
    f.write_strings("provenance/files", names);
    f.write_strings("provenance/sha256", hashes);
  });
  return ck;
}

}  // namespace lpemu::engine
