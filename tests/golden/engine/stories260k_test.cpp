// Golden tests against data/models/stories260K/activations.h5: a NumPy float32 forward pass over
// a 370-token paragraph and a 256-step greedy continuation, recorded independently of lpemu
// (README of the model: the logits also match llama2.c run.c to 2.3e-5).
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include <catch2/catch.hpp>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/session.hpp"
#include "lpemu/io/hdf5.hpp"
#include "support/test_support.hpp"

namespace {

using namespace lpemu::engine;

const Model& stories() {
  static const Model m = load_model(lpemu::test::source_path("data/models/stories260K/model.h5"));
  return m;
}

const lpemu::io::H5File& recorded() {
  static const lpemu::io::H5File f =
      lpemu::io::H5File::open(lpemu::test::source_path("data/models/stories260K/activations.h5"));
  return f;
}

std::vector<int> recorded_ints(const std::string& name) {
  const auto v = recorded().read_ints(name);
  return {v.begin(), v.end()};
}

// Runs the paragraph in one causal pass and returns the largest |Δ| of every traced tensor.
std::map<std::string, double> paragraph_errors(const PrecisionPlan& plan) {
  const std::vector<int> tokens = recorded_ints("tokens");
  std::map<std::string, double> err;
  SessionOptions opts;
  opts.on_trace = [&](std::string_view name, const RowMatrix& x) {
    const lpemu::io::Tensor ref = recorded().read_floats(std::string(name));
    REQUIRE(ref.shape.size() == 2);
    REQUIRE(static_cast<Eigen::Index>(ref.shape[0]) == x.rows());
    REQUIRE(static_cast<Eigen::Index>(ref.shape[1]) == x.cols());
    double m = 0;
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      m = std::max(m, std::abs(static_cast<double>(x.data()[i]) -
                               static_cast<double>(ref.data[static_cast<std::size_t>(i)])));
    }
    err[std::string(name)] = m;
  };
  Session s(stories(), plan, opts);
  (void)s.forward(tokens);
  return err;
}

void check_paragraph(const PrecisionPlan& plan) {
  const auto err = paragraph_errors(plan);
  // 5 layers × 5 tensors + final_residual + output_input + logits.
  REQUIRE(err.size() == 5 * 5 + 3);
  for (const auto& [name, e] : err) {
    INFO(plan.name << " " << name << " max|Δ| = " << e);
    CHECK(e <= 1e-4);
  }
}

TEST_CASE("fp32 plan reproduces every recorded activation and the logits within 1e-4", "[engine][golden]") {
  check_paragraph(builtin_plan("fp32"));
}

TEST_CASE("fp64 plan reproduces every recorded activation and the logits within 1e-4", "[engine][golden]") {
  check_paragraph(builtin_plan("fp64"));
}

TEST_CASE("tokenizer reproduces the recorded paragraph tokens", "[engine][golden]") {
  const std::string text = recorded().attr_string("/", "text");
  CHECK(stories().tokenizer.encode(text) == recorded_ints("tokens"));
  const std::vector<int> greedy = recorded_ints("greedy/tokens");
  const std::string prompt = recorded().attr_string("greedy", "prompt");
  const std::vector<int> enc = stories().tokenizer.encode(prompt);
  REQUIRE(enc.size() == 5);
  CHECK(std::equal(enc.begin(), enc.end(), greedy.begin()));
}

TEST_CASE("fp32 greedy generation reproduces the recorded continuation token for token", "[engine][golden]") {
  const std::vector<int> greedy = recorded_ints("greedy/tokens");
  Session s(stories(), builtin_plan("fp32"));
  const std::vector<int> prompt(greedy.begin(), greedy.begin() + 5);
  const std::vector<int> out = generate_greedy(s, prompt, 256);
  CHECK(out == greedy);
  // The decoded text begins as the model README prints it.
  const std::string text = stories().tokenizer.decode(out);
  CHECK(text.rfind("Once upon a time, there was a little girl named Lily.", 0) == 0);
}

}  // namespace
