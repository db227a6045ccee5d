#include "lpemu/metrics/perplexity.hpp"

#include <chrono>
#include <cmath>
#include <span>
#include <string>

#include "lpemu/engine/session.hpp"
#include "lpemu/error.hpp"
#include "lpemu/metrics/metrics.hpp"

namespace lpemu::metrics {

PerplexityResult sliding_perplexity(const engine::Model& model, const engine::PrecisionPlan& plan,
                                    const std::vector<int>& tokens,
                                    const engine::QuantizerFactory& quantizers,
                                    const engine::GemmFactory& gemms, const PerplexityOptions& options) {
  const int n = static_cast<int>(tokens.size());
  const int context = options.context > 0 ? options.context : model.config.seq_len;
  const int stride = options.stride > 0 ? options.stride : context;
  if (n < 2) throw ShapeError("perplexity: need at least two tokens to score, got " + std::to_string(n));
  if (context < 2 || context > model.config.seq_len) {
    throw ShapeError("perplexity: context " + std::to_string(context) + ": expected 2.." +
                     std::to_string(model.config.seq_len) + " (the model's seq_len)");
  }
  if (stride > context) {
    throw ShapeError("perplexity: stride " + std::to_string(stride) + ": expected 1.." +
                     std::to_string(context) + " (a larger stride would leave tokens unscored)");
  }
  engine::SessionOptions o;
  o.quantizers = &quantizers;
  o.gemms = &gemms;
  o.max_tokens = std::min(context, n);
  engine::Session s(model, plan, o);
  PerplexityResult r;
  const auto t0 = std::chrono::steady_clock::now();
  int prev_end = 0;
  for (int begin = 0;; begin += stride) {
    const int end = std::min(begin + context, n);
    s.reset();
    const engine::RowMatrix logits = s.forward(std::span<const int>(tokens.data() + begin, end - begin));
    // Token t is predicted by row t − begin − 1; score the tokens no earlier window reached.
    for (int t = std::max(prev_end, begin + 1); t < end; ++t) {
      const auto row = static_cast<Eigen::Index>(t - begin - 1);
      r.nll.push_back(nll(std::span<const float>(&logits(row, 0), static_cast<std::size_t>(logits.cols())),
                          tokens[static_cast<std::size_t>(t)]));
    }
    ++r.windows;
    prev_end = end;
    if (options.progress) {
      options.progress(r.nll.size(), static_cast<std::size_t>(n - 1),
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (end == n) break;
  }
  for (const double v : r.nll) r.mean_nll += v;
  r.mean_nll /= static_cast<double>(r.nll.size());
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

}  // namespace lpemu::metrics
