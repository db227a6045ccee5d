// `lpemu gemm` and `lpemu.call("gemm", ...)`: C = A·Bᵀ on a datapath from tensor files, operands
// as the engine feeds them (values quantised to a format, or codes with their scales).
#pragma once

#include <cstddef>
#include <string>

#include "lpemu/app/fields.hpp"
#include "lpemu/experiment/context.hpp"

namespace lpemu::app {

/// The product to compute.
struct GemmRequest {
  std::string datapath;            ///< datapath name or eigen
  std::string a, b, out;           ///< A [M, K], B [N, K], C [M, N]: FILE.npy or FILE.h5:/dataset
  std::string a_format, b_format;  ///< formats A and B are quantised to (empty: fp32 values)
  bool codes = false;              ///< A and B hold codes of a_format/b_format
  std::string a_scales, b_scales;  ///< with codes: scale codes in block order
  float a_tensor_scale = 1.0F, b_tensor_scale = 1.0F;  ///< with codes: FP32 tensor scales (NVFP4)
  bool force = false;                                  ///< replace an existing `out`
};

/// The product written to `out`.
struct GemmResult {
  std::size_t rows = 0, cols = 0;
  std::string out;
  std::string gemm;  ///< the datapath strategy's name
};

/// Computes and writes C; throws ShapeError for operands that are not matrices, Error for
/// inconsistent options.
GemmResult gemm(experiment::Context& ctx, const GemmRequest& request);
/// The result's one serialised form (`lpemu gemm --json`).
Fields fields(const GemmResult& r);
/// A request from named fields (datapath, a, b, out, a_format, b_format, codes, a_scales,
/// b_scales, a_tensor_scale, b_tensor_scale, force).
GemmRequest gemm_request(const Fields& f);

}  // namespace lpemu::app
