#include "lpemu/metrics/perplexity.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>
#include <string>

#include "lpemu/error.hpp"
#include "lpemu/metrics/metrics.hpp"

namespace lpemu::metrics {
namespace {

// The window length options ask for, checked against the model.
int window_length(const engine::Model& model, const PerplexityOptions& options) {
  const int context = options.context > 0 ? options.context : model.config.seq_len;
  if (context < 2 || context > model.config.seq_len) {
    throw ShapeError("perplexity: context " + std::to_string(context) + ": expected 2.." +
                     std::to_string(model.config.seq_len) + " (the model's seq_len)");
  }
  const int stride = options.stride > 0 ? options.stride : context;
  if (stride > context) {
    throw ShapeError("perplexity: stride " + std::to_string(stride) + ": expected 1.." +
                     std::to_string(context) + " (a larger stride would leave tokens unscored)");
  }
  return context;
}

// One forward pass: tokens [begin, end) of a document, scoring tokens [first, end).
struct Window {
  std::size_t doc = 0;
  int begin = 0, end = 0, first = 0;
};

}  // namespace

int perplexity_cache_tokens(const engine::Model& model, const std::vector<std::vector<int>>& documents,
                            const PerplexityOptions& options) {
  const int context = window_length(model, options);
  std::size_t longest = 0;
  for (const auto& d : documents) longest = std::max(longest, d.size());
  return static_cast<int>(
      std::min<std::size_t>(static_cast<std::size_t>(context), std::max<std::size_t>(longest, 1)));
}

std::vector<PerplexityResult> sliding_perplexity(engine::Session& session,
                                                 const std::vector<std::vector<int>>& documents,
                                                 const PerplexityOptions& options) {
  const int context = window_length(session.model(), options);
  const int stride = options.stride > 0 ? options.stride : context;
  // Every document's windows: token t is predicted by row t − begin − 1 and scored in the first
  // window that reaches it.
  std::vector<Window> windows;
  std::size_t total = 0;
  for (std::size_t d = 0; d < documents.size(); ++d) {
    const int n = static_cast<int>(documents[d].size());
    if (n < 2) {
      throw ShapeError("perplexity: document " + std::to_string(d + 1) +
                       ": need at least two tokens to score, got " + std::to_string(n));
    }
    int prev_end = 0;
    for (int begin = 0;; begin += stride) {
      const int end = std::min(begin + context, n);
      windows.push_back({d, begin, end, std::max(prev_end, begin + 1)});
      total += static_cast<std::size_t>(end - windows.back().first);
      prev_end = end;
      if (end == n) break;
    }
  }
  std::vector<PerplexityResult> r(documents.size());
  std::size_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::span<const int>> batch;
  engine::RowMatrix logits;
  for (std::size_t w0 = 0; w0 < windows.size();) {
    // Windows in order, as many as fit batch_tokens (at least one).
    std::size_t w1 = w0;
    long tokens = 0;
    batch.clear();
    while (w1 < windows.size() &&
           (w1 == w0 || tokens + (windows[w1].end - windows[w1].begin) <= options.batch_tokens)) {
      const Window& w = windows[w1++];
      tokens += w.end - w.begin;
      batch.emplace_back(documents[w.doc].data() + w.begin, static_cast<std::size_t>(w.end - w.begin));
    }
    session.forward_batch(batch, logits);
    Eigen::Index row0 = 0;  // the window's first row in logits
    for (std::size_t i = w0; i < w1; ++i) {
      const Window& w = windows[i];
      PerplexityResult& out = r[w.doc];
      for (int t = w.first; t < w.end; ++t) {
        const auto row = row0 + static_cast<Eigen::Index>(t - w.begin - 1);
        out.nll.push_back(
            nll(std::span<const float>(&logits(row, 0), static_cast<std::size_t>(logits.cols())),
                documents[w.doc][static_cast<std::size_t>(t)]));
      }
      ++out.windows;
      done += static_cast<std::size_t>(w.end - w.first);
      row0 += w.end - w.begin;
    }
    w0 = w1;
    if (options.progress) {
      options.progress(done, total,
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  for (PerplexityResult& p : r) {
    for (const double v : p.nll) p.mean_nll += v;
    p.mean_nll /= static_cast<double>(p.nll.size());
    p.perplexity = std::exp(p.mean_nll);
  }
  return r;
}

PerplexityResult sliding_perplexity(const engine::Model& model, const engine::PrecisionPlan& plan,
                                    const std::vector<int>& tokens,
                                    const engine::QuantizerFactory& quantizers,
                                    const engine::GemmFactory& gemms, const PerplexityOptions& options) {
  const std::vector<std::vector<int>> docs{tokens};
  engine::SessionOptions o;
  o.quantizers = &quantizers;
  o.gemms = &gemms;
  o.max_tokens = perplexity_cache_tokens(model, docs, options);
  engine::Session s(model, plan, o);
  return std::move(sliding_perplexity(s, docs, options).front());
}

}  // namespace lpemu::metrics
