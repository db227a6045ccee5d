// Tiny random models for engine tests.
#pragma once

#include <random>
#include <string>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"

namespace lpemu::test {

/// Random normal(0, scale) values [r, c] rounded to `format` (so that they are exactly its values).
engine::RowMatrix random_matrix(std::mt19937& g, int r, int c, float scale, const char* format);
/// Random normal(mean, scale) values.
engine::Vec<float> random_vector(std::mt19937& g, int n, float mean, float scale);
/// A tiny float32 model (dim 16, 2 layers, 4 heads of 4, vocab 40, seq_len 32) whose matrices hold
/// `format` values: "llama" (GQA 4/2, half-split RoPE, SwiGLU), "gpt2" (learned positions, every
/// bias) or "mixtral" (3 experts, top 2); `tied`: output = embeddings.
engine::Model tiny_model(const std::string& family, const char* format, bool tied, unsigned seed = 11);

/// The standard quantisers over the built-in element formats (built once).
const engine::QuantizerFactory& builtin_quantizers();
/// The built-in GEMM strategies (built once).
const engine::GemmFactory& builtin_gemms();
/// The plan document `text` over the built-in formats and GEMMs; `origin` names it in errors.
engine::PrecisionPlan read_plan(const std::string& text, const std::string& origin = "train.toml");

}  // namespace lpemu::test
