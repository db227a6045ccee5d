#include <cmath>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/sampling.hpp"
#include "lpemu/error.hpp"

namespace {

using lpemu::engine::sample_token;
using lpemu::engine::SamplingOptions;

// Logits of probabilities 0.2, 0.5, 0.3 (most likely: 1, then 2, then 0).
const std::vector<float> kLogits = {std::log(0.2F), std::log(0.5F), std::log(0.3F)};

SamplingOptions opts(double t, int k = 0, double p = 1.0) {
  SamplingOptions o;
  o.temperature = t;
  o.top_k = k;
  o.top_p = p;
  return o;
}

}  // namespace

TEST_CASE("sampling inverts the cumulative distribution, most likely token first", "[engine][sampling]") {
  // Temperature 1: token 1 on [0, 0.5), token 2 on [0.5, 0.8), token 0 on [0.8, 1).
  CHECK(sample_token(kLogits, opts(1), 0.0) == 1);
  CHECK(sample_token(kLogits, opts(1), 0.49) == 1);
  CHECK(sample_token(kLogits, opts(1), 0.51) == 2);
  CHECK(sample_token(kLogits, opts(1), 0.79) == 2);
  CHECK(sample_token(kLogits, opts(1), 0.81) == 0);
  CHECK(sample_token(kLogits, opts(1), 0.999999) == 0);
  // Temperature 0 and top-k 1 are greedy whatever u is.
  CHECK(sample_token(kLogits, opts(0), 0.99) == 1);
  CHECK(sample_token(kLogits, opts(1, 1), 0.99) == 1);
}

TEST_CASE("top-k, top-p and temperature reshape the distribution", "[engine][sampling]") {
  // top-k 2 keeps {1: 0.5, 2: 0.3}, renormalised to 0.625 / 0.375.
  CHECK(sample_token(kLogits, opts(1, 2), 0.62) == 1);
  CHECK(sample_token(kLogits, opts(1, 2), 0.63) == 2);
  CHECK(sample_token(kLogits, opts(1, 2), 0.999) == 2);
  // top-p 0.7: 0.5 < 0.7, 0.5 + 0.3 ≥ 0.7, so the nucleus is {1, 2} as above; top-p 0.5 keeps {1}.
  CHECK(sample_token(kLogits, opts(1, 0, 0.7), 0.63) == 2);
  CHECK(sample_token(kLogits, opts(1, 0, 0.7), 0.999) == 2);
  CHECK(sample_token(kLogits, opts(1, 0, 0.5), 0.999) == 1);
  // Temperature 2: p ∝ sqrt(p) = 0.447, 0.707, 0.548 → token 1 up to 0.707/1.702 = 0.4155.
  const double z = std::sqrt(0.2) + std::sqrt(0.5) + std::sqrt(0.3);
  CHECK(sample_token(kLogits, opts(2), std::sqrt(0.5) / z - 1e-4) == 1);
  CHECK(sample_token(kLogits, opts(2), std::sqrt(0.5) / z + 1e-4) == 2);
  CHECK(sample_token(kLogits, opts(2), (std::sqrt(0.5) + std::sqrt(0.3)) / z + 1e-4) == 0);
}

TEST_CASE("sampling options are validated by name", "[engine][sampling]") {
  CHECK_THROWS_WITH(lpemu::engine::validate(opts(-1)), Catch::Contains("temperature = -1.000000: expected"));
  CHECK_THROWS_WITH(lpemu::engine::validate(opts(1, -2)), Catch::Contains("top_k = -2: expected >= 0"));
  CHECK_THROWS_WITH(lpemu::engine::validate(opts(1, 0, 0)),
                    Catch::Contains("top_p = 0.000000: expected a number in (0, 1]"));
}

TEST_CASE("seeded generation is reproducible and follows the seed", "[engine][sampling]") {
  const lpemu::engine::Model m =
      lpemu::engine::load_model(std::string(LPEMU_SOURCE_DIR) + "/data/models/stories260K/model.h5");
  const auto run = [&](std::uint64_t seed) {
    lpemu::engine::Session s(m, lpemu::engine::builtin_plan("fp32"));
    SamplingOptions o = opts(1.0, 40, 0.95);
    o.seed = seed;
    return lpemu::engine::generate(s, {1}, 40, o);
  };
  const auto a = run(7);
  CHECK(a == run(7));
  CHECK(a != run(8));
  CHECK(a.size() > 1);
}
