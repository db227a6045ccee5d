// Tiny random models for engine tests.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "lpemu/block/block_format.hpp"
#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"

namespace lpemu::test {

/// Random normal(0, scale) values [r, c] rounded to `format` (so that they are exactly its values).
engine::RowMatrix random_matrix(std::mt19937& g, int r, int c, float scale, const char* format);
/// Random normal(mean, scale) values.
engine::Vec<float> random_vector(std::mt19937& g, int n, float mean, float scale);
/// batch sequences of seq + 1 token ids drawn uniformly from [0, vocab) (inputs and next-token targets).
std::vector<int> random_tokens(int batch, int seq, int vocab, unsigned seed);
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

/// block::quantize of `x` as a GEMM with contraction along `axis` (0: down the columns) sees it:
/// block granularity gets its blocks along `axis`; other granularities take the operand as the
/// GEMM holds it ([rows, contraction]).
engine::RowMatrix quantize_along(const block::BlockFormat& fmt, const engine::RowMatrix& x, int axis);
/// True if a and b have the same shape and the same float bits.
bool same_bits(const engine::RowMatrix& a, const engine::RowMatrix& b);

}  // namespace lpemu::test
