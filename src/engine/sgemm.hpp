// The engine's float GEMM kernel (Google Highway, chosen at run time): C = A·Bᵀ with every output
// summed in one defined order, so the fp32 plan's linear maps give the same bits on every SIMD
// target, machine and thread count.
#pragma once

#include <cstddef>

namespace lpemu::engine::detail {

/// Columns of B one sgemm_panel call covers on the running CPU's SIMD target (two float vectors).
std::size_t sgemm_panel_width();

/// C[rows, cols] = A[rows, k] · B[cols, k]ᵀ for cols <= sgemm_panel_width() (row-major, leading
/// dimensions lda, ldb, ldc). Each output is +0 plus the products in ascending k, each product
/// rounded to float and then added (no fused multiply-add): the naive loop's bits, NaN and Inf included.
void sgemm_panel(std::size_t rows, std::size_t cols, std::size_t k, const float* a, std::size_t lda,
                 const float* b, std::size_t ldb, float* c, std::size_t ldc);

}  // namespace lpemu::engine::detail
