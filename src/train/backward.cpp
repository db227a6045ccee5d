// The forward pass keeping its intermediates, and the backward pass, of a dense transformer.
// Conventions: activations are [tokens, features], weights [out, in]; the loss is the mean over
// all batch·seq predictions of −log softmax(logits)[target]. Quantisers are straight-through.
#include "lpemu/train/backward.hpp"

#include <cmath>
#include <string>

#include "lpemu/engine/ops.hpp"
#include "lpemu/engine/quantizer.hpp"
#include "lpemu/error.hpp"
#include "lpemu/train/attention_plan.hpp"
#include "lpemu/train/linear_plan.hpp"

namespace lpemu::train {
namespace {

using engine::Activation;
using engine::Config;
using engine::GemmPass;
using engine::NormType;
using engine::PositionKind;

template <class T>
Mat<T> mat_of(const engine::WeightMatrix& w) {
  return w.to_float().cast<T>();
}

template <class T>
Vec<T> vec_of(const Vec<float>& v) {
  return v.cast<T>();
}

// C = A·Bᵀ for GEMM `pass` of linear layer `site` (A, B [rows, contraction]), operands quantised
// per the plan; no plan: lpemu's default GEMM in T.
template <class T>
void gemm(const LinearPlan* plan, const LinearSite* site, GemmPass pass, Mat<T> a, Mat<T> b, Mat<T>& c) {
  if (plan == nullptr || site == nullptr) {
    engine::eigen_gemm().nt(a, b, c, engine::GemmPoint{});
    return;
  }
  const engine::Gemm& g = *site->gemm[static_cast<std::size_t>(pass)];
  engine::EncodedOperand ea, eb;
  if (g.datapath() != nullptr) {
    encode_operands(*site, pass, plan->step(), a, b, ea, eb);
  } else {
    quantize_operands(*site, pass, plan->step(), a, b);
  }
  engine::GemmPoint gp;
  gp.layer = site->layer;
  gp.kind = site->kind;
  gp.tensor = site->tensor;
  // What a datapath GEMM reads: a block-format operand's codes and scales, else the element format
  // the operand's values lie on.
  const auto on = [](const std::shared_ptr<const engine::Quantizer>& q) -> std::string_view {
    return q && q->block_format() == nullptr ? std::string_view(q->element_format().name)
                                             : std::string_view();
  };
  gp.a_format = on(pass == GemmPass::forward ? site->input : site->grad_output);
  gp.b_format = on(pass == GemmPass::wgrad ? site->input : site->weights);
  if (ea.block) gp.a_operand = &ea;
  if (eb.block) gp.b_operand = &eb;
  g.nt(a, b, c, gp);
  quantize_result(*site, pass, plan->step(), c);
}

// C = A·Bᵀ for attention GEMM `g` of head `h` in block site `s` (A, B [rows, contraction]), the
// backward GEMMs' operands and results quantised per the plan (attention_plan.hpp).
template <class T>
void attention_gemm(const BlockSite& s, AttentionGemm g, std::uint64_t step, int h, Mat<T> a, Mat<T> b,
                    Mat<T>& c) {
  quantize_attention_operands(s, g, step, h, a, b);
  const auto i = static_cast<std::size_t>(g);
  engine::GemmPoint gp{s.layer, engine::LayerKind::attention, attention_gemm_name(g), s.formats[i][0],
                       s.formats[i][1]};
  s.gemm->nt(a, b, c, gp);
  quantize_attention_result(s, g, step, h, c);
}

// One linear layer y = x·Wᵀ + b, its forward input kept by the caller.
template <class T>
struct Linear {
  const LinearPlan* plan;
  const LinearSite* site;

  void forward(const Mat<T>& x, const Mat<T>& w, const Vec<T>& b, Mat<T>& y) const {
    gemm<T>(plan, site, GemmPass::forward, x, w, y);
    if (b.size() != 0) y.rowwise() += b.transpose();
  }
  // dx (+)= dy·W (accumulated when `accumulate`), dW += dyᵀ·x, db += Σ rows of dy.
  void backward(const Mat<T>& x, const Mat<T>& w, const Mat<T>& dy, Mat<T>& dx, bool accumulate, Mat<T>& dw,
                Vec<T>& db) const {
    Mat<T> wt;
    if (plan != nullptr && site != nullptr && site->shared_weight && site->weights) {
      // A 2-D tile weight: the forward GEMM's quantised weight, transposed, enters dgrad as it is.
      Mat<T> wq = w;
      quantize_forward_weight(*site, plan->step(), wq);
      wt = wq.transpose();
    } else {
      wt = w.transpose();
    }
    Mat<T> g;
    gemm<T>(plan, site, GemmPass::dgrad, dy, wt, g);
    if (accumulate) {
      dx += g;
    } else {
      dx = std::move(g);
    }
    Mat<T> gw;
    gemm<T>(plan, site, GemmPass::wgrad, dy.transpose(), x.transpose(), gw);
    dw += gw;
    if (db.size() != 0) db += dy.colwise().sum().transpose();
  }
};

// Normalisation forward y = norm(x) keeping 1/σ per row; backward adds to dx, dw, db.
template <class T>
struct Norm {
  NormType type;
  double eps;

  void forward(const Mat<T>& x, const Vec<T>& w, const Vec<T>& b, Mat<T>& y) const {
    if (type == NormType::rmsnorm) {
      engine::rms_norm(x, w, eps, y);
    } else {
      engine::layer_norm(x, w, b, eps, y);
    }
  }
  void backward(const Mat<T>& x, const Vec<T>& w, const Mat<T>& dy, Mat<T>& dx, Vec<T>& dw,
                Vec<T>& db) const {
    const Eigen::Index d = x.cols();
    const T e = static_cast<T>(eps);
    for (Eigen::Index r = 0; r < x.rows(); ++r) {
      if (type == NormType::rmsnorm) {
        // y_j = w_j x_j ρ, ρ = (Σx²/D + eps)^(−1/2): dx_i = ρ g_i − ρ³ x_i Σ_j g_j x_j / D, g = dy ⊙ w.
        T ss = 0;
        for (Eigen::Index j = 0; j < d; ++j) ss += x(r, j) * x(r, j);
        const T rho = T{1} / std::sqrt(ss / static_cast<T>(d) + e);
        T gx = 0;
        for (Eigen::Index j = 0; j < d; ++j) {
          dw(j) += dy(r, j) * x(r, j) * rho;
          gx += dy(r, j) * w(j) * x(r, j);
        }
        for (Eigen::Index j = 0; j < d; ++j) {
          dx(r, j) += rho * dy(r, j) * w(j) - rho * rho * rho * x(r, j) * gx / static_cast<T>(d);
        }
      } else {
        // x̂ = (x − μ)ρ, y = w x̂ + b: dx = ρ (g − mean(g) − x̂ mean(g x̂)), g = dy ⊙ w.
        T mean = 0;
        for (Eigen::Index j = 0; j < d; ++j) mean += x(r, j);
        mean /= static_cast<T>(d);
        T var = 0;
        for (Eigen::Index j = 0; j < d; ++j) var += (x(r, j) - mean) * (x(r, j) - mean);
        var /= static_cast<T>(d);
        const T rho = T{1} / std::sqrt(var + e);
        T gm = 0;
        T gxm = 0;
        for (Eigen::Index j = 0; j < d; ++j) {
          const T xh = (x(r, j) - mean) * rho;
          const T g = dy(r, j) * w(j);
          dw(j) += dy(r, j) * xh;
          if (db.size() != 0) db(j) += dy(r, j);
          gm += g;
          gxm += g * xh;
        }
        gm /= static_cast<T>(d);
        gxm /= static_cast<T>(d);
        for (Eigen::Index j = 0; j < d; ++j) {
          const T xh = (x(r, j) - mean) * rho;
          dx(r, j) += rho * (dy(r, j) * w(j) - gm - xh * gxm);
        }
      }
    }
  }
};

// d act(z) / dz for the engine's activations (formulas of engine::activate).
template <class T>
T activation_derivative(T z, Activation act) {
  switch (act) {
    case Activation::silu: {
      const T s = T{1} / (T{1} + std::exp(-z));
      return s * (T{1} + z * (T{1} - s));
    }
    case Activation::gelu: {
      const T pdf = std::exp(-z * z / T{2}) / std::sqrt(T{2} * static_cast<T>(3.14159265358979323846));
      return static_cast<T>(0.5) * (T{1} + std::erf(z / std::sqrt(T{2}))) + z * pdf;
    }
    case Activation::gelu_tanh:
    default: {
      const T k = static_cast<T>(0.7978845608028654);  // sqrt(2/π)
      const T c = static_cast<T>(0.044715);
      const T t = std::tanh(k * (z + c * z * z * z));
      return static_cast<T>(0.5) * (T{1} + t) +
             static_cast<T>(0.5) * z * (T{1} - t * t) * k * (T{1} + 3 * c * z * z);
    }
  }
}

// What the backward pass of one block reads.
template <class T>
struct LayerCache {
  Mat<T> x_in, xn1, q, k, v, att, x_mid, xn2, h1, h3, hidden;
  Mat<T> qh, kh, vh;          // Q, K, V before their roles' quantisation (attention through its GEMMs)
  std::vector<Mat<T>> probs;  // [batch · n_heads] of [seq, seq], before the probs role
};

}  // namespace

template <class T>
Params<T> params_from_model(const engine::Model& m) {
  const Config& c = m.config;
  if (c.n_experts > 0) {
    throw Error("model '" + c.name + "': mixture-of-experts blocks are not trainable yet");
  }
  Params<T> p;
  p.tok_embeddings = mat_of<T>(m.tok_embeddings);
  if (m.pos_embeddings.size() != 0) p.pos_embeddings = mat_of<T>(m.pos_embeddings);
  for (const auto& w : m.layers) {
    LayerParams<T> l;
    l.attention_norm = vec_of<T>(w.attention_norm);
    l.attention_norm_bias = vec_of<T>(w.attention_norm_bias);
    l.wq = mat_of<T>(w.wq);
    l.wk = mat_of<T>(w.wk);
    l.wv = mat_of<T>(w.wv);
    l.wo = mat_of<T>(w.wo);
    l.bq = vec_of<T>(w.bq);
    l.bk = vec_of<T>(w.bk);
    l.bv = vec_of<T>(w.bv);
    l.bo = vec_of<T>(w.bo);
    l.ffn_norm = vec_of<T>(w.ffn_norm);
    l.ffn_norm_bias = vec_of<T>(w.ffn_norm_bias);
    l.w1 = mat_of<T>(w.w1);
    l.w2 = mat_of<T>(w.w2);
    if (w.w3.size() != 0) l.w3 = mat_of<T>(w.w3);
    l.b1 = vec_of<T>(w.b1);
    l.b2 = vec_of<T>(w.b2);
    l.b3 = vec_of<T>(w.b3);
    p.layers.push_back(std::move(l));
  }
  p.norm = vec_of<T>(m.norm);
  p.norm_bias = vec_of<T>(m.norm_bias);
  if (!c.tied_embeddings) p.output = mat_of<T>(m.output);
  return p;
}

template <class T>
void params_to_model(const Params<T>& p, engine::Model& m) {
  const auto mat = [](const Mat<T>& x) {
    return engine::WeightMatrix(engine::RowMatrix(x.template cast<float>()));
  };
  const auto vec = [](const Vec<T>& x) { return Vec<float>(x.template cast<float>()); };
  m.tok_embeddings = mat(p.tok_embeddings);
  if (p.pos_embeddings.size() != 0) m.pos_embeddings = mat(p.pos_embeddings);
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    const auto& l = p.layers[i];
    auto& w = m.layers[i];
    w.attention_norm = vec(l.attention_norm);
    w.attention_norm_bias = vec(l.attention_norm_bias);
    w.wq = mat(l.wq);
    w.wk = mat(l.wk);
    w.wv = mat(l.wv);
    w.wo = mat(l.wo);
    w.bq = vec(l.bq);
    w.bk = vec(l.bk);
    w.bv = vec(l.bv);
    w.bo = vec(l.bo);
    w.ffn_norm = vec(l.ffn_norm);
    w.ffn_norm_bias = vec(l.ffn_norm_bias);
    w.w1 = mat(l.w1);
    w.w2 = mat(l.w2);
    if (l.w3.size() != 0) w.w3 = mat(l.w3);
    w.b1 = vec(l.b1);
    w.b2 = vec(l.b2);
    w.b3 = vec(l.b3);
  }
  m.norm = vec(p.norm);
  m.norm_bias = vec(p.norm_bias);
  m.output = m.config.tied_embeddings ? m.tok_embeddings : mat(p.output);
}

template <class T>
Params<T> zeros_like(const Params<T>& p) {
  Params<T> z = p;
  z.for_each([](const std::string&, auto& t) { t.setZero(); });
  return z;
}

template <class T>
double loss_and_gradients(const Config& c, const Params<T>& p, std::span<const int> tokens, int batch,
                          int seq, Params<T>& grads, const LinearPlan* plan) {
  if (c.n_experts > 0) throw Error("model '" + c.name + "': mixture-of-experts blocks are not trainable yet");
  if (batch <= 0 || seq <= 0 ||
      tokens.size() != static_cast<std::size_t>(batch) * static_cast<std::size_t>(seq + 1)) {
    throw ShapeError("train: " + std::to_string(tokens.size()) + " tokens for batch " +
                     std::to_string(batch) + " × (seq " + std::to_string(seq) + " + 1)");
  }
  if (c.positions == PositionKind::learned && seq > p.pos_embeddings.rows()) {
    throw ShapeError("train: seq " + std::to_string(seq) + " exceeds the model's " +
                     std::to_string(p.pos_embeddings.rows()) + " learned positions");
  }
  if (c.sliding_window > 0 && seq > c.sliding_window) {
    throw ShapeError("train: seq " + std::to_string(seq) + " exceeds the sliding window " +
                     std::to_string(c.sliding_window));
  }
  const auto tok = [&](int b, int i) { return tokens[static_cast<std::size_t>(b * (seq + 1) + i)]; };
  for (const int t : tokens) {
    if (t < 0 || t >= c.vocab_size)
      throw ShapeError("train: token id " + std::to_string(t) + " out of range");
  }
  const Eigen::Index n = static_cast<Eigen::Index>(batch) * seq;
  const int hd = c.head_dim;
  const int group = c.n_heads / c.n_kv_heads;
  const T scale = T{1} / std::sqrt(static_cast<T>(hd));
  const std::vector<double> inv_freq = engine::rope_frequencies(c);
  std::vector<double> neg_freq(inv_freq.size());
  for (std::size_t j = 0; j < inv_freq.size(); ++j) neg_freq[j] = -inv_freq[j];
  const Norm<T> norm{c.norm, c.norm_eps};
  const auto lin = [&](int l, const char* t) {
    return Linear<T>{plan, plan != nullptr ? &plan->site(l, t) : nullptr};
  };
  const Vec<T> none;
  // RoPE per sequence (positions 0 .. seq-1), forward or (negated angles) its transpose.
  const auto rope_rows = [&](Mat<T>& x, int heads, const std::vector<double>& f) {
    Mat<T> s;
    for (int b = 0; b < batch; ++b) {
      s = x.middleRows(static_cast<Eigen::Index>(b) * seq, seq);
      engine::rope(s, heads, hd, 0, f, c.rope_style);
      x.middleRows(static_cast<Eigen::Index>(b) * seq, seq) = s;
    }
  };

  // Forward.
  Mat<T> x(n, c.dim);
  for (int b = 0; b < batch; ++b) {
    for (int i = 0; i < seq; ++i) {
      const Eigen::Index r = static_cast<Eigen::Index>(b) * seq + i;
      x.row(r) = p.tok_embeddings.row(tok(b, i));
      if (c.positions == PositionKind::learned) x.row(r) += p.pos_embeddings.row(i);
    }
  }
  std::vector<LayerCache<T>> cache(static_cast<std::size_t>(c.n_layers));
  Mat<T> tmp;
  const std::uint64_t step = plan != nullptr ? plan->step() : 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerParams<T>& w = p.layers[static_cast<std::size_t>(l)];
    LayerCache<T>& k = cache[static_cast<std::size_t>(l)];
    const BlockSite* bs = plan != nullptr ? &plan->block(l) : nullptr;
    const bool planned = bs != nullptr && bs->active;
    k.x_in = x;
    norm.forward(x, w.attention_norm, w.attention_norm_bias, k.xn1);
    lin(l, "wq").forward(k.xn1, w.wq, w.bq, k.q);
    lin(l, "wk").forward(k.xn1, w.wk, w.bk, k.k);
    lin(l, "wv").forward(k.xn1, w.wv, w.bv, k.v);
    if (c.positions == PositionKind::rope) {
      rope_rows(k.q, c.n_heads, inv_freq);
      rope_rows(k.k, c.n_kv_heads, inv_freq);
    }
    if (planned) {
      k.qh = k.q;
      k.kh = k.k;
      k.vh = k.v;
      quantize_qkv(*bs, step, k.q, k.k, k.v);
    }
    k.att.resize(n, static_cast<Eigen::Index>(c.n_heads) * hd);
    k.probs.assign(static_cast<std::size_t>(batch * c.n_heads), Mat<T>());
    for (int b = 0; b < batch; ++b) {
      const Eigen::Index r0 = static_cast<Eigen::Index>(b) * seq;
      for (int h = 0; h < c.n_heads; ++h) {
        const Eigen::Index qo = static_cast<Eigen::Index>(h) * hd;
        const Eigen::Index ko = static_cast<Eigen::Index>(h / group) * hd;
        Mat<T>& s = k.probs[static_cast<std::size_t>(b * c.n_heads + h)];
        s = Mat<T>::Zero(seq, seq);
        if (planned) {
          // S = Q·Kᵀ and O = P·V on the attention datapath, the roles quantised as inference does.
          Mat<T> raw;
          attention_gemm<T>(*bs, AttentionGemm::qk, step, h, k.q.block(r0, qo, seq, hd),
                            k.k.block(r0, ko, seq, hd), raw);
          for (int i = 0; i < seq; ++i)
            for (int t = 0; t <= i; ++t) s(i, t) = raw(i, t) * scale;
          quantize_scores(*bs, step, h, false, s);
          for (int i = 0; i < seq; ++i) engine::softmax_prefix(&s(i, 0), i + 1, seq);
          Mat<T> pq = s;
          quantize_scores(*bs, step, h, true, pq);
          Mat<T> oh;
          attention_gemm<T>(*bs, AttentionGemm::pv, step, h, pq, k.v.block(r0, ko, seq, hd).transpose(), oh);
          k.att.block(r0, qo, seq, hd) = oh;
          continue;
        }
        for (int i = 0; i < seq; ++i) {
          for (int t = 0; t <= i; ++t) {
            T dot = 0;
            for (int d = 0; d < hd; ++d) dot += k.q(r0 + i, qo + d) * k.k(r0 + t, ko + d);
            s(i, t) = dot * scale;
          }
          engine::softmax_prefix(&s(i, 0), i + 1, seq);
        }
        k.att.block(r0, qo, seq, hd).noalias() = s * k.v.block(r0, ko, seq, hd);
      }
    }
    if (bs != nullptr) quantize_attn_output(*bs, step, k.att);
    lin(l, "wo").forward(k.att, w.wo, w.bo, tmp);
    x += tmp;
    if (bs != nullptr) quantize_residual(*bs, false, step, x);
    k.x_mid = x;
    norm.forward(x, w.ffn_norm, w.ffn_norm_bias, k.xn2);
    lin(l, "w1").forward(k.xn2, w.w1, w.b1, k.h1);
    k.hidden = k.h1;
    if (c.ffn == engine::FfnKind::swiglu) {
      lin(l, "w3").forward(k.xn2, w.w3, w.b3, k.h3);
      engine::activate(k.hidden, &k.h3, c.activation);
    } else {
      engine::activate<T>(k.hidden, nullptr, c.activation);
    }
    if (bs != nullptr) quantize_mlp_hidden(*bs, step, k.hidden);
    lin(l, "w2").forward(k.hidden, w.w2, w.b2, tmp);
    x += tmp;
    if (bs != nullptr) quantize_residual(*bs, true, step, x);
  }
  const Mat<T> x_final = x;
  Mat<T> xf;
  norm.forward(x_final, p.norm, p.norm_bias, xf);
  const Mat<T>& out_w = c.tied_embeddings ? p.tok_embeddings : p.output;
  Mat<T> logits;
  lin(-1, "output").forward(xf, out_w, none, logits);
  if (plan != nullptr) quantize_logits(plan->logits(), step, logits, plan->counts());

  // Loss and its gradient at the logits: (softmax − onehot) / n.
  grads = zeros_like(p);
  double loss = 0;
  Mat<T> dlogits(n, logits.cols());
  for (int b = 0; b < batch; ++b) {
    for (int i = 0; i < seq; ++i) {
      const Eigen::Index r = static_cast<Eigen::Index>(b) * seq + i;
      const T m = logits.row(r).maxCoeff();
      T sum = 0;
      for (Eigen::Index j = 0; j < logits.cols(); ++j) sum += std::exp(logits(r, j) - m);
      const int target = tok(b, i + 1);
      loss += static_cast<double>(std::log(sum) + m - logits(r, target));
      for (Eigen::Index j = 0; j < logits.cols(); ++j) {
        dlogits(r, j) = std::exp(logits(r, j) - m) / sum / static_cast<T>(n);
      }
      dlogits(r, target) -= T{1} / static_cast<T>(n);
    }
  }
  loss /= static_cast<double>(n);
  // Loss scaling: the backward pass starts from the gradient of the scaled loss.
  if (plan != nullptr && plan->loss_scale() != 1) dlogits *= static_cast<T>(plan->loss_scale());

  // Backward.
  Mat<T> dxf;
  Vec<T> no_bias;
  Mat<T>& d_out_w = c.tied_embeddings ? grads.tok_embeddings : grads.output;
  lin(-1, "output").backward(xf, out_w, dlogits, dxf, false, d_out_w, no_bias);
  Mat<T> dx = Mat<T>::Zero(n, c.dim);
  norm.backward(x_final, p.norm, dxf, dx, grads.norm, grads.norm_bias);
  for (int l = c.n_layers - 1; l >= 0; --l) {
    const LayerParams<T>& w = p.layers[static_cast<std::size_t>(l)];
    LayerParams<T>& g = grads.layers[static_cast<std::size_t>(l)];
    const LayerCache<T>& k = cache[static_cast<std::size_t>(l)];
    const BlockSite* bs = plan != nullptr ? &plan->block(l) : nullptr;
    const bool planned = bs != nullptr && bs->active;
    // Feed-forward: x_out = x_mid + w2(hidden).
    Mat<T> dhidden;
    lin(l, "w2").backward(k.hidden, w.w2, dx, dhidden, false, g.w2, g.b2);
    Mat<T> dh1(n, k.h1.cols());
    Mat<T> dh3;
    if (c.ffn == engine::FfnKind::swiglu) {
      // hidden = act(h1) ⊙ h3: dh3 = dhidden ⊙ act(h1), dh1 = dhidden ⊙ h3 ⊙ act'(h1).
      Mat<T> a1 = k.h1;
      engine::activate<T>(a1, nullptr, c.activation);
      dh3 = dhidden.cwiseProduct(a1);
      for (Eigen::Index r = 0; r < n; ++r) {
        for (Eigen::Index j = 0; j < dh1.cols(); ++j) {
          dh1(r, j) = dhidden(r, j) * k.h3(r, j) * activation_derivative(k.h1(r, j), c.activation);
        }
      }
    } else {
      for (Eigen::Index r = 0; r < n; ++r) {
        for (Eigen::Index j = 0; j < dh1.cols(); ++j) {
          dh1(r, j) = dhidden(r, j) * activation_derivative(k.h1(r, j), c.activation);
        }
      }
    }
    Mat<T> dxn2;
    lin(l, "w1").backward(k.xn2, w.w1, dh1, dxn2, false, g.w1, g.b1);
    if (c.ffn == engine::FfnKind::swiglu) lin(l, "w3").backward(k.xn2, w.w3, dh3, dxn2, true, g.w3, g.b3);
    norm.backward(k.x_mid, w.ffn_norm, dxn2, dx, g.ffn_norm, g.ffn_norm_bias);
    // Attention: x_mid = x_in + wo(att).
    Mat<T> datt;
    lin(l, "wo").backward(k.att, w.wo, dx, datt, false, g.wo, g.bo);
    Mat<T> dq = Mat<T>::Zero(n, k.q.cols());
    Mat<T> dk = Mat<T>::Zero(n, k.k.cols());
    Mat<T> dv = Mat<T>::Zero(n, k.v.cols());
    for (int b = 0; b < batch; ++b) {
      const Eigen::Index r0 = static_cast<Eigen::Index>(b) * seq;
      for (int h = 0; h < c.n_heads; ++h) {
        const Eigen::Index qo = static_cast<Eigen::Index>(h) * hd;
        const Eigen::Index ko = static_cast<Eigen::Index>(h / group) * hd;
        const Mat<T>& pr = k.probs[static_cast<std::size_t>(b * c.n_heads + h)];
        const Mat<T> dout = datt.block(r0, qo, seq, hd);
        if (planned) {
          // dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q on the attention datapath, each operand
          // quantised along that GEMM's contraction axis (Q, K, V, P re-quantised from k.qh ...).
          Mat<T> dp, gh;
          attention_gemm<T>(*bs, AttentionGemm::dp, step, h, dout, k.vh.block(r0, ko, seq, hd), dp);
          attention_gemm<T>(*bs, AttentionGemm::dv, step, h, pr.transpose(), dout.transpose(), gh);
          dv.block(r0, ko, seq, hd) += gh;
          Mat<T> ds(seq, seq);
          for (int i = 0; i < seq; ++i) {
            T dot = 0;
            for (int t = 0; t <= i; ++t) dot += dp(i, t) * pr(i, t);
            for (int t = 0; t < seq; ++t) ds(i, t) = t <= i ? pr(i, t) * (dp(i, t) - dot) * scale : T{0};
          }
          attention_gemm<T>(*bs, AttentionGemm::dq, step, h, ds, k.kh.block(r0, ko, seq, hd).transpose(), gh);
          dq.block(r0, qo, seq, hd) += gh;
          attention_gemm<T>(*bs, AttentionGemm::dk, step, h, ds.transpose(),
                            k.qh.block(r0, qo, seq, hd).transpose(), gh);
          dk.block(r0, ko, seq, hd) += gh;
          continue;
        }
        // O = P·V: dP = dO·Vᵀ, dV = Pᵀ·dO; softmax: dS = P ⊙ (dP − rowsum(dP ⊙ P)); S = scale·Q·Kᵀ.
        const Mat<T> dp = dout * k.v.block(r0, ko, seq, hd).transpose();
        dv.block(r0, ko, seq, hd) += pr.transpose() * dout;
        Mat<T> ds(seq, seq);
        for (int i = 0; i < seq; ++i) {
          T dot = 0;
          for (int t = 0; t <= i; ++t) dot += dp(i, t) * pr(i, t);
          for (int t = 0; t < seq; ++t) ds(i, t) = t <= i ? pr(i, t) * (dp(i, t) - dot) * scale : T{0};
        }
        dq.block(r0, qo, seq, hd) += ds * k.k.block(r0, ko, seq, hd);
        dk.block(r0, ko, seq, hd) += ds.transpose() * k.q.block(r0, qo, seq, hd);
      }
    }
    if (c.positions == PositionKind::rope) {
      // RoPE is a rotation: its transpose rotates by the negated angles.
      rope_rows(dq, c.n_heads, neg_freq);
      rope_rows(dk, c.n_kv_heads, neg_freq);
    }
    Mat<T> dxn1;
    lin(l, "wq").backward(k.xn1, w.wq, dq, dxn1, false, g.wq, g.bq);
    lin(l, "wk").backward(k.xn1, w.wk, dk, dxn1, true, g.wk, g.bk);
    lin(l, "wv").backward(k.xn1, w.wv, dv, dxn1, true, g.wv, g.bv);
    norm.backward(k.x_in, w.attention_norm, dxn1, dx, g.attention_norm, g.attention_norm_bias);
  }
  for (int b = 0; b < batch; ++b) {
    for (int i = 0; i < seq; ++i) {
      const Eigen::Index r = static_cast<Eigen::Index>(b) * seq + i;
      grads.tok_embeddings.row(tok(b, i)) += dx.row(r);
      if (c.positions == PositionKind::learned) grads.pos_embeddings.row(i) += dx.row(r);
    }
  }
  return loss;
}

#define LPEMU_TRAIN_BACKWARD(T)                                                                          \
  template Params<T> params_from_model<T>(const engine::Model&);                                         \
  template void params_to_model<T>(const Params<T>&, engine::Model&);                                    \
  template Params<T> zeros_like<T>(const Params<T>&);                                                    \
  template double loss_and_gradients<T>(const Config&, const Params<T>&, std::span<const int>, int, int, \
                                        Params<T>&, const LinearPlan*);
LPEMU_TRAIN_BACKWARD(float)
LPEMU_TRAIN_BACKWARD(double)
#undef LPEMU_TRAIN_BACKWARD

}  // namespace lpemu::train
