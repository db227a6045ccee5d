// Transformer operators on row-major [tokens, features] tensors, for float and double. Every op is
// deterministic: parallel ops split work into fixed pieces (rows, heads, tiles) whose boundaries
// do not depend on the thread count, and each piece is computed sequentially.
#pragma once

#include <functional>
#include <vector>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/tensor.hpp"

namespace lpemu::engine {

/// y = x · Wᵀ (+ b when b is non-empty), tiled over oneTBB; x [m, k], w [n, k].
template <class T>
void linear(const Mat<T>& x, const Mat<T>& w, const Vec<T>& b, Mat<T>& y);
/// y = x · Wᵀ (+ b) with W in its stored precision (float32, bf16 or fp16), decoded a panel of rows
/// at a time as the GEMM reads it: the bits of linear() on W's float values, without a float copy.
void linear(const Mat<float>& x, const WeightMatrix& w, const Vec<float>& b, Mat<float>& y);
/// RMSNorm per row: y = w ⊙ x / sqrt(mean(x²) + eps), eps added in T (as llama2.c adds a float).
template <class T>
void rms_norm(const Mat<T>& x, const Vec<T>& w, double eps, Mat<T>& y);
/// LayerNorm per row: y = w ⊙ (x − mean) / sqrt(var + eps) + b (biased variance).
template <class T>
void layer_norm(const Mat<T>& x, const Vec<T>& w, const Vec<T>& b, double eps, Mat<T>& y);
/// Rotates each head of x [n, n_heads·head_dim] in place; row i is at position pos0 + i.
template <class T>
void rope(Mat<T>& x, int n_heads, int head_dim, int pos0, double theta, RopeStyle style);
/// The same with explicit inverse frequencies (head_dim/2 of them): angle = position · inv_freq[j].
template <class T>
void rope(Mat<T>& x, int n_heads, int head_dim, int pos0, const std::vector<double>& inv_freq,
          RopeStyle style);
/// Softmax of the first `len` entries of a row (max-subtracted, sequential sum); the rest become 0.
template <class T>
void softmax_prefix(T* row, int len, int width);
/// In place: gate ← act(gate) ⊙ up (SwiGLU when act is silu); `up` empty: gate ← act(gate).
template <class T>
void activate(Mat<T>& gate, const Mat<T>* up, Activation act);

/// Per-head hook into attention: called with a head's score or probability matrix [n, ctx]
/// (masked entries are 0 and must stay 0) so a plan can quantise it.
template <class T>
using HeadHook = std::function<void(Mat<T>& m, int head)>;

/// C = A·Bᵀ for attention's per-head GEMMs (QKᵀ: A = q_h [n, hd], B = k_h [ctx, hd]; PV: A = p_h
/// [n, ctx], B = v_hᵀ [hd, ctx]); empty: computed in T.
template <class T>
using HeadGemm = std::function<void(const Mat<T>& a, const Mat<T>& b, Mat<T>& c, int head)>;

/// Causal GQA attention of n new queries at positions pos0..pos0+n-1 against the first pos0+n
/// rows of the key/value caches. q [n, n_heads·hd], caches [≥pos0+n, n_kv·hd]; out [n, n_heads·hd].
/// Query head h uses KV head h / (n_heads / n_kv). Parallel over heads.
template <class T>
void attention(const Mat<T>& q, const Mat<T>& k_cache, const Mat<T>& v_cache, int pos0, int n_heads,
               int n_kv_heads, int head_dim, Mat<T>& out, const HeadHook<T>& on_scores = {},
               const HeadHook<T>& on_probs = {}, const HeadGemm<T>& qk = {}, const HeadGemm<T>& pv = {});

}  // namespace lpemu::engine
