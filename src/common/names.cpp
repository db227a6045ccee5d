#include "lpemu/detail/names.hpp"

#include <algorithm>
#include <tuple>
#include <utility>

namespace lpemu::detail {
namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1);
  std::vector<std::size_t> cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::vector<std::string> closest_names(std::string_view name, const std::vector<std::string>& known,
                                       std::size_t n) {
  // Names containing (or contained in) `name` first, then by edit distance, then alphabetically:
  // "weight" suggests "weights" before "grad_weights".
  std::vector<std::tuple<bool, std::size_t, std::string>> scored;
  scored.reserve(known.size());
  for (const auto& k : known) {
    const bool contains = k.find(name) != std::string::npos || std::string(name).find(k) != std::string::npos;
    scored.emplace_back(!contains, edit_distance(name, k), k);
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (std::size_t i = 0; i < scored.size() && i < n; ++i) out.push_back(std::get<2>(scored[i]));
  return out;
}

}  // namespace lpemu::detail
