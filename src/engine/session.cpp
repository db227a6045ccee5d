#include "lpemu/engine/session.hpp"

#include <algorithm>
#include <bit>
#include <map>
#include <set>
#include <tuple>

#include "lpemu/block/quantize.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/engine/ops.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"

namespace lpemu::engine {

std::uint64_t point_stream(std::string_view tensor, int layer, int head, Role role) {
  // FNV-1a of the tensor name: a build-independent stream id.
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : tensor) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h ^ (static_cast<std::uint64_t>(layer + 1) << 40) ^ (static_cast<std::uint64_t>(head + 1) << 20) ^
         static_cast<std::uint64_t>(role);
}

namespace {

template <class T>
Mat<T> to_t(const RowMatrix& m) {
  if constexpr (std::is_same_v<T, float>) {
    return m;
  } else {
    return m.template cast<T>();
  }
}

template <class T>
Vec<T> to_t(const Vec<float>& v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return v.template cast<T>();
  }
}

template <class T>
RowMatrix to_f(const Mat<T>& m) {
  if constexpr (std::is_same_v<T, float>) {
    return m;
  } else {
    return m.template cast<float>();
  }
}

// A weight in the compute type. Without quantisation or a datapath it is the model's own matrix:
// float32 storage used in place (float compute), 16-bit storage decoded by the float GEMM panel by
// panel (or, for another GEMM strategy, into a reusable buffer). Otherwise an owned copy: converted
// to double, or the quantised values (kept for the session's life). A weight on a datapath GEMM is
// held as its encoding only, `values` then an empty matrix.
template <class T>
struct WeightT {
  std::shared_ptr<const Mat<T>> values;  ///< the values (empty: encoded only), or null: use `stored`
  const WeightMatrix* stored = nullptr;  ///< 16-bit storage decoded on use
};

template <class T>
struct ExpertT {
  WeightT<T> w1, w2, w3;
};

template <class T>
struct LayerT {
  WeightT<T> wq, wk, wv, wo, w1, w2, w3;
  WeightT<T> router;                ///< mixture of experts: the gate [n_experts, dim]
  std::vector<ExpertT<T>> experts;  ///< mixture of experts
  std::map<std::string, std::shared_ptr<const EncodedOperand>, std::less<>>
      encoded;  ///< weights on a datapath
  Vec<T> bq, bk, bv, bo, b1, b2, b3;
  Vec<T> attention_norm, attention_norm_bias, ffn_norm, ffn_norm_bias;
  Mat<T> k_cache, v_cache;
};

}  // namespace

struct Session::Impl {
  virtual ~Impl() = default;
  virtual RowMatrix forward(std::span<const int> tokens) = 0;
  virtual void forward_batch(std::span<const std::span<const int>> sequences, RowMatrix& logits) = 0;
  const Model* model = nullptr;
  int pos = 0;
  int max_tokens = 0;
};

namespace {

template <class T>
class ImplT final : public Session::Impl {
 public:
  ImplT(const Model& m, const PrecisionPlan& plan, SessionOptions opts)
      : plan_(plan), opts_(std::move(opts)) {
    model = &m;
    const Config& c = m.config;
    max_tokens = opts_.max_tokens > 0 ? opts_.max_tokens : c.seq_len;
    if (opts_.quantizers == nullptr) {
      own_quantizers_ = QuantizerFactory::standard(format::Registry::builtin());
      opts_.quantizers = &own_quantizers_;
    }
    if (opts_.gemms == nullptr) {
      own_gemms_ = GemmFactory::builtin();
      opts_.gemms = &own_gemms_;
    }
    // Resolve every (role, layer, kind) once.
    for (const Role r : kAllRoles) {
      for (int l = -1; l < c.n_layers; ++l) {
        for (const LayerKind k : {LayerKind::attention, LayerKind::mlp, LayerKind::head}) {
          if ((l < 0) != (k == LayerKind::head)) continue;
          if (auto spec = plan_.resolve(r, l, k, c.n_layers)) {
            quant_[{r, l, k}] = std::shared_ptr<const Quantizer>(opts_.quantizers->make(*spec));
          }
        }
      }
    }
    // Every GEMM site's strategy; operands that cannot enter its datapath exactly are an error
    // unless the plan asks for a conversion (then a quantiser of its own, run before the GEMM).
    const auto site = [&](int l, LayerKind k, std::string_view tensor) {
      const GemmChoice choice = plan_.resolve_gemm_site(l, k, tensor, c.n_layers);
      Site st;
      st.gemm = opts_.gemms->make(choice.datapath);
      const bool head = k == LayerKind::head;
      const bool expert = tensor.starts_with("expert_");
      st.roles[0] = head                 ? Role::lm_head_input
                    : expert             ? Role::expert_input
                    : tensor == "router" ? Role::router_input
                                         : Role::linear_input;
      st.roles[1] = head                 ? Role::lm_head
                    : expert             ? Role::expert_weights
                    : tensor == "router" ? Role::router_weights
                                         : Role::weights;
      const datapath::Datapath* dp = st.gemm->datapath();
      if (dp != nullptr) {
        const Quantizer* qs[2] = {find(st.roles[0], l, k), find(st.roles[1], l, k)};
        for (int side = 0; side < 2; ++side) {
          const std::string why = datapath_operand_problem(*dp, side == 0, qs[side], "");
          if (why.empty()) continue;
          if (!choice.convert) {
            throw Error((choice.origin.empty() ? plan_.origin : choice.origin) + ": GEMM '" +
                        std::string(tensor) + "' (layer " + std::to_string(l) + "): " + why +
                        "; quantise it to a format the datapath takes, or ask for a conversion "
                        "with gemm = { datapath = \"" +
                        dp->name + "\", convert = true }");
          }
          QuantSpec spec;
          spec.options.overflow = format::Overflow::saturate;
          st.convert[side] = make_block_quantizer(conversion_format(*dp, side == 0), spec);
        }
      }
      sites_[{l, k, std::string(tensor)}] = std::move(st);
    };
    // Attention's GEMMs: operands are q / k (kv_cache when set) and probs / v (kv_cache), which
    // must enter the datapath exactly as their element formats.
    const auto attention_site = [&](int l, std::string_view tensor) {
      const GemmChoice choice = plan_.resolve_gemm_site(l, LayerKind::attention, tensor, c.n_layers);
      Site st;
      st.gemm = opts_.gemms->make(choice.datapath);
      if (const datapath::Datapath* dp = st.gemm->datapath()) {
        const auto role_q = [&](Role r) {
          const Quantizer* kv = find(Role::kv_cache, l, LayerKind::attention);
          return r != Role::q && r != Role::probs && kv != nullptr ? kv : find(r, l, LayerKind::attention);
        };
        const Role roles[2] = {tensor == "qk" ? Role::q : Role::probs, tensor == "qk" ? Role::k : Role::v};
        for (int side = 0; side < 2; ++side) {
          const Quantizer* q = role_q(roles[side]);
          const std::string why =
              datapath_operand_problem(*dp, side == 0, q, "", "attention operands take element formats");
          if (!why.empty()) {
            throw Error((choice.origin.empty() ? plan_.origin : choice.origin) + ": attention GEMM '" +
                        std::string(tensor) + "' (layer " + std::to_string(l) + "): " + why);
          }
          st.formats[side] = q != nullptr ? q->element_format().name : std::string("fp32");
        }
      }
      sites_[{l, LayerKind::attention, std::string(tensor)}] = std::move(st);
    };
    for (int l = 0; l < c.n_layers; ++l) {
      attention_site(l, "qk");
      attention_site(l, "pv");
      for (const char* t : {"wq", "wk", "wv", "wo"}) site(l, LayerKind::attention, t);
      if (c.n_experts > 0) {
        for (const char* t : {"router", "expert_w1", "expert_w2", "expert_w3"}) site(l, LayerKind::mlp, t);
      } else {
        for (const char* t : {"w1", "w2", "w3"}) site(l, LayerKind::mlp, t);
      }
    }
    site(-1, LayerKind::head, "output");
    const Eigen::Index kd = static_cast<Eigen::Index>(c.n_kv_heads) * c.head_dim;
    for (int l = 0; l < c.n_layers; ++l) {
      const LayerWeights& w = m.layers[static_cast<std::size_t>(l)];
      LayerT<T> t;
      const auto weight = [&](const WeightMatrix& src, LayerKind k, const std::string& name,
                              const std::string& site_name) {
        std::shared_ptr<const EncodedOperand> encoded;
        WeightT<T> x = make_weight(src, l, k, names_.intern(name), site_name, encoded);
        if (encoded) t.encoded[name] = std::move(encoded);
        return x;
      };
      t.wq = weight(w.wq, LayerKind::attention, "wq", "wq");
      t.wk = weight(w.wk, LayerKind::attention, "wk", "wk");
      t.wv = weight(w.wv, LayerKind::attention, "wv", "wv");
      t.wo = weight(w.wo, LayerKind::attention, "wo", "wo");
      if (c.n_experts > 0) {
        t.router = weight(w.router, LayerKind::mlp, "router", "router");
        for (std::size_t e = 0; e < w.experts.size(); ++e) {
          const std::string en = expert_name(static_cast<int>(e));
          t.experts.push_back({weight(w.experts[e].w1, LayerKind::mlp, en + "w1", "expert_w1"),
                               weight(w.experts[e].w2, LayerKind::mlp, en + "w2", "expert_w2"),
                               weight(w.experts[e].w3, LayerKind::mlp, en + "w3", "expert_w3")});
        }
      } else {
        t.w1 = weight(w.w1, LayerKind::mlp, "w1", "w1");
        t.w2 = weight(w.w2, LayerKind::mlp, "w2", "w2");
        t.w3 = weight(w.w3, LayerKind::mlp, "w3", "w3");
      }
      t.bq = to_t<T>(w.bq);
      t.bk = to_t<T>(w.bk);
      t.bv = to_t<T>(w.bv);
      t.bo = to_t<T>(w.bo);
      t.b1 = to_t<T>(w.b1);
      t.b2 = to_t<T>(w.b2);
      t.b3 = to_t<T>(w.b3);
      t.attention_norm = to_t<T>(w.attention_norm);
      t.attention_norm_bias = to_t<T>(w.attention_norm_bias);
      t.ffn_norm = to_t<T>(w.ffn_norm);
      t.ffn_norm_bias = to_t<T>(w.ffn_norm_bias);
      t.k_cache = Mat<T>::Zero(max_tokens, kd);
      t.v_cache = Mat<T>::Zero(max_tokens, kd);
      layers_.push_back(std::move(t));
    }
    norm_ = to_t<T>(m.norm);
    norm_bias_ = to_t<T>(m.norm_bias);
    if (c.positions == PositionKind::rope) inv_freq_ = rope_frequencies(c);
    output_ = make_weight(m.output, -1, LayerKind::head, "output", "output", output_encoded_);
    weight_scratch_ = Mat<T>();  // freed once every weight is prepared
  }

  RowMatrix forward(std::span<const int> tokens) override {
    const int n = static_cast<int>(tokens.size());
    if (n == 0) return {};
    check_positions(pos, n);
    const std::vector<Segment> segs{Segment{tokens, pos, 0, n, -1}};
    RowMatrix logits;
    run(segs, logits);
    pos += n;
    return logits;
  }

  void forward_batch(std::span<const std::span<const int>> sequences, RowMatrix& logits) override {
    std::vector<Segment> segs;
    Eigen::Index rows = 0;
    for (const std::span<const int> t : sequences) {
      const int n = static_cast<int>(t.size());
      check_positions(0, n);
      if (n > 0) segs.push_back(Segment{t, 0, rows, n, static_cast<int>(segs.size())});
      rows += n;
    }
    pos = 0;
    if (segs.empty()) {
      logits.resize(0, model->config.vocab_size);
      return;
    }
    // Each sequence's own cache for the call, as if it ran alone after reset() (kept between
    // calls, so that batches of one shape reuse them).
    const Config& c = model->config;
    const Eigen::Index kd = static_cast<Eigen::Index>(c.n_kv_heads) * c.head_dim;
    batch_cache_.resize(std::max(batch_cache_.size(), segs.size() * static_cast<std::size_t>(c.n_layers)));
    for (const Segment& s : segs) {
      for (int l = 0; l < c.n_layers; ++l) {
        auto& kv = batch_cache_[cache_index(s, l)];
        kv.first.resize(s.n, kd);
        kv.second.resize(s.n, kd);
      }
    }
    run(segs, logits);
  }

 private:
  // One sequence of a forward call: its tokens, its first position, its rows in the call's
  // matrices, and its KV cache (slot -1: the session's own; else a batch cache of the call).
  struct Segment {
    std::span<const int> tokens;
    int p0 = 0;
    Eigen::Index r0 = 0;
    int n = 0;
    int slot = -1;
  };

  std::size_t cache_index(const Segment& s, int l) const {
    return static_cast<std::size_t>(s.slot) * static_cast<std::size_t>(model->config.n_layers) +
           static_cast<std::size_t>(l);
  }
  Mat<T>& k_cache(const Segment& s, int l) {
    return s.slot < 0 ? layers_[static_cast<std::size_t>(l)].k_cache : batch_cache_[cache_index(s, l)].first;
  }
  Mat<T>& v_cache(const Segment& s, int l) {
    return s.slot < 0 ? layers_[static_cast<std::size_t>(l)].v_cache : batch_cache_[cache_index(s, l)].second;
  }

  // Throws unless positions p0..p0+n-1 fit the cache, the sliding window and the position table.
  void check_positions(int p0, int n) const {
    const Config& c = model->config;
    if (p0 + n > max_tokens) {
      throw ShapeError("session: " + std::to_string(p0 + n) + " positions exceed the cache of " +
                       std::to_string(max_tokens));
    }
    if (c.sliding_window > 0 && p0 + n > c.sliding_window) {
      throw ShapeError("session: " + std::to_string(p0 + n) + " positions exceed the sliding window of " +
                       std::to_string(c.sliding_window) + " (sliding-window attention is not emulated)");
    }
    if (c.positions == PositionKind::learned && p0 + n > model->pos_embeddings.rows()) {
      throw ShapeError("session: position " + std::to_string(p0 + n - 1) +
                       " has no learned position embedding (" + model->path.string() +
                       ": pos_embeddings holds " + std::to_string(model->pos_embeddings.rows()) +
                       " positions = seq_len); use at most that many tokens");
    }
  }

  // Calls f(block, segment) with each segment's rows of x (x itself when there is one segment)
  // and writes the block back: whatever depends on a sequence's positions or on all of its rows
  // (quantisation scales, stochastic rounding streams) sees that sequence alone.
  template <class F>
  void per_segment(Mat<T>& x, F&& f) {
    if (segs_->size() == 1) {
      f(x, segs_->front());
      return;
    }
    Mat<T> b;
    for (const Segment& s : *segs_) {
      b = x.middleRows(s.r0, s.n);
      f(b, s);
      x.middleRows(s.r0, s.n) = b;
    }
  }

  // Quantisation point (r, l, k, tensor) on the rows of each sequence.
  void quant_rows(Mat<T>& x, Role r, int l, LayerKind k, std::string_view tensor) {
    if (find(r, l, k) == nullptr) return;
    per_segment(x, [&](Mat<T>& b, const Segment& s) { quant(b, r, l, k, tensor, -1, 1, s.p0); });
  }

  // The forward pass of the segments (rows concatenated); their logits go to `out`.
  void run(const std::vector<Segment>& segs, RowMatrix& out) {
    segs_ = &segs;
    const Config& c = model->config;
    const Eigen::Index n = segs.back().r0 + segs.back().n;
    Mat<T>& x = work_.x;
    x.resize(n, c.dim);
    // Embedding lookup: only the rows of these tokens (and positions) are read.
    Eigen::Matrix<float, 1, Eigen::Dynamic> row(c.dim);
    const std::span<float> row_span(row.data(), static_cast<std::size_t>(c.dim));
    for (const Segment& s : segs) {
      for (int i = 0; i < s.n; ++i) {
        const int t = s.tokens[static_cast<std::size_t>(i)];
        if (t < 0 || t >= c.vocab_size)
          throw ShapeError("session: token id " + std::to_string(t) + " out of range");
        model->tok_embeddings.read_rows(t, 1, row_span);
        x.row(s.r0 + i) = row.template cast<T>();
        if (c.positions == PositionKind::learned) {
          model->pos_embeddings.read_rows(s.p0 + i, 1, row_span);
          x.row(s.r0 + i) += row.template cast<T>();
        }
      }
    }
    Mat<T>& xb = work_.xb;
    Mat<T>& q = work_.q;
    Mat<T>& k = work_.k;
    Mat<T>& v = work_.v;
    Mat<T>& att = work_.att;
    Mat<T>& tmp = work_.tmp;
    Mat<T>& h1 = work_.h1;
    Mat<T>& h3 = work_.h3;
    for (int l = 0; l < c.n_layers; ++l) {
      LayerT<T>& w = layers_[static_cast<std::size_t>(l)];
      const std::string pre = "layers/" + std::to_string(l) + "/";
      trace(pre + "residual_input", x);
      // Attention.
      norm(x, w.attention_norm, w.attention_norm_bias, xb);
      trace(pre + "attention/qkv_input", xb);
      auto xin = input(xb, l, LayerKind::attention, {"wq", "wk", "wv"}, "qkv_input");
      gemm(xb, w.wq, w.bq, q, l, LayerKind::attention, "wq", xin, w);
      gemm(xb, w.wk, w.bk, k, l, LayerKind::attention, "wk", xin, w);
      gemm(xb, w.wv, w.bv, v, l, LayerKind::attention, "wv", xin, w);
      if (c.positions == PositionKind::rope) {
        per_segment(q, [&](Mat<T>& b, const Segment& s) {
          rope(b, c.n_heads, c.head_dim, s.p0, inv_freq_, c.rope_style);
        });
        per_segment(k, [&](Mat<T>& b, const Segment& s) {
          rope(b, c.n_kv_heads, c.head_dim, s.p0, inv_freq_, c.rope_style);
        });
      }
      quant_rows(q, Role::q, l, LayerKind::attention, "q");
      quant_rows(k, Role::k, l, LayerKind::attention, "k");
      quant_rows(v, Role::v, l, LayerKind::attention, "v");
      quant_rows(k, Role::kv_cache, l, LayerKind::attention, "k_cache");
      quant_rows(v, Role::kv_cache, l, LayerKind::attention, "v_cache");
      att.resize(n, static_cast<Eigen::Index>(c.n_heads) * c.head_dim);
      Mat<T> qs, os;  // a sequence's queries and attention output in a batch
      for (const Segment& s : segs) {
        k_cache(s, l).middleRows(s.p0, s.n) = k.middleRows(s.r0, s.n);
        v_cache(s, l).middleRows(s.p0, s.n) = v.middleRows(s.r0, s.n);
        HeadHook<T> on_scores;
        HeadHook<T> on_probs;
        if (find(Role::scores, l, LayerKind::attention) != nullptr) {
          on_scores = [&, l](Mat<T>& m, int h) {
            quant(m, Role::scores, l, LayerKind::attention, "scores", h, 1, s.p0);
          };
        }
        if (find(Role::probs, l, LayerKind::attention) != nullptr) {
          on_probs = [&, l](Mat<T>& m, int h) {
            quant(m, Role::probs, l, LayerKind::attention, "probs", h, 1, s.p0);
          };
        }
        if (segs.size() == 1) {
          attention(q, k_cache(s, l), v_cache(s, l), s.p0, c.n_heads, c.n_kv_heads, c.head_dim, att,
                    on_scores, on_probs, head_gemm(l, "qk"), head_gemm(l, "pv"));
        } else {
          qs = q.middleRows(s.r0, s.n);
          attention(qs, k_cache(s, l), v_cache(s, l), s.p0, c.n_heads, c.n_kv_heads, c.head_dim, os,
                    on_scores, on_probs, head_gemm(l, "qk"), head_gemm(l, "pv"));
          att.middleRows(s.r0, s.n) = os;
        }
      }
      quant_rows(att, Role::attn_output, l, LayerKind::attention, "attn_output");
      trace(pre + "attention/wo_input", att);
      xin = input(att, l, LayerKind::attention, {"wo"}, "wo_input");
      gemm(att, w.wo, w.bo, tmp, l, LayerKind::attention, "wo", xin, w);
      x += tmp;
      quant_rows(x, Role::residual, l, LayerKind::attention, "residual");
      // Feed-forward.
      norm(x, w.ffn_norm, w.ffn_norm_bias, xb);
      trace(pre + "feed_forward/w1_w3_input", xb);
      if (c.n_experts > 0) {
        // Routing gathers tokens across rows: each sequence's mixture runs on its own rows.
        tmp.resize(n, c.dim);
        Mat<T> xs, ys;
        for (const Segment& s : segs) {
          const std::vector<Segment> one{Segment{s.tokens, s.p0, 0, s.n, s.slot}};
          segs_ = &one;
          xs = xb.middleRows(s.r0, s.n);
          moe(xs, w, l, s.p0, pre, ys);
          tmp.middleRows(s.r0, s.n) = ys;
        }
        segs_ = &segs;
        x += tmp;
        quant_rows(x, Role::residual, l, LayerKind::mlp, "residual");
        continue;
      }
      xin = input(xb, l, LayerKind::mlp, {"w1", "w3"}, "w1_w3_input");
      gemm(xb, w.w1, w.b1, h1, l, LayerKind::mlp, "w1", xin, w);
      if (c.ffn == FfnKind::swiglu) {
        gemm(xb, w.w3, w.b3, h3, l, LayerKind::mlp, "w3", xin, w);
        activate(h1, &h3, c.activation);
      } else {
        activate<T>(h1, nullptr, c.activation);
      }
      quant_rows(h1, Role::mlp_hidden, l, LayerKind::mlp, "mlp_hidden");
      trace(pre + "feed_forward/w2_input", h1);
      xin = input(h1, l, LayerKind::mlp, {"w2"}, "w2_input");
      gemm(h1, w.w2, w.b2, tmp, l, LayerKind::mlp, "w2", xin, w);
      x += tmp;
      quant_rows(x, Role::residual, l, LayerKind::mlp, "residual");
    }
    trace("final_residual", x);
    norm(x, norm_, norm_bias_, xb);
    trace("output_input", xb);
    auto hin = input(xb, -1, LayerKind::head, {"output"}, "output_input");
    const auto head = [&](Mat<T>& logits) {
      gemm_head(xb, logits, hin);
      quant_rows(logits, Role::logits, -1, LayerKind::head, "logits");
      trace("logits", logits);
    };
    if constexpr (std::is_same_v<T, float>) {
      head(out);  // straight into the caller's matrix
    } else {
      Mat<T> logits;
      head(logits);
      out = to_f(logits);
    }
    segs_ = nullptr;
  }

  using Key = std::tuple<Role, int, LayerKind>;

  const Quantizer* find(Role r, int l, LayerKind k) const {
    const auto it = quant_.find({r, l, k});
    return it == quant_.end() ? nullptr : it->second.get();
  }

  // Weight `src` of GEMM site `site_name` in the compute type (WeightT); `name` is the weight's own
  // name (its quantisation point). On a datapath, `encoded` receives its encoding.
  WeightT<T> make_weight(const WeightMatrix& src, int l, LayerKind k, std::string_view name,
                         const std::string& site_name, std::shared_ptr<const EncodedOperand>& encoded) {
    WeightT<T> out;
    if (src.size() == 0) {
      out.values = std::make_shared<Mat<T>>();
      return out;
    }
    const Role role = sites_.at({l, k, site_name}).roles[1];
    if constexpr (std::is_same_v<T, float>) {
      const Site& site = sites_.at({l, k, site_name});
      if (site.gemm->datapath() != nullptr) {
        // A datapath GEMM reads the weight's encoding only, so the quantised float values are
        // kept only where the site converts B from them (an empty matrix stands in otherwise).
        // The encoding is prepared for the site's GEMMs now; where that form holds all the GEMM
        // reads, the codes are released (the prepared form is then the weight's only copy).
        // The float copy goes into one buffer kept while the weights are prepared: weights of one
        // shape reuse its pages instead of faulting in fresh ones for every matrix.
        const Quantizer* qz = find(role, l, k);
        if (qz != nullptr && !site.convert[1]) {
          // One pass from the stored values (16-bit storage decoded into the buffer first) to the
          // codes in B's layout, taken over by the prepared form: no float copy, no 32-bit codes.
          // A quantisation hook sees the stored values and the values of the codes, as the
          // step-by-step path shows it (the values of encode()'s codes are apply()'s result).
          const RowMatrix& v = src.view(weight_scratch_);
          auto e = std::make_shared<EncodedOperand>();
          const QuantPoint p = point(role, l, k, name, -1, 1, v.cols(), 0);
          if (const RowCodes8 codes = qz->row_codes8(v, p, *e)) {
            const auto rows = static_cast<std::size_t>(src.rows()),
                       cols = static_cast<std::size_t>(src.cols());
            encoded = e;
            out.values = std::make_shared<Mat<T>>();
            if (opts_.on_quant) {
              std::vector<std::uint8_t> c(rows * cols);
              codes(0, rows, c.data());
              RowMatrix q(v.rows(), v.cols());
              format::decode(e->element, c, std::span<float>(q.data(), c.size()));
              const std::lock_guard<std::mutex> lock(hook_mutex_);
              opts_.on_quant(p, v, q);
            }
            if (site.gemm->prepare_weight8(*e, codes, rows, cols, site_name)) return out;
            // The strategy prepares from the operand's own codes: [rows, K], 32 bits each.
            e->tensor.codes.resize(rows * cols);
            std::vector<std::uint8_t> row(cols);
            for (std::size_t r = 0; r < rows; ++r) {
              codes(r, 1, row.data());
              std::copy(row.begin(), row.end(),
                        e->tensor.codes.begin() + static_cast<std::ptrdiff_t>(r * cols));
            }
            if (site.gemm->prepare_weight(*e, rows, cols, site_name)) {
              std::vector<std::uint32_t>().swap(e->tensor.codes);
            }
            return out;
          }
        }
        Mat<T>& x = weight_scratch_;
        if (src.storage() == WeightStorage::fp32) {
          RowMatrix none;
          x = src.view(none);  // no reallocation where x already has this shape
        } else {
          (void)src.view(x);  // 16-bit storage decoded straight into x
        }
        const std::shared_ptr<EncodedOperand> e = operand(x, role, l, k, name, 1, 0);
        encoded = e;
        if (site.convert[1]) {
          out.values = std::make_shared<Mat<T>>(x);
          return out;
        }
        out.values = std::make_shared<Mat<T>>();
        if (site.gemm->prepare_weight(*e, static_cast<std::size_t>(src.rows()),
                                      static_cast<std::size_t>(src.cols()), site_name)) {
          std::vector<std::uint32_t>().swap(e->tensor.codes);  // released, capacity included
        }
        return out;
      }
    }
    if (find(role, l, k) == nullptr) {
      if (src.storage() != WeightStorage::fp32) {
        out.stored = &src;
        return out;
      }
      if constexpr (std::is_same_v<T, float>) {
        RowMatrix unused;
        out.values = std::shared_ptr<const Mat<T>>(&src.view(unused), [](const Mat<T>*) {});
        return out;
      }
    }
    RowMatrix buffer;
    if constexpr (std::is_same_v<T, float>) {
      if (const Quantizer* qz = find(role, l, k); qz != nullptr) {
        // Quantised from the stored values straight into the matrix kept: no copy before (the
        // hook sees the stored values as the point's input).
        const RowMatrix& v = src.view(buffer);
        auto x = std::make_shared<Mat<T>>();
        const QuantPoint p = point(role, l, k, name, -1, 1, v.cols(), 0);
        qz->apply(v, *x, p);
        if (opts_.on_quant) {
          const std::lock_guard<std::mutex> lock(hook_mutex_);
          opts_.on_quant(p, v, *x);
        }
        out.values = std::move(x);
        return out;
      }
    }
    auto x = std::make_shared<Mat<T>>(to_t<T>(src.view(buffer)));
    quant(*x, role, l, k, name, -1, 1);
    out.values = std::move(x);
    return out;
  }

  // The values of weight `w`: its own matrix, or its 16-bit storage decoded into the buffer kept
  // for matrices of its size (valid until the next decode of that size).
  const Mat<T>& values(const WeightT<T>& w) {
    if (w.values) return *w.values;
    RowMatrix& f = decoded_[w.stored->size()];
    const RowMatrix& v = w.stored->view(f);
    if constexpr (std::is_same_v<T, float>) {
      return v;
    } else {
      Mat<T>& d = decoded_t_[w.stored->size()];
      d = v.template cast<T>();
      return d;
    }
  }

  void quant(Mat<T>& x, Role r, int l, LayerKind k, std::string_view tensor, int head, int axis,
             int row0 = 0) {
    const Quantizer* qz = find(r, l, k);
    if (qz == nullptr) return;
    const QuantPoint p = point(r, l, k, tensor, head, axis, x.cols(), row0);
    if (!opts_.on_quant) {
      qz->apply(x, p);
      return;
    }
    const RowMatrix in = to_f(x);
    qz->apply(x, p);
    const RowMatrix out = to_f(x);
    const std::lock_guard<std::mutex> lock(hook_mutex_);
    opts_.on_quant(p, in, out);
  }

  struct Site {
    std::shared_ptr<const Gemm> gemm;
    Role roles[2] = {Role::linear_input, Role::weights};  ///< the roles of operands A and B
    std::string formats[2];  ///< attention sites on a datapath: the element formats of A and B
    std::shared_ptr<const Quantizer> convert[2];  ///< conversions of A and B (gemm.convert), or null
  };

  // Attention GEMM `tensor` ("qk" / "pv") of layer l on its datapath, or empty (computed in T).
  HeadGemm<T> head_gemm(int l, const char* tensor) const {
    const Site& st = sites_.at({l, LayerKind::attention, tensor});
    if (st.gemm->datapath() == nullptr) return {};
    return [&st, l, tensor](const Mat<T>& a, const Mat<T>& b, Mat<T>& c, int) {
      const GemmPoint p{l, LayerKind::attention, tensor, st.formats[0], st.formats[1]};
      st.gemm->nt(a, b, c, p);
    };
  }

  static const format::Format& fp32() { return format::Registry::builtin().get("fp32"); }

  QuantPoint point(Role r, int l, LayerKind k, std::string_view tensor, int head, int axis, Eigen::Index cols,
                   int row0) const {
    QuantPoint p;
    p.role = r;
    p.layer = l;
    p.kind = k;
    p.tensor = tensor;
    p.head = head;
    p.axis = axis;
    p.index_offset = static_cast<std::uint64_t>(row0) * static_cast<std::uint64_t>(cols);
    p.stream = point_stream(tensor, l, head, r);
    return p;
  }

  // Quantises GEMM operand x (float compute) with `qz` and returns its encoding; the hook sees it
  // as any quantisation point. Without a quantiser, the operand is its fp32 values.
  std::shared_ptr<EncodedOperand> encode_with(const Quantizer* qz, Mat<T>& x, const QuantPoint& p) {
    if constexpr (std::is_same_v<T, float>) {
      if (qz == nullptr) return std::make_shared<EncodedOperand>(encode_values(x, fp32(), p.tensor));
      const RowMatrix in = opts_.on_quant ? RowMatrix(x) : RowMatrix();
      auto e = std::make_shared<EncodedOperand>(qz->encode(x, p));
      if (opts_.on_quant) {
        const std::lock_guard<std::mutex> lock(hook_mutex_);
        opts_.on_quant(p, in, x);
      }
      return e;
    } else {
      (void)qz, (void)x, (void)p;
      throw Error("plan '" + plan_.name + "': datapath GEMMs need compute = \"fp32\"");
    }
  }

  // Role r's quantisation of GEMM operand x, keeping its encoding.
  std::shared_ptr<EncodedOperand> operand(Mat<T>& x, Role r, int l, LayerKind k, std::string_view tensor,
                                          int axis, int row0) {
    return encode_with(find(r, l, k), x, point(r, l, k, tensor, -1, axis, x.cols(), row0));
  }

  // A linear input as the GEMMs of a forward call take it: the encoding of all its rows (datapath
  // GEMMs), or one encoding per sequence of a batch where those cannot be joined (see join_rows).
  struct Input {
    std::shared_ptr<const EncodedOperand> whole;
    std::vector<std::shared_ptr<const EncodedOperand>> parts;
  };

  // The encodings of consecutive row blocks of one operand as one, or null where a block spans rows
  // or the tensor scales differ (then each sequence's GEMM runs on its own encoding).
  static std::shared_ptr<const EncodedOperand> join_rows(
      const std::vector<std::shared_ptr<const EncodedOperand>>& parts) {
    const EncodedOperand& f = *parts.front();
    if (f.tensor.layout.shape.size() != 2) return nullptr;
    const std::size_t k = f.tensor.layout.shape[1];
    std::size_t rows = 0, blocks = 0;
    for (const auto& p : parts) {
      const block::BlockTensor& t = p->tensor;
      if (t.layout.shape.size() != 2 || t.layout.shape[1] != k || p->format != f.format ||
          std::bit_cast<std::uint32_t>(t.tensor_scale) != std::bit_cast<std::uint32_t>(f.tensor.tensor_scale))
        return nullptr;
      rows += t.layout.shape[0];
      blocks += t.scales.size();
    }
    auto joined = std::make_shared<EncodedOperand>();
    joined->format = f.format;
    joined->element = f.element;
    joined->block = f.block;
    block::BlockTensor& t = joined->tensor;
    t.format_name = f.tensor.format_name;
    t.tensor_scale = f.tensor.tensor_scale;
    const std::size_t shape[2] = {rows, k};
    if (f.block) {
      // Blocks within rows only: one block row per tensor row (or blocks along a row of K).
      t.layout = block::make_layout(*f.block, shape);
      const block::BlockLayout& L = t.layout;
      const bool within_rows = (L.outer == rows && L.rows * L.cols == k) ||
                               (L.outer == 1 && L.rows == rows && L.cols == k && L.block_rows == 1);
      if (!within_rows || L.block_count() != blocks) return nullptr;
    } else {
      t.layout = f.tensor.layout;
      t.layout.shape[0] = rows;
      t.layout.rows = rows;
    }
    for (const auto& p : parts) {
      t.codes.insert(t.codes.end(), p->tensor.codes.begin(), p->tensor.codes.end());
      t.scales.insert(t.scales.end(), p->tensor.scales.begin(), p->tensor.scales.end());
    }
    return joined;
  }

  // The linear input x of the GEMMs `sites`: quantised (each sequence on its own rows), and encoded
  // when one of them runs on a datapath.
  Input input(Mat<T>& x, int l, LayerKind k, std::initializer_list<const char*> sites,
              std::string_view tensor) {
    const Role r = sites_.at({l, k, std::string(*sites.begin())}).roles[0];
    const bool on_datapath = std::any_of(sites.begin(), sites.end(), [&](const char* s) {
      return sites_.at({l, k, std::string(s)}).gemm->datapath() != nullptr;
    });
    Input in;
    if (!on_datapath) {
      quant_rows(x, r, l, k, tensor);
      return in;
    }
    per_segment(
        x, [&](Mat<T>& b, const Segment& s) { in.parts.push_back(operand(b, r, l, k, tensor, 1, s.p0)); });
    if (in.parts.size() == 1) {
      in.whole = std::move(in.parts.front());
      in.parts.clear();
    } else if ((in.whole = join_rows(in.parts))) {
      in.parts.clear();
    }
    return in;
  }

  // C = A·Bᵀ + bias at GEMM site `tensor`; `weight` names B (its encoding, conversion cache) when
  // it is not the site's own weight (the experts of a mixture-of-experts block).
  void gemm(const Mat<T>& a, const WeightT<T>& b, const Vec<T>& bias, Mat<T>& c, int l, LayerKind k,
            std::string_view tensor, const Input& ea, const LayerT<T>& w, std::string_view weight = {}) {
    const std::string_view key = weight.empty() ? tensor : weight;
    const auto it = w.encoded.find(key);
    gemm_rows(a, b, c, l, k, tensor, ea, it == w.encoded.end() ? nullptr : it->second.get(), key);
    if (bias.size() != 0) c.rowwise() += bias.transpose();
  }

  // run_gemm on all rows at once, or on each sequence's rows where A is encoded or converted per
  // sequence (every output row depends on its own row of A only, so the results are the same).
  void gemm_rows(const Mat<T>& a, const WeightT<T>& b, Mat<T>& c, int l, LayerKind k, std::string_view tensor,
                 const Input& ea, const EncodedOperand* eb, std::string_view weight = {}) {
    const Site& st = sites_.at({l, k, std::string(tensor)});
    if (segs_->size() == 1 || (ea.parts.empty() && !st.convert[0])) {
      run_gemm(a, b, c, l, k, tensor, ea.whole.get(), eb, weight);
      return;
    }
    Mat<T> as, cs;
    for (std::size_t i = 0; i < segs_->size(); ++i) {
      const Segment& s = (*segs_)[i];
      as = a.middleRows(s.r0, s.n);
      run_gemm(as, b, cs, l, k, tensor, ea.parts.empty() ? ea.whole.get() : ea.parts[i].get(), eb, weight);
      if (i == 0) c.resize(a.rows(), cs.cols());
      c.middleRows(s.r0, s.n) = cs;
    }
  }

  static std::string expert_name(int e) { return "experts/" + std::to_string(e) + "/"; }

  // A sparse mixture-of-experts FFN as transformers' MixtralSparseMoeBlock: router logits, softmax
  // over the experts, the top n_experts_per_token, their weights renormalised to sum 1; each expert
  // (SwiGLU) runs on the tokens routed to it, and their weighted outputs are summed in expert order.
  void moe(const Mat<T>& xb, const LayerT<T>& w, int l, int p0, const std::string& pre, Mat<T>& out) {
    const Config& c = model->config;
    const int n = static_cast<int>(xb.rows());
    const int top = c.n_experts_per_token;
    constexpr LayerKind kMlp = LayerKind::mlp;
    Mat<T> xr = xb, logits;
    const auto rin = input(xr, l, kMlp, {"router"}, "router_input");
    gemm(xr, w.router, Vec<T>(), logits, l, kMlp, "router", rin, w);
    quant(logits, Role::router_logits, l, kMlp, "router_logits", -1, 1, p0);
    trace(pre + "feed_forward/router_logits", logits);
    // Routing (softmax in the compute type, as transformers' softmax(dtype=float) in float32).
    std::vector<std::vector<std::pair<int, T>>> routed(static_cast<std::size_t>(c.n_experts));
    std::vector<int> order(static_cast<std::size_t>(c.n_experts));
    for (int i = 0; i < n; ++i) {
      const T mx = logits.row(i).maxCoeff();
      Eigen::Matrix<T, 1, Eigen::Dynamic> p = (logits.row(i).array() - mx).exp().matrix();
      p /= p.sum();
      for (int e = 0; e < c.n_experts; ++e) order[static_cast<std::size_t>(e)] = e;
      // torch.topk: largest first; equal values keep the lower index first.
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p(a) > p(b); });
      T sum = 0;
      for (int j = 0; j < top; ++j) sum += p(order[static_cast<std::size_t>(j)]);
      for (int j = 0; j < top; ++j) {
        const int e = order[static_cast<std::size_t>(j)];
        routed[static_cast<std::size_t>(e)].emplace_back(i, p(e) / sum);
      }
    }
    out = Mat<T>::Zero(n, c.dim);
    Mat<T> xe, h1, h3, y;
    for (int e = 0; e < c.n_experts; ++e) {
      const auto& tokens = routed[static_cast<std::size_t>(e)];
      if (tokens.empty()) continue;
      const ExpertT<T>& ex = w.experts[static_cast<std::size_t>(e)];
      const std::string en = expert_name(e);
      xe.resize(static_cast<Eigen::Index>(tokens.size()), c.dim);
      for (std::size_t r = 0; r < tokens.size(); ++r)
        xe.row(static_cast<Eigen::Index>(r)) = xb.row(tokens[r].first);
      const std::string_view in_name = names_.intern(en + "w1_w3_input");
      const auto ein = input(xe, l, kMlp, {"expert_w1", "expert_w3"}, in_name);
      gemm(xe, ex.w1, Vec<T>(), h1, l, kMlp, "expert_w1", ein, w, names_.intern(en + "w1"));
      gemm(xe, ex.w3, Vec<T>(), h3, l, kMlp, "expert_w3", ein, w, names_.intern(en + "w3"));
      activate(h1, &h3, c.activation);
      quant(h1, Role::expert_hidden, l, kMlp, names_.intern(en + "hidden"), -1, 1, p0);
      const auto hin = input(h1, l, kMlp, {"expert_w2"}, names_.intern(en + "w2_input"));
      gemm(h1, ex.w2, Vec<T>(), y, l, kMlp, "expert_w2", hin, w, names_.intern(en + "w2"));
      for (std::size_t r = 0; r < tokens.size(); ++r) {
        out.row(tokens[r].first) += tokens[r].second * y.row(static_cast<Eigen::Index>(r));
      }
    }
  }

  void gemm_head(const Mat<T>& a, Mat<T>& c, const Input& ea) {
    gemm_rows(a, output_, c, -1, LayerKind::head, "output", ea, output_encoded_.get());
  }

  void run_gemm(const Mat<T>& a, const WeightT<T>& w, Mat<T>& c, int l, LayerKind k, std::string_view tensor,
                const EncodedOperand* ea, const EncodedOperand* eb, std::string_view weight = {}) {
    const Site& st = sites_.at({l, k, std::string(tensor)});
    if constexpr (std::is_same_v<T, float>) {
      // A 16-bit weight on the float GEMM: decoded panel by panel inside it, no float copy.
      if (!w.values && st.gemm.get() == &eigen_gemm() && !st.convert[0] && !st.convert[1]) {
        linear(a, *w.stored, Vec<float>(), c);
        return;
      }
    }
    const Mat<T>& b = values(w);
    const Quantizer* qa = find(st.roles[0], l, k);
    const Quantizer* qb = find(st.roles[1], l, k);
    const std::string wname(weight.empty() ? tensor : weight);
    GemmPoint p{l, k, tensor, qa != nullptr ? std::string_view(qa->name()) : std::string_view(),
                qb != nullptr ? std::string_view(qb->name()) : std::string_view()};
    p.a_operand = ea;
    p.b_operand = eb;
    if (!st.convert[0] && !st.convert[1]) {
      st.gemm->nt(a, b, c, p);
      return;
    }
    // Explicit conversions: quantisation points "<tensor>.convert_a" / "<tensor>.convert_b".
    Mat<T> a2 = a, b2 = b;
    std::shared_ptr<const EncodedOperand> ca, cb;
    const std::string ta = wname + ".convert_a", tb = wname + ".convert_b";
    if (st.convert[0]) {
      ca = encode_with(st.convert[0].get(), a2, point(st.roles[0], l, k, ta, -1, 1, a2.cols(), 0));
      p.a_operand = ca.get();
      p.a_format = ca->format;
    }
    if (st.convert[1]) {
      const std::lock_guard<std::mutex> lock(convert_mutex_);
      auto& kept = converted_[{l, k, wname}];
      if (!kept.first) {
        kept.second = std::make_shared<Mat<T>>(b);
        kept.first =
            encode_with(st.convert[1].get(), *kept.second, point(st.roles[1], l, k, tb, -1, 1, b.cols(), 0));
      }
      cb = kept.first;
      b2 = *kept.second;
      p.b_operand = cb.get();
      p.b_format = cb->format;
    }
    st.gemm->nt(a2, b2, c, p);
  }

  void norm(const Mat<T>& x, const Vec<T>& w, const Vec<T>& b, Mat<T>& y) const {
    if (model->config.norm == NormType::rmsnorm) {
      rms_norm(x, w, model->config.norm_eps, y);
    } else {
      layer_norm(x, w, b, model->config.norm_eps, y);
    }
  }

  void trace(const std::string& name, const Mat<T>& x) {
    if (opts_.on_trace) opts_.on_trace(name, to_f(x));
  }

  PrecisionPlan plan_;
  SessionOptions opts_;
  QuantizerFactory own_quantizers_;
  GemmFactory own_gemms_;
  std::map<Key, std::shared_ptr<const Quantizer>> quant_;
  std::map<std::tuple<int, LayerKind, std::string>, Site> sites_;
  std::map<std::tuple<int, LayerKind, std::string>,
           std::pair<std::shared_ptr<const EncodedOperand>, std::shared_ptr<Mat<T>>>>
      converted_;  ///< converted weights, made on first use
  std::mutex convert_mutex_;
  std::shared_ptr<const EncodedOperand> output_encoded_;
  std::vector<LayerT<T>> layers_;
  WeightT<T> output_;
  // The forward pass's activations, kept between calls so that calls of one size reuse them.
  struct Work {
    Mat<T> x, xb, q, k, v, att, tmp, h1, h3;
  } work_;
  const std::vector<Segment>* segs_ = nullptr;          ///< the sequences of the running call
  std::vector<std::pair<Mat<T>, Mat<T>>> batch_cache_;  ///< forward_batch: K and V per sequence and layer
  // Buffers of decoded 16-bit weights, one per element count (float32, and the compute type).
  std::map<Eigen::Index, RowMatrix> decoded_;
  std::map<Eigen::Index, Mat<T>> decoded_t_;
  Vec<T> norm_, norm_bias_;
  std::vector<double> inv_freq_;  // RoPE frequencies after the config's rope_scaling
  // Tensor names made at run time (experts), kept so that QuantPoint / GemmPoint views stay valid.
  struct Names {
    std::string_view intern(const std::string& s) { return *set.insert(s).first; }
    std::set<std::string> set;
  } names_;
  std::mutex hook_mutex_;
  Mat<T> weight_scratch_;  ///< the float copy of the weight being prepared (constructor only)
};

}  // namespace

Session::Session(const Model& model, const PrecisionPlan& plan, SessionOptions options) {
  if (plan.compute == Compute::fp64) {
    impl_ = std::make_unique<ImplT<double>>(model, plan, std::move(options));
  } else {
    impl_ = std::make_unique<ImplT<float>>(model, plan, std::move(options));
  }
}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

RowMatrix Session::forward(std::span<const int> tokens) { return impl_->forward(tokens); }

void Session::forward_batch(std::span<const std::span<const int>> sequences, RowMatrix& logits) {
  impl_->forward_batch(sequences, logits);
}

int Session::position() const { return impl_->pos; }

void Session::reset() { impl_->pos = 0; }

const Model& Session::model() const { return *impl_->model; }

std::size_t argmax(std::span<const float> x) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < x.size(); ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

int argmax(const RowMatrix& logits, int row) {
  return static_cast<int>(
      argmax(std::span<const float>(&logits(row, 0), static_cast<std::size_t>(logits.cols()))));
}

std::vector<int> generate_greedy(Session& session, const std::vector<int>& prompt, int steps) {
  if (prompt.empty()) throw ShapeError("generate: the prompt needs at least one token (BOS)");
  const int bos = session.model().config.bos_id;
  std::vector<int> out{prompt.front()};
  int token = prompt.front();
  int pos = 0;
  while (pos < steps) {
    const RowMatrix logits = session.forward(std::span<const int>(&token, 1));
    ++pos;
    const int next =
        pos < static_cast<int>(prompt.size()) ? prompt[static_cast<std::size_t>(pos)] : argmax(logits, 0);
    if (next == bos) break;
    out.push_back(next);
    token = next;
  }
  return out;
}

}  // namespace lpemu::engine
