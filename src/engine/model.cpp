#include "lpemu/engine/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <numbers>
#include <optional>
#include <span>
#include <utility>

#include "lpemu/engine/bpe_tokenizer.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/io/hdf5.hpp"

#include <tbb/parallel_for.h>

namespace lpemu::engine {
namespace {

namespace fs = std::filesystem;

std::string file_msg(const io::H5File& f, const std::string& what) { return f.path().string() + ": " + what; }

// The narrowest of bf16, fp16 that holds every value exactly; fp32 when only float32 does.
WeightStorage narrowest_storage(std::span<const float> v) {
  bool bf16 = true;
  for (const float x : v) {
    std::uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    if (!std::isfinite(x)) return WeightStorage::fp32;
    bf16 = bf16 && (bits & 0xFFFFu) == 0;
  }
  if (bf16) return WeightStorage::bf16;
  std::vector<float> q(v.size());
  format::quantize(format::Registry::builtin().get("fp16"), v, std::span<float>(q));
  return std::memcmp(v.data(), q.data(), v.size_bytes()) == 0 ? WeightStorage::fp16 : WeightStorage::fp32;
}

// A weight matrix in its stored precision: a dataset stored in 16 bits stays 16-bit in memory, as
// bf16 or fp16, whichever holds its values exactly (float32 if neither does, e.g. non-finite values).
WeightMatrix read_matrix(const io::H5File& f, const std::string& name, Eigen::Index rows, Eigen::Index cols) {
  const auto check_shape = [&](const std::vector<std::size_t>& shape) {
    if (shape.size() != 2 || static_cast<Eigen::Index>(shape[0]) != rows ||
        static_cast<Eigen::Index>(shape[1]) != cols) {
      std::string got;
      for (const auto d : shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
      throw ShapeError(file_msg(f, "dataset '" + name + "' has shape [" + got + "], expected [" +
                                       std::to_string(rows) + ", " + std::to_string(cols) + "]"));
    }
  };
  if (f.stored_bits(name) == 16) {
    // bf16 / fp16 datasets: their codes as they are (no float32 copy), unless one is NaN or Inf.
    if (std::optional<io::Codes16> c = f.read_codes16(name)) {
      check_shape(c->shape);
      const bool bf16 = c->kind == "bf16";
      const std::uint16_t exp_mask = bf16 ? 0x7F80 : 0x7C00;
      const bool finite = std::none_of(c->codes.begin(), c->codes.end(),
                                       [&](std::uint16_t x) { return (x & exp_mask) == exp_mask; });
      if (finite) {
        return WeightMatrix::from_codes(bf16 ? WeightStorage::bf16 : WeightStorage::fp16, rows, cols,
                                        std::move(c->codes));
      }
    }
  }
  if (f.stored_bits(name) != 16) {
    // Read once, straight into the matrix the model keeps (allocated, not zero-filled).
    check_shape(f.shape(name));
    RowMatrix m(rows, cols);
    f.read_floats_into(name, std::span<float>(m.data(), static_cast<std::size_t>(m.size())));
    return WeightMatrix(std::move(m));
  }
  const io::Tensor t = f.read_floats(name);
  check_shape(t.shape);
  const std::span<const float> v(t.data);
  return WeightMatrix::stored_as(narrowest_storage(v), rows, cols, v);
}

Vec<float> read_vector(const io::H5File& f, const std::string& name, Eigen::Index n, bool optional = false) {
  if (optional && !f.exists(name)) return {};
  const io::Tensor t = f.read_floats(name);
  if (t.shape.size() != 1 || static_cast<Eigen::Index>(t.shape[0]) != n) {
    throw ShapeError(file_msg(f, "dataset '" + name + "' must be a vector of " + std::to_string(n)));
  }
  Vec<float> v(n);
  std::copy(t.data.begin(), t.data.end(), v.data());
  return v;
}

// An integer attribute of `obj` in 0..INT_MAX (a larger stored value is refused, never truncated).
int int_attr_of(const io::H5File& f, const std::string& obj, const std::string& name,
                std::optional<int> def) {
  const std::string what = obj == "/" ? "root attribute '" + name + "'" : obj + " attribute '" + name + "'";
  if (!f.has_attr(obj, name)) {
    if (def) return *def;
    throw SpecError(file_msg(f, what + " is missing (model schema: data/README.md)"));
  }
  const std::int64_t v = f.attr_int(obj, name);
  if (v < 0 || v > std::numeric_limits<int>::max()) {
    throw SpecError(file_msg(f, what + " = " + std::to_string(v) + ": expected an integer in 0.." +
                                    std::to_string(std::numeric_limits<int>::max())));
  }
  return static_cast<int>(v);
}

int int_attr(const io::H5File& f, const std::string& name, std::optional<int> def = std::nullopt) {
  return int_attr_of(f, "/", name, def);
}

std::string str_attr(const io::H5File& f, const std::string& name, const std::string& def) {
  return f.has_attr("/", name) ? f.attr_string("/", name) : def;
}

template <class E>
E pick(const io::H5File& f, const std::string& attr, const std::string& value,
       std::initializer_list<std::pair<const char*, E>> options) {
  std::string names;
  for (const auto& [n, e] : options) {
    if (value == n) return e;
    names += (names.empty() ? "" : ", ") + std::string(n);
  }
  throw SpecError(file_msg(f, "root attribute '" + attr + "' = \"" + value + "\": expected one of " + names));
}

// Weights keep the precision they were given: 16-bit weights are written as their codes, and a
// float32 matrix whose values are all bf16 (or fp16) values is stored in 16 bits too (read back
// exactly).
void write_matrix(io::H5File& f, const std::string& name, const WeightMatrix& w) {
  const std::vector<std::size_t> shape{static_cast<std::size_t>(w.rows()),
                                       static_cast<std::size_t>(w.cols())};
  if (w.storage() != WeightStorage::fp32) {
    f.write_codes16(name, shape, w.codes().data(), std::string(to_string(w.storage())));
    return;
  }
  RowMatrix buffer;
  const RowMatrix& m = w.view(buffer);  // the stored matrix itself
  const std::span<const float> v(m.data(), static_cast<std::size_t>(m.size()));
  const WeightStorage s = narrowest_storage(v);
  if (s == WeightStorage::fp32) {
    f.write_floats(name, shape, m.data());
    return;
  }
  std::vector<std::uint16_t> codes(v.size());
  format::encode(format::Registry::builtin().get(to_string(s)), v, std::span<std::uint16_t>(codes));
  f.write_codes16(name, shape, codes.data(), std::string(to_string(s)));
}

void write_vector(io::H5File& f, const std::string& name, const Vec<float>& v) {
  if (v.size() == 0) return;
  f.write_floats(name, {static_cast<std::size_t>(v.size())}, v.data());
}

}  // namespace

std::vector<double> rope_frequencies(const Config& c) {
  const int half = c.head_dim / 2;
  std::vector<double> f(static_cast<std::size_t>(std::max(half, 0)));
  for (int j = 0; j < half; ++j)
    f[static_cast<std::size_t>(j)] = std::pow(c.rope_theta, -2.0 * j / c.head_dim);
  if (c.rope_scaling == "llama3") {
    // Hugging Face transformers, modeling_rope_utils.py `_compute_llama3_parameters`.
    const double old_len = c.rope_original_max_positions;
    const double low_wavelen = old_len / c.rope_low_freq_factor;
    const double high_wavelen = old_len / c.rope_high_freq_factor;
    for (double& v : f) {
      const double wavelen = 2 * std::numbers::pi / v;
      if (wavelen > low_wavelen) {
        v /= c.rope_factor;
      } else if (!(wavelen < high_wavelen)) {
        const double smooth =
            (old_len / wavelen - c.rope_low_freq_factor) / (c.rope_high_freq_factor - c.rope_low_freq_factor);
        v = (1 - smooth) * v / c.rope_factor + smooth * v;
      }
    }
  } else if (c.rope_scaling != "none") {
    throw SpecError("model '" + c.name + "': rope_scaling \"" + c.rope_scaling +
                    "\": expected none or llama3");
  }
  return f;
}

namespace {

void need(bool ok, const std::string& what) {
  if (!ok) throw ShapeError("model: " + what);
}

}  // namespace

void Model::validate(bool with_layers) const {
  const Config& c = config;
  check_config(c, path.empty() ? "model '" + c.name + "'" : path.string());
  need(c.dim > 0 && c.n_layers > 0 && c.n_heads > 0 && c.n_kv_heads > 0 && c.head_dim > 0 &&
           c.vocab_size > 0 && c.hidden_dim > 0 && c.seq_len > 0,
       "dim, n_layers, n_heads, n_kv_heads, head_dim, hidden_dim, vocab_size and seq_len must be positive");
  need(c.n_heads % c.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads");
  need(tok_embeddings.rows() == c.vocab_size && tok_embeddings.cols() == c.dim,
       "tok_embeddings is not [vocab, dim]");
  need(output.rows() == c.vocab_size && output.cols() == c.dim, "output is not [vocab, dim]");
  if (with_layers) {
    need(static_cast<int>(layers.size()) == c.n_layers, "layer count disagrees with n_layers");
    for (const auto& l : layers) validate_layer(l);
  }
  need(c.n_experts == 0 ||
           (c.ffn == FfnKind::swiglu && c.n_experts_per_token >= 1 && c.n_experts_per_token <= c.n_experts),
       "a mixture of experts needs ffn = swiglu and 1 <= n_experts_per_token <= n_experts");
  need(c.positions == PositionKind::rope || (pos_embeddings.rows() >= 1 && pos_embeddings.cols() == c.dim),
       "pos_embeddings is not [seq_len, dim]");
}

void Model::validate_layer(const LayerWeights& l) const {
  const Config& c = config;
  const Eigen::Index qd = static_cast<Eigen::Index>(c.n_heads) * c.head_dim;
  const Eigen::Index kd = static_cast<Eigen::Index>(c.n_kv_heads) * c.head_dim;
  need(l.wq.rows() == qd && l.wq.cols() == c.dim, "wq is not [n_heads·head_dim, dim]");
  need(l.wk.rows() == kd && l.wk.cols() == c.dim, "wk is not [n_kv_heads·head_dim, dim]");
  need(l.wv.rows() == kd && l.wv.cols() == c.dim, "wv is not [n_kv_heads·head_dim, dim]");
  need(l.wo.rows() == c.dim && l.wo.cols() == qd, "wo is not [dim, n_heads·head_dim]");
  if (c.n_experts > 0) {
    need(l.router.rows() == c.n_experts && l.router.cols() == c.dim, "router is not [n_experts, dim]");
    need(static_cast<int>(l.experts.size()) == c.n_experts, "expert count disagrees with n_experts");
    for (const auto& e : l.experts) {
      need(e.w1.rows() == c.hidden_dim && e.w1.cols() == c.dim, "expert w1 is not [hidden_dim, dim]");
      need(e.w2.rows() == c.dim && e.w2.cols() == c.hidden_dim, "expert w2 is not [dim, hidden_dim]");
      need(e.w3.rows() == c.hidden_dim && e.w3.cols() == c.dim, "expert w3 is not [hidden_dim, dim]");
    }
    return;
  }
  need(l.w1.rows() == c.hidden_dim && l.w1.cols() == c.dim, "w1 is not [hidden_dim, dim]");
  need(l.w2.rows() == c.dim && l.w2.cols() == c.hidden_dim, "w2 is not [dim, hidden_dim]");
  need(c.ffn == FfnKind::mlp || (l.w3.rows() == c.hidden_dim && l.w3.cols() == c.dim),
       "w3 is not [hidden_dim, dim]");
}

std::size_t Model::weight_bytes() const {
  const auto vec = [](const Vec<float>& v) { return static_cast<std::size_t>(v.size()) * sizeof(float); };
  std::size_t n = tok_embeddings.bytes() + pos_embeddings.bytes() + vec(norm) + vec(norm_bias);
  if (!output.shares_storage(tok_embeddings)) n += output.bytes();
  for (const auto& l : layers) {
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3, &l.router})
      n += w->bytes();
    for (const auto& e : l.experts) n += e.w1.bytes() + e.w2.bytes() + e.w3.bytes();
    for (const Vec<float>* v : {&l.attention_norm, &l.attention_norm_bias, &l.bq, &l.bk, &l.bv, &l.bo,
                                &l.ffn_norm, &l.ffn_norm_bias, &l.b1, &l.b2, &l.b3})
      n += vec(*v);
  }
  return n;
}

Model load_model(const fs::path& file) {
  const io::H5File f = io::H5File::open(file);
  Model m;
  m.path = file;
  Config& c = m.config;
  c.name = str_attr(f, "model_name", file.stem().string());
  c.family = str_attr(f, "family", "llama");
  const bool gpt2 = pick<bool>(f, "family", c.family, {{"llama", false}, {"gpt2", true}});
  c.dim = int_attr(f, "dim");
  c.n_layers = int_attr(f, "n_layers");
  c.n_heads = int_attr(f, "n_heads");
  c.n_kv_heads = int_attr(f, "n_kv_heads", c.n_heads);
  c.head_dim = int_attr(f, "head_dim", c.n_heads > 0 ? c.dim / c.n_heads : 0);
  c.hidden_dim = int_attr(f, "hidden_dim");
  c.vocab_size = int_attr(f, "vocab_size");
  c.seq_len = int_attr(f, "seq_len");
  c.norm_eps = f.has_attr("/", "norm_eps") ? f.attr_double("/", "norm_eps") : 1e-5;
  c.rope_theta = f.has_attr("/", "rope_theta") ? f.attr_double("/", "rope_theta") : 10000.0;
  c.norm = pick<NormType>(f, "norm", str_attr(f, "norm", gpt2 ? "layernorm" : "rmsnorm"),
                          {{"rmsnorm", NormType::rmsnorm}, {"layernorm", NormType::layernorm}});
  c.rope_style = pick<RopeStyle>(f, "rope_style", str_attr(f, "rope_style", "interleaved"),
                                 {{"interleaved", RopeStyle::interleaved}, {"half", RopeStyle::half}});
  c.positions = pick<PositionKind>(f, "positions", str_attr(f, "positions", gpt2 ? "learned" : "rope"),
                                   {{"rope", PositionKind::rope}, {"learned", PositionKind::learned}});
  c.ffn = pick<FfnKind>(f, "ffn", str_attr(f, "ffn", gpt2 ? "mlp" : "swiglu"),
                        {{"swiglu", FfnKind::swiglu}, {"mlp", FfnKind::mlp}});
  c.activation = pick<Activation>(
      f, "activation", str_attr(f, "activation", gpt2 ? "gelu_tanh" : "silu"),
      {{"silu", Activation::silu}, {"gelu", Activation::gelu}, {"gelu_tanh", Activation::gelu_tanh}});
  c.tied_embeddings = int_attr(f, "tied_embeddings", 0) != 0;
  c.bos_id = int_attr(f, "bos_id", 1);
  c.eos_id = int_attr(f, "eos_id", 2);
  c.rope_scaling = str_attr(f, "rope_scaling", "none");
  pick<int>(f, "rope_scaling", c.rope_scaling, {{"none", 0}, {"llama3", 1}});
  if (c.rope_scaling == "llama3") {
    c.rope_factor = f.attr_double("/", "rope_factor");
    c.rope_low_freq_factor = f.attr_double("/", "rope_low_freq_factor");
    c.rope_high_freq_factor = f.attr_double("/", "rope_high_freq_factor");
    c.rope_original_max_positions = int_attr(f, "rope_original_max_positions");
  }
  c.sliding_window = int_attr(f, "sliding_window", 0);
  c.n_experts = int_attr(f, "n_experts", 0);
  c.n_experts_per_token = int_attr(f, "n_experts_per_token", c.n_experts > 0 ? 2 : 0);

  const Eigen::Index qd = static_cast<Eigen::Index>(c.n_heads) * c.head_dim;
  const Eigen::Index kd = static_cast<Eigen::Index>(c.n_kv_heads) * c.head_dim;
  if (f.exists("layers") && f.list("layers").size() != static_cast<std::size_t>(c.n_layers)) {
    throw SpecError(file_msg(f, "root attribute 'n_layers' = " + std::to_string(c.n_layers) +
                                    ": the file stores " + std::to_string(f.list("layers").size()) +
                                    " layers under /layers"));
  }
  // The datasets are read in parallel, one job per layer (and per embedding matrix); an error is
  // that of the first failing job in file order, as a serial read would report.
  // Without a /layers group, layer 0's read names the missing dataset.
  const int n_layers = f.exists("layers") ? c.n_layers : std::min(c.n_layers, 1);
  m.layers.resize(static_cast<std::size_t>(n_layers));
  std::vector<std::function<void()>> jobs;
  jobs.emplace_back([&] { m.tok_embeddings = read_matrix(f, "tok_embeddings", c.vocab_size, c.dim); });
  if (c.positions == PositionKind::learned)
    jobs.emplace_back([&] { m.pos_embeddings = read_matrix(f, "pos_embeddings", c.seq_len, c.dim); });
  for (int l = 0; l < n_layers; ++l)
    jobs.emplace_back([&, l] {
      const std::string p = "layers/" + std::to_string(l) + "/";
      LayerWeights& w = m.layers[static_cast<std::size_t>(l)];
      w.attention_norm = read_vector(f, p + "attention_norm", c.dim);
      w.attention_norm_bias = read_vector(f, p + "attention_norm_bias", c.dim, true);
      w.wq = read_matrix(f, p + "attention/wq", qd, c.dim);
      w.wk = read_matrix(f, p + "attention/wk", kd, c.dim);
      w.wv = read_matrix(f, p + "attention/wv", kd, c.dim);
      w.wo = read_matrix(f, p + "attention/wo", c.dim, qd);
      w.bq = read_vector(f, p + "attention/bq", qd, true);
      w.bk = read_vector(f, p + "attention/bk", kd, true);
      w.bv = read_vector(f, p + "attention/bv", kd, true);
      w.bo = read_vector(f, p + "attention/bo", c.dim, true);
      w.ffn_norm = read_vector(f, p + "ffn_norm", c.dim);
      w.ffn_norm_bias = read_vector(f, p + "ffn_norm_bias", c.dim, true);
      if (c.n_experts > 0) {
        w.router = read_matrix(f, p + "feed_forward/router", c.n_experts, c.dim);
        for (int e = 0; e < c.n_experts; ++e) {
          const std::string q = p + "feed_forward/experts/" + std::to_string(e) + "/";
          w.experts.push_back({read_matrix(f, q + "w1", c.hidden_dim, c.dim),
                               read_matrix(f, q + "w2", c.dim, c.hidden_dim),
                               read_matrix(f, q + "w3", c.hidden_dim, c.dim)});
        }
        return;
      }
      w.w1 = read_matrix(f, p + "feed_forward/w1", c.hidden_dim, c.dim);
      w.w2 = read_matrix(f, p + "feed_forward/w2", c.dim, c.hidden_dim);
      if (c.ffn == FfnKind::swiglu) w.w3 = read_matrix(f, p + "feed_forward/w3", c.hidden_dim, c.dim);
      w.b1 = read_vector(f, p + "feed_forward/b1", c.hidden_dim, true);
      w.b2 = read_vector(f, p + "feed_forward/b2", c.dim, true);
      w.b3 = read_vector(f, p + "feed_forward/b3", c.hidden_dim, true);
    });
  jobs.emplace_back([&] {
    m.norm = read_vector(f, "norm", c.dim);
    m.norm_bias = read_vector(f, "norm_bias", c.dim, true);
  });
  const bool own_output = f.exists("output");
  if (own_output) jobs.emplace_back([&] { m.output = read_matrix(f, "output", c.vocab_size, c.dim); });
  std::vector<std::exception_ptr> failed(jobs.size());
  tbb::parallel_for(std::size_t{0}, jobs.size(), [&](std::size_t i) {
    try {
      jobs[i]();
    } catch (...) {
      failed[i] = std::current_exception();
    }
  });
  for (const auto& e : failed) {
    if (e) std::rethrow_exception(e);
  }
  if (!own_output) m.output = m.tok_embeddings;
  // Tied embeddings are held once.
  if (c.tied_embeddings && m.output.same_bits(m.tok_embeddings)) m.output = m.tok_embeddings;
  if (f.exists("tokenizer/pieces")) {
    const auto pieces = f.read_strings("tokenizer/pieces");
    const io::Tensor scores = f.read_floats("tokenizer/scores");
    const int off = int_attr_of(f, "tokenizer", "byte_fallback_offset", 3);
    m.tokenizer = Tokenizer(pieces, scores.data, c.bos_id, c.eos_id, off);
  } else if (f.exists("tokenizer/hf_json")) {
    const std::string json = f.read_strings("tokenizer/hf_json").at(0);
    const std::string origin = f.path().string() + ":/tokenizer/hf_json";
    m.tokenizer = Tokenizer::from_hf_json(json, origin, c.bos_id, c.eos_id);
    // An id past the embedding rows: parsed again against the vocabulary to name its field.
    if (m.tokenizer.size() > c.vocab_size) BpeTokenizer::parse(json, origin, c.vocab_size);
  }
  m.validate();
  return m;
}

void save_model(const Model& model, const fs::path& file) {
  model.validate();
  io::write_h5_atomic(file, io::OutputPolicy{true, {}}, false, [&](io::H5File& f) {
    ModelWriter w(f, model.config);
    for (std::size_t l = 0; l < model.layers.size(); ++l) w.write_layer(static_cast<int>(l), model.layers[l]);
    w.finish(model);
  });
}

ModelWriter::ModelWriter(io::H5File& file, const Config& config) : file_(file), config_(config) {
  const Config& c = config_;
  io::H5File& f = file_;
  f.set_attr("/", "schema", std::string("llama2c-hdf5"));
  f.set_attr("/", "schema_version", std::int64_t{1});
  f.set_attr("/", "model_name", c.name);
  f.set_attr("/", "family", c.family);
  for (const auto& [k, v] : {std::pair<const char*, int>{"dim", c.dim},
                             {"n_layers", c.n_layers},
                             {"n_heads", c.n_heads},
                             {"n_kv_heads", c.n_kv_heads},
                             {"head_dim", c.head_dim},
                             {"hidden_dim", c.hidden_dim},
                             {"vocab_size", c.vocab_size},
                             {"seq_len", c.seq_len},
                             {"tied_embeddings", c.tied_embeddings ? 1 : 0},
                             {"bos_id", c.bos_id},
                             {"eos_id", c.eos_id}}) {
    f.set_attr("/", k, std::int64_t{v});
  }
  f.set_attr("/", "norm_eps", c.norm_eps);
  if (c.sliding_window > 0) f.set_attr("/", "sliding_window", std::int64_t{c.sliding_window});
  if (c.n_experts > 0) {
    f.set_attr("/", "n_experts", std::int64_t{c.n_experts});
    f.set_attr("/", "n_experts_per_token", std::int64_t{c.n_experts_per_token});
  }
  if (c.rope_scaling != "none") {
    f.set_attr("/", "rope_scaling", c.rope_scaling);
    f.set_attr("/", "rope_factor", c.rope_factor);
    f.set_attr("/", "rope_low_freq_factor", c.rope_low_freq_factor);
    f.set_attr("/", "rope_high_freq_factor", c.rope_high_freq_factor);
    f.set_attr("/", "rope_original_max_positions", std::int64_t{c.rope_original_max_positions});
  }
  f.set_attr("/", "rope_theta", c.rope_theta);
  f.set_attr("/", "norm", std::string(c.norm == NormType::rmsnorm ? "rmsnorm" : "layernorm"));
  f.set_attr("/", "rope_style", std::string(c.rope_style == RopeStyle::interleaved ? "interleaved" : "half"));
  f.set_attr("/", "positions", std::string(c.positions == PositionKind::rope ? "rope" : "learned"));
  f.set_attr("/", "ffn", std::string(c.ffn == FfnKind::swiglu ? "swiglu" : "mlp"));
  f.set_attr("/", "activation",
             std::string(c.activation == Activation::silu   ? "silu"
                         : c.activation == Activation::gelu ? "gelu"
                                                            : "gelu_tanh"));
}

void ModelWriter::write_layer(int index, const LayerWeights& layer) {
  if (index != written_) {
    throw Error("model writer: layer " + std::to_string(index) + " written after " +
                std::to_string(written_) + " layer(s); expected layer " + std::to_string(written_));
  }
  Model shape;
  shape.config = config_;
  shape.validate_layer(layer);
  io::H5File& f = file_;
  const std::string p = "layers/" + std::to_string(index) + "/";
  const LayerWeights& w = layer;
  write_vector(f, p + "attention_norm", w.attention_norm);
  write_vector(f, p + "attention_norm_bias", w.attention_norm_bias);
  write_matrix(f, p + "attention/wq", w.wq);
  write_matrix(f, p + "attention/wk", w.wk);
  write_matrix(f, p + "attention/wv", w.wv);
  write_matrix(f, p + "attention/wo", w.wo);
  write_vector(f, p + "attention/bq", w.bq);
  write_vector(f, p + "attention/bk", w.bk);
  write_vector(f, p + "attention/bv", w.bv);
  write_vector(f, p + "attention/bo", w.bo);
  write_vector(f, p + "ffn_norm", w.ffn_norm);
  write_vector(f, p + "ffn_norm_bias", w.ffn_norm_bias);
  if (w.router.size() != 0) write_matrix(f, p + "feed_forward/router", w.router);
  for (std::size_t e = 0; e < w.experts.size(); ++e) {
    const std::string q = p + "feed_forward/experts/" + std::to_string(e) + "/";
    write_matrix(f, q + "w1", w.experts[e].w1);
    write_matrix(f, q + "w2", w.experts[e].w2);
    write_matrix(f, q + "w3", w.experts[e].w3);
  }
  if (w.w1.size() != 0) write_matrix(f, p + "feed_forward/w1", w.w1);
  if (w.w2.size() != 0) write_matrix(f, p + "feed_forward/w2", w.w2);
  if (w.w3.size() != 0) write_matrix(f, p + "feed_forward/w3", w.w3);
  write_vector(f, p + "feed_forward/b1", w.b1);
  write_vector(f, p + "feed_forward/b2", w.b2);
  write_vector(f, p + "feed_forward/b3", w.b3);
  ++written_;
}

void ModelWriter::finish(const Model& model) {
  model.validate(false);
  if (written_ != config_.n_layers) {
    throw ShapeError("model: " + std::to_string(written_) +
                     " layer(s) written, n_layers = " + std::to_string(config_.n_layers));
  }
  io::H5File& f = file_;
  write_matrix(f, "tok_embeddings", model.tok_embeddings);
  if (model.pos_embeddings.size() != 0) write_matrix(f, "pos_embeddings", model.pos_embeddings);
  write_vector(f, "norm", model.norm);
  write_vector(f, "norm_bias", model.norm_bias);
  write_matrix(f, "output", model.output);
  if (!model.tokenizer.hf_json().empty()) {
    f.write_strings("tokenizer/hf_json", {model.tokenizer.hf_json()});
  } else if (!model.tokenizer.empty()) {
    std::vector<std::string> pieces;
    std::vector<float> scores;
    for (int i = 0; i < model.tokenizer.size(); ++i) {
      pieces.push_back(model.tokenizer.piece(i));
      scores.push_back(model.tokenizer.score(i));
    }
    f.write_strings("tokenizer/pieces", pieces);
    f.write_floats("tokenizer/scores", {scores.size()}, scores.data());
  }
}

fs::path resolve_model_path(const std::string& name_or_path, const std::vector<fs::path>& search_dirs) {
  if (fs::is_regular_file(name_or_path)) return name_or_path;
  std::vector<fs::path> dirs = search_dirs;
  if (const char* env = std::getenv("LPEMU_DATA_DIR")) dirs.emplace_back(env);
  dirs.push_back(fs::current_path());
  std::string tried;
  for (const auto& d : dirs) {
    for (const fs::path& c :
         {d / "data" / "models" / name_or_path / "model.h5", d / "models" / name_or_path / "model.h5"}) {
      if (fs::is_regular_file(c)) return c;
      tried += " " + c.string();
    }
  }
  throw IoError("model '" + name_or_path + "' is neither a file nor a shipped model; tried:" + tried);
}

}  // namespace lpemu::engine
