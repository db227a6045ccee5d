#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/engine/session.hpp"
#include "lpemu/engine/tokenizer.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/evaluation.hpp"
#include "lpemu/metrics/metrics.hpp"

namespace {

using lpemu::engine::Tokenizer;

// A hand-made vocabulary: control tokens, 256 byte pieces, then pieces with merge scores.
Tokenizer tiny() {
  std::vector<std::string> pieces{"<unk>", "\n<s>\n", "\n</s>\n"};
  std::vector<float> scores{0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    pieces.emplace_back(buf);
    scores.push_back(0);
  }
  for (const auto& [p, s] : std::vector<std::pair<std::string, float>>{
           {" ", -1}, {"a", -2}, {"b", -3}, {"ab", -4}, {" a", -5}, {" ab", -6}, {"é", -7}, {"ba", -1.5F}}) {
    pieces.push_back(p);
    scores.push_back(s);
  }
  return Tokenizer(pieces, scores);
}

TEST_CASE("tokenizer merges the highest-scoring pair first and falls back to bytes", "[engine][tokenizer]") {
  const Tokenizer t = tiny();
  const int sp = t.find(" ");
  REQUIRE(sp == 259);
  // " ab": pairs (" ","a") → " a" score -5, ("a","b") → "ab" score -4: "ab" merges first, then " ab".
  CHECK(t.encode("ab") == std::vector<int>{1, t.find(" ab")});
  // "bab": ("b","a") -1.5 is best → " ", "ba", "b"; then nothing merges.
  CHECK(t.encode("bab") == std::vector<int>{1, sp, t.find("ba"), t.find("b")});
  // "é" is one code point in the vocabulary; "€" (E2 82 AC) is not and becomes three byte tokens.
  CHECK(t.encode("é", false) == std::vector<int>{sp, t.find("é")});
  CHECK(t.encode("€", false) == std::vector<int>{sp, 0xE2 + 3, 0x82 + 3, 0xAC + 3});
  CHECK(t.encode("", true, true) == std::vector<int>{1, 2});
}

TEST_CASE("tokenizer decode strips the space after BOS and maps byte pieces to bytes",
          "[engine][tokenizer]") {
  const Tokenizer t = tiny();
  CHECK(t.decode(1, t.find(" ab")) == "ab");
  CHECK(t.decode(t.find("a"), t.find(" ab")) == " ab");
  CHECK(t.decode(7, 0x41 + 3) == "A");
  CHECK(t.decode(t.encode("a€b")) == "a€b");
  CHECK_THROWS_AS(t.piece(9999), lpemu::ShapeError);
}

TEST_CASE("metrics match hand-computed values", "[metrics]") {
  const std::vector<float> ref{1.0F, 2.0F};
  const std::vector<float> test{1.0F, 2.5F};
  const auto s = lpemu::metrics::compare(ref, test);
  CHECK(s.mse == Approx(0.125));
  CHECK(s.max_abs == Approx(0.5));
  CHECK(s.sqnr_db == Approx(10.0 * std::log10(5.0 / 0.25)));
  CHECK(lpemu::metrics::sqnr_db(ref, ref) == std::numeric_limits<double>::infinity());
  const std::vector<float> uniform(4, 0.5F);
  CHECK(lpemu::metrics::nll(uniform, 2) == Approx(std::log(4.0)));
  CHECK(lpemu::metrics::kl_divergence(uniform, uniform) == Approx(0.0).margin(1e-15));
  // P = softmax(0, ln 3) = (1/4, 3/4), Q uniform: KL = 1/4 ln(1/2) + 3/4 ln(3/2).
  const std::vector<float> p{0.0F, static_cast<float>(std::log(3.0))};
  const std::vector<float> q{0.0F, 0.0F};
  CHECK(lpemu::metrics::kl_divergence(p, q) ==
        Approx(0.25 * std::log(0.5) + 0.75 * std::log(1.5)).epsilon(1e-6));
  CHECK(lpemu::engine::argmax(std::vector<float>{1, 3, 3, 2}) == 1);
  CHECK_THROWS_AS(lpemu::metrics::compare(ref, uniform), lpemu::ShapeError);
}

TEST_CASE("error accumulator totals equal one comparison over the concatenation", "[metrics]") {
  lpemu::experiment::ErrorAccumulator acc;
  acc.add("a", std::vector<float>{1, 2}, std::vector<float>{1, 2.5F});
  acc.add("b", std::vector<float>{3}, std::vector<float>{3});
  acc.add("a", std::vector<float>{-4}, std::vector<float>{-3});
  const auto r = acc.results();
  REQUIRE(r.size() == 2);
  CHECK(r[0].first == "a");
  CHECK(r[0].second.count == 3);
  CHECK(r[0].second.mse == Approx((0.25 + 1.0) / 3));
  CHECK(r[0].second.max_abs == Approx(1.0));
  CHECK(r[0].second.sqnr_db == Approx(10.0 * std::log10(21.0 / 1.25)));
  CHECK(r[1].second.sqnr_db == std::numeric_limits<double>::infinity());
}

TEST_CASE("error accumulator parts (attention heads from parallel work) total the same in any call order",
          "[metrics]") {
  // Values whose double sums round differently in different orders.
  const std::vector<std::vector<float>> ref = {{1e8F, 1.0F}, {3.0F, -1e8F}, {0.1F, 7.0F}};
  const std::vector<std::vector<float>> test = {{1e8F + 8.0F, 1.1F}, {3.3F, -1e8F}, {0.2F, 7.7F}};
  const auto totals = [&](std::initializer_list<int> order) {
    lpemu::experiment::ErrorAccumulator acc;
    for (const int h : order) {
      const auto i = static_cast<std::size_t>(h);
      acc.add("scores", ref[i], test[i], h);
    }
    return acc.results().at(0).second;
  };
  const auto a = totals({0, 1, 2});
  for (const auto& b : {totals({2, 1, 0}), totals({1, 0, 2}), totals({2, 0, 1})}) {
    CHECK(b.count == a.count);
    CHECK(std::memcmp(&b.mse, &a.mse, sizeof a.mse) == 0);
    CHECK(std::memcmp(&b.sqnr_db, &a.sqnr_db, sizeof a.sqnr_db) == 0);
    CHECK(b.max_abs == a.max_abs);
  }
}

}  // namespace
