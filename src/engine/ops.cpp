#include "lpemu/engine/ops.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include <tbb/blocked_range2d.h>
#include <tbb/parallel_for.h>

#include "engine/sgemm.hpp"
#include "lpemu/error.hpp"

namespace lpemu::engine {
namespace {

// Fixed tile sizes: the work split never depends on the thread count, and each tile is one
// Eigen product of a fixed shape, so results are bit-identical for any number of threads.
constexpr Eigen::Index kTileRows = 32;
constexpr Eigen::Index kTileCols = 128;
// Rows of A per task of the float kernel (each task packs its panel of B once per chunk of K).
constexpr Eigen::Index kPanelRows = 256;

Eigen::Index tiles(Eigen::Index n, Eigen::Index t) { return (n + t - 1) / t; }

// Below this much work (multiply-adds or elements) an op runs its pieces in a plain loop: the
// pieces are the same, so results are identical, and tiny decode steps avoid task overhead.
constexpr double kParallelWork = 1 << 16;

// Runs body(i) for i in [0, n): in parallel when `work` is large enough, else sequentially.
template <class F>
void for_each_piece(Eigen::Index n, double work, const F& body) {
  if (work < kParallelWork || n < 2) {
    for (Eigen::Index i = 0; i < n; ++i) body(i);
  } else {
    tbb::parallel_for(Eigen::Index{0}, n, body);
  }
}

// Throws ShapeError unless x [m, k] · Wᵀ (+ b) fits W [n, w_cols] and a bias of b_size (0: none).
void check_linear(Eigen::Index k, Eigen::Index w_cols, Eigen::Index n, Eigen::Index b_size) {
  if (k != w_cols) {
    throw ShapeError("linear: input has " + std::to_string(k) + " features, weight expects " +
                     std::to_string(w_cols));
  }
  if (b_size != 0 && b_size != n) throw ShapeError("linear: bias size disagrees with weight rows");
}

// y = x · Bᵀ (+ b) for B [n, x.cols()] on the float kernel, over chunks of rows × panels of B (every
// output is summed in ascending k whatever the split). rows_of(c0, cn) gives B's rows c0 .. c0 + cn
// as float, row-major, valid while the calling task runs.
template <class RowsOf>
void float_linear(const Mat<float>& x, Eigen::Index n, const Vec<float>& b, Mat<float>& y,
                  const RowsOf& rows_of) {
  const Eigen::Index m = x.rows();
  const auto k = static_cast<std::size_t>(x.cols());
  y.resize(m, n);
  const auto pw = static_cast<Eigen::Index>(detail::sgemm_panel_width());
  const Eigen::Index fr = tiles(m, kPanelRows);
  const Eigen::Index fc = tiles(n, pw);
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  for_each_piece(fr * fc, work, [&](Eigen::Index t) {
    const Eigen::Index r0 = (t / fc) * kPanelRows;
    const Eigen::Index c0 = (t % fc) * pw;
    const Eigen::Index rn = std::min(kPanelRows, m - r0);
    const Eigen::Index cn = std::min(pw, n - c0);
    detail::sgemm_panel(static_cast<std::size_t>(rn), static_cast<std::size_t>(cn), k, x.row(r0).data(), k,
                        rows_of(c0, cn), k, &y(r0, c0), static_cast<std::size_t>(n));
    if (b.size() != 0) y.block(r0, c0, rn, cn).rowwise() += b.segment(c0, cn).transpose();
  });
}

}  // namespace

template <class T>
void linear(const Mat<T>& x, const Mat<T>& w, const Vec<T>& b, Mat<T>& y) {
  check_linear(x.cols(), w.cols(), w.rows(), b.size());
  if constexpr (std::is_same_v<T, float>) {
    float_linear(x, w.rows(), b, y, [&](Eigen::Index c0, Eigen::Index) { return w.row(c0).data(); });
    return;
  }
  const Eigen::Index m = x.rows();
  const Eigen::Index n = w.rows();
  y.resize(m, n);
  const Eigen::Index tr = tiles(m, kTileRows);
  const Eigen::Index tc = tiles(n, kTileCols);
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(x.cols());
  for_each_piece(tr * tc, work, [&](Eigen::Index t) {
    const Eigen::Index r0 = (t / tc) * kTileRows;
    const Eigen::Index c0 = (t % tc) * kTileCols;
    const Eigen::Index rn = std::min(kTileRows, m - r0);
    const Eigen::Index cn = std::min(kTileCols, n - c0);
    y.block(r0, c0, rn, cn).noalias() = x.middleRows(r0, rn) * w.middleRows(c0, cn).transpose();
    if (b.size() != 0) y.block(r0, c0, rn, cn).rowwise() += b.segment(c0, cn).transpose();
  });
}

void linear(const Mat<float>& x, const WeightMatrix& w, const Vec<float>& b, Mat<float>& y) {
  if (w.storage() == WeightStorage::fp32) {
    RowMatrix unused;  // float32 storage: view() is the stored matrix itself
    linear(x, w.view(unused), b, y);
    return;
  }
  check_linear(x.cols(), w.cols(), w.rows(), b.size());
  // 16-bit storage: each panel's rows decoded by the format layer's bulk decoder (exact).
  float_linear(x, w.rows(), b, y, [&](Eigen::Index c0, Eigen::Index cn) {
    thread_local std::vector<float> rows;
    rows.resize(static_cast<std::size_t>(cn * w.cols()));
    w.read_rows(c0, cn, rows);
    return static_cast<const float*>(rows.data());
  });
}

template <class T>
void rms_norm(const Mat<T>& x, const Vec<T>& w, double eps, Mat<T>& y) {
  if (w.size() != x.cols()) throw ShapeError("rms_norm: weight size disagrees with features");
  y.resize(x.rows(), x.cols());
  const T e = static_cast<T>(eps);
  for_each_piece(x.rows(), static_cast<double>(x.size()), [&](Eigen::Index r) {
    T ss = 0;
    for (Eigen::Index j = 0; j < x.cols(); ++j) ss += x(r, j) * x(r, j);
    ss /= static_cast<T>(x.cols());
    ss += e;
    const T inv = T{1} / std::sqrt(ss);
    for (Eigen::Index j = 0; j < x.cols(); ++j) y(r, j) = w(j) * (inv * x(r, j));
  });
}

template <class T>
void layer_norm(const Mat<T>& x, const Vec<T>& w, const Vec<T>& b, double eps, Mat<T>& y) {
  if (w.size() != x.cols() || (b.size() != 0 && b.size() != x.cols())) {
    throw ShapeError("layer_norm: weight or bias size disagrees with features");
  }
  y.resize(x.rows(), x.cols());
  const T e = static_cast<T>(eps);
  const T n = static_cast<T>(x.cols());
  for_each_piece(x.rows(), static_cast<double>(x.size()), [&](Eigen::Index r) {
    T mean = 0;
    for (Eigen::Index j = 0; j < x.cols(); ++j) mean += x(r, j);
    mean /= n;
    T var = 0;
    for (Eigen::Index j = 0; j < x.cols(); ++j) var += (x(r, j) - mean) * (x(r, j) - mean);
    var /= n;
    const T inv = T{1} / std::sqrt(var + e);
    for (Eigen::Index j = 0; j < x.cols(); ++j) {
      y(r, j) = (x(r, j) - mean) * inv * w(j) + (b.size() != 0 ? b(j) : T{0});
    }
  });
}

template <class T>
void rope(Mat<T>& x, int n_heads, int head_dim, int pos0, double theta, RopeStyle style) {
  std::vector<double> inv_freq(static_cast<std::size_t>(std::max(head_dim / 2, 0)));
  for (int j = 0; j < head_dim / 2; ++j)
    inv_freq[static_cast<std::size_t>(j)] = std::pow(theta, -2.0 * j / head_dim);
  rope(x, n_heads, head_dim, pos0, inv_freq, style);
}

template <class T>
void rope(Mat<T>& x, int n_heads, int head_dim, int pos0, const std::vector<double>& inv_freq,
          RopeStyle style) {
  if (x.cols() != static_cast<Eigen::Index>(n_heads) * head_dim || head_dim % 2 != 0 ||
      static_cast<int>(inv_freq.size()) != head_dim / 2) {
    throw ShapeError(
        "rope: tensor width is not n_heads·head_dim with an even head_dim and head_dim/2 frequencies");
  }
  const int half = head_dim / 2;
  for_each_piece(x.rows(), static_cast<double>(x.size()), [&](Eigen::Index r) {
    const double pos = static_cast<double>(pos0 + static_cast<int>(r));
    for (int j = 0; j < half; ++j) {
      // angle = p · θ^(−2j/head_dim), computed in double then rounded once to T.
      const double angle = pos * inv_freq[static_cast<std::size_t>(j)];
      const T c = static_cast<T>(std::cos(angle));
      const T s = static_cast<T>(std::sin(angle));
      for (int h = 0; h < n_heads; ++h) {
        const Eigen::Index base = static_cast<Eigen::Index>(h) * head_dim;
        const Eigen::Index i0 = style == RopeStyle::interleaved ? base + 2 * j : base + j;
        const Eigen::Index i1 = style == RopeStyle::interleaved ? base + 2 * j + 1 : base + j + half;
        const T x0 = x(r, i0);
        const T x1 = x(r, i1);
        x(r, i0) = x0 * c - x1 * s;
        x(r, i1) = x0 * s + x1 * c;
      }
    }
  });
}

template <class T>
void softmax_prefix(T* row, int len, int width) {
  T m = row[0];
  for (int i = 1; i < len; ++i) m = std::max(m, row[i]);
  T sum = 0;
  for (int i = 0; i < len; ++i) {
    row[i] = std::exp(row[i] - m);
    sum += row[i];
  }
  for (int i = 0; i < len; ++i) row[i] /= sum;
  for (int i = len; i < width; ++i) row[i] = 0;
}

template <class T>
void activate(Mat<T>& gate, const Mat<T>* up, Activation act) {
  if (up != nullptr && (up->rows() != gate.rows() || up->cols() != gate.cols())) {
    throw ShapeError("activate: gate and up shapes differ");
  }
  for_each_piece(gate.rows(), 8.0 * static_cast<double>(gate.size()), [&](Eigen::Index r) {
    for (Eigen::Index j = 0; j < gate.cols(); ++j) {
      const T z = gate(r, j);
      T a;
      switch (act) {
        case Activation::silu: a = z / (T{1} + std::exp(-z)); break;
        case Activation::gelu: a = static_cast<T>(0.5) * z * (T{1} + std::erf(z / std::sqrt(T{2}))); break;
        case Activation::gelu_tanh:
        default: {
          const T k = static_cast<T>(0.7978845608028654);  // sqrt(2/π)
          a = static_cast<T>(0.5) * z * (T{1} + std::tanh(k * (z + static_cast<T>(0.044715) * z * z * z)));
          break;
        }
      }
      gate(r, j) = up != nullptr ? a * (*up)(r, j) : a;
    }
  });
}

template <class T>
void attention(const Mat<T>& q, const Mat<T>& k_cache, const Mat<T>& v_cache, int pos0, int n_heads,
               int n_kv_heads, int head_dim, Mat<T>& out, const HeadHook<T>& on_scores,
               const HeadHook<T>& on_probs, const HeadGemm<T>& qk, const HeadGemm<T>& pv) {
  const Eigen::Index n = q.rows();
  const int ctx = pos0 + static_cast<int>(n);
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0) throw ShapeError("attention: n_heads % n_kv_heads != 0");
  if (q.cols() != static_cast<Eigen::Index>(n_heads) * head_dim ||
      k_cache.cols() != static_cast<Eigen::Index>(n_kv_heads) * head_dim || k_cache.rows() < ctx ||
      v_cache.cols() != k_cache.cols() || v_cache.rows() < ctx) {
    throw ShapeError("attention: q or cache shapes disagree with heads, head_dim or positions");
  }
  out.resize(n, q.cols());
  const int group = n_heads / n_kv_heads;
  const T scale = T{1} / std::sqrt(static_cast<T>(head_dim));
  const double work = static_cast<double>(n) * ctx * n_heads * head_dim;
  for_each_piece(n_heads, work, [&](Eigen::Index hi) {
    const int h = static_cast<int>(hi);
    const Eigen::Index qo = static_cast<Eigen::Index>(h) * head_dim;
    const Eigen::Index ko = static_cast<Eigen::Index>(h / group) * head_dim;
    Mat<T> s = Mat<T>::Zero(n, ctx);
    if (qk) {
      Mat<T> raw;
      qk(q.middleCols(qo, head_dim), k_cache.topRows(ctx).middleCols(ko, head_dim), raw, h);
      for (Eigen::Index i = 0; i < n; ++i) {
        const int len = pos0 + static_cast<int>(i) + 1;
        for (int t = 0; t < len; ++t) s(i, t) = raw(i, t) * scale;
      }
    } else {
      for (Eigen::Index i = 0; i < n; ++i) {
        const int len = pos0 + static_cast<int>(i) + 1;
        for (int t = 0; t < len; ++t) {
          T dot = 0;
          for (int d = 0; d < head_dim; ++d) dot += q(i, qo + d) * k_cache(t, ko + d);
          s(i, t) = dot * scale;
        }
      }
    }
    if (on_scores) on_scores(s, h);
    for (Eigen::Index i = 0; i < n; ++i) softmax_prefix(&s(i, 0), pos0 + static_cast<int>(i) + 1, ctx);
    if (on_probs) on_probs(s, h);
    if (pv) {
      // Masked probabilities are 0: their products drop out of every datapath's sum.
      Mat<T> oh;
      const Mat<T> vt = v_cache.topRows(ctx).middleCols(ko, head_dim).transpose();
      pv(s, vt, oh, h);
      out.middleCols(qo, head_dim) = oh;
      return;
    }
    for (Eigen::Index i = 0; i < n; ++i) {
      const int len = pos0 + static_cast<int>(i) + 1;
      for (int d = 0; d < head_dim; ++d) out(i, qo + d) = 0;
      for (int t = 0; t < len; ++t) {
        const T a = s(i, t);
        for (int d = 0; d < head_dim; ++d) out(i, qo + d) += a * v_cache(t, ko + d);
      }
    }
  });
}

#define LPEMU_ENGINE_OPS(T)                                                                            \
  template void linear<T>(const Mat<T>&, const Mat<T>&, const Vec<T>&, Mat<T>&);                       \
  template void rms_norm<T>(const Mat<T>&, const Vec<T>&, double, Mat<T>&);                            \
  template void layer_norm<T>(const Mat<T>&, const Vec<T>&, const Vec<T>&, double, Mat<T>&);           \
  template void rope<T>(Mat<T>&, int, int, int, double, RopeStyle);                                    \
  template void rope<T>(Mat<T>&, int, int, int, const std::vector<double>&, RopeStyle);                \
  template void softmax_prefix<T>(T*, int, int);                                                       \
  template void activate<T>(Mat<T>&, const Mat<T>*, Activation);                                       \
  template void attention<T>(const Mat<T>&, const Mat<T>&, const Mat<T>&, int, int, int, int, Mat<T>&, \
                             const HeadHook<T>&, const HeadHook<T>&, const HeadGemm<T>&,               \
                             const HeadGemm<T>&);
LPEMU_ENGINE_OPS(float)
LPEMU_ENGINE_OPS(double)
#undef LPEMU_ENGINE_OPS

}  // namespace lpemu::engine
