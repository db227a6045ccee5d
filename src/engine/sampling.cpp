#include "lpemu/engine/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "lpemu/error.hpp"
#include "lpemu/format/rounding.hpp"

namespace lpemu::engine {
using format::splitmix64;

void validate(const SamplingOptions& o) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature)) {
    throw SpecError("sampling: temperature = " + std::to_string(o.temperature) +
                    ": expected a finite number >= 0");
  }
  if (o.top_k < 0)
    throw SpecError("sampling: top_k = " + std::to_string(o.top_k) + ": expected >= 0 (0 = all)");
  if (!(o.top_p > 0 && o.top_p <= 1)) {
    throw SpecError("sampling: top_p = " + std::to_string(o.top_p) + ": expected a number in (0, 1]");
  }
}

int sample_token(std::span<const float> logits, const SamplingOptions& o, double u) {
  if (logits.empty()) throw ShapeError("sampling: empty logits");
  const auto best = static_cast<int>(argmax(logits));
  if (o.temperature == 0) return best;
  const double m = logits[static_cast<std::size_t>(best)];
  std::vector<double> p(logits.size());
  for (std::size_t i = 0; i < p.size(); ++i)
    p[i] = std::exp((static_cast<double>(logits[i]) - m) / o.temperature);
  std::vector<int> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return p[std::size_t(a)] > p[std::size_t(b)]; });
  std::size_t keep =
      o.top_k > 0 ? std::min<std::size_t>(static_cast<std::size_t>(o.top_k), order.size()) : order.size();
  double mass = 0;
  for (std::size_t i = 0; i < keep; ++i) mass += p[std::size_t(order[i])];
  if (o.top_p < 1) {
    double c = 0;
    for (std::size_t i = 0; i < keep; ++i) {
      c += p[std::size_t(order[i])];
      if (c >= o.top_p * mass) {
        keep = i + 1;
        mass = c;
        break;
      }
    }
  }
  const double target = u * mass;
  double c = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    c += p[std::size_t(order[i])];
    if (target < c) return order[i];
  }
  return order[keep - 1];
}

std::vector<int> generate(Session& session, const std::vector<int>& prompt, int steps,
                          const SamplingOptions& o) {
  validate(o);
  if (prompt.empty()) throw ShapeError("generate: the prompt needs at least one token (BOS)");
  const int bos = session.model().config.bos_id;
  std::uint64_t state = o.seed;
  std::vector<int> out{prompt.front()};
  int token = prompt.front();
  int pos = 0;
  while (pos < steps) {
    const RowMatrix logits = session.forward(std::span<const int>(&token, 1));
    ++pos;
    int next;
    if (pos < static_cast<int>(prompt.size())) {
      next = prompt[static_cast<std::size_t>(pos)];
    } else {
      const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
      next =
          sample_token(std::span<const float>(logits.data(), static_cast<std::size_t>(logits.cols())), o, u);
    }
    if (next == bos) break;
    out.push_back(next);
    token = next;
  }
  return out;
}

}  // namespace lpemu::engine
