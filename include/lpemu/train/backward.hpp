// Training: the forward pass of a dense transformer keeping what its backward pass needs, and the
// backward pass (reverse-mode gradients of the mean next-token cross-entropy) for the architectures
// the engine runs forward: Llama family (GQA, RoPE with llama3 scaling, RMSNorm, SwiGLU), GPT-2
// family (LayerNorm, GELU / tanh GELU, learned positions, biases), Qwen2 biases, tied embeddings.
// Mixture-of-experts blocks are not trainable yet (refused with a named error).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/tensor.hpp"

namespace lpemu::train {

using engine::Mat;
using engine::Vec;

/// The trainable tensors of one transformer block in compute type T (empty when the model has none).
template <class T>
struct LayerParams {
  Vec<T> attention_norm, attention_norm_bias;
  Mat<T> wq, wk, wv, wo;
  Vec<T> bq, bk, bv, bo;
  Vec<T> ffn_norm, ffn_norm_bias;
  Mat<T> w1, w2, w3;
  Vec<T> b1, b2, b3;
};

/// Every trainable tensor of a model in compute type T; `output` is empty when embeddings are tied
/// (the classifier is `tok_embeddings`, and its gradient is added there).
template <class T>
struct Params {
  Mat<T> tok_embeddings, pos_embeddings;
  std::vector<LayerParams<T>> layers;
  Vec<T> norm, norm_bias;
  Mat<T> output;

  /// Calls f(name, tensor) for every non-empty tensor, in a fixed order ("tok_embeddings",
  /// "layers/0/wq", ..., "output"); tensor is a Mat<T>& or Vec<T>&.
  template <class F>
  void for_each(F&& f) {
    visit(*this, f);
  }
  /// The same over a const Params.
  template <class F>
  void for_each(F&& f) const {
    visit(*this, f);
  }

 private:
  template <class P, class F>
  static void visit(P& p, F& f) {
    const auto one = [&](const std::string& name, auto& t) {
      if (t.size() != 0) f(name, t);
    };
    one("tok_embeddings", p.tok_embeddings);
    one("pos_embeddings", p.pos_embeddings);
    for (std::size_t l = 0; l < p.layers.size(); ++l) {
      auto& w = p.layers[l];
      const std::string pre = "layers/" + std::to_string(l) + "/";
      one(pre + "attention_norm", w.attention_norm);
      one(pre + "attention_norm_bias", w.attention_norm_bias);
      one(pre + "wq", w.wq);
      one(pre + "wk", w.wk);
      one(pre + "wv", w.wv);
      one(pre + "wo", w.wo);
      one(pre + "bq", w.bq);
      one(pre + "bk", w.bk);
      one(pre + "bv", w.bv);
      one(pre + "bo", w.bo);
      one(pre + "ffn_norm", w.ffn_norm);
      one(pre + "ffn_norm_bias", w.ffn_norm_bias);
      one(pre + "w1", w.w1);
      one(pre + "w2", w.w2);
      one(pre + "w3", w.w3);
      one(pre + "b1", w.b1);
      one(pre + "b2", w.b2);
      one(pre + "b3", w.b3);
    }
    one("norm", p.norm);
    one("norm_bias", p.norm_bias);
    one("output", p.output);
  }
};

/// The model's weights in compute type T (values exactly as stored); throws lpemu::Error naming the
/// model when it has mixture-of-experts blocks (not trainable yet) or sliding-window attention.
template <class T>
Params<T> params_from_model(const engine::Model& m);
/// `m` with its weights replaced by `p` rounded to float32 (stored as float32; tied embeddings
/// stay tied).
template <class T>
void params_to_model(const Params<T>& p, engine::Model& m);
/// A Params with every tensor of `p`'s shape set to zero.
template <class T>
Params<T> zeros_like(const Params<T>& p);

class LinearPlan;

/// Mean next-token cross-entropy of `batch` sequences of `seq` + 1 tokens each (row-major in
/// `tokens`; position i predicts token i + 1) under parameters `p` of a model with config `c`, and
/// its gradient with respect to every parameter into `grads` (resized, overwritten). `plan`:
/// the linear layers' operand formats and GEMMs of forward and backward (nullptr: every GEMM in T
/// on lpemu's default GEMM, nothing quantised). Throws ShapeError for a token out of range, or a
/// sequence longer than the model's learned positions.
template <class T>
double loss_and_gradients(const engine::Config& c, const Params<T>& p, std::span<const int> tokens, int batch,
                          int seq, Params<T>& grads, const LinearPlan* plan = nullptr);

}  // namespace lpemu::train
