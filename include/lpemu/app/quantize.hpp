// `lpemu quantize` and `lpemu.call("quantize", ...)`: a tensor file fake-quantised with a block
// format (or an element format), optionally with its packed codes and scales and error statistics.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "lpemu/app/fields.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/format/rounding.hpp"
#include "lpemu/metrics/metrics.hpp"

namespace lpemu::app {

/// What to quantise.
struct QuantizeRequest {
  std::string format;        ///< block format (formats/block) or element format
  std::optional<int> axis;   ///< blocked axis (negative counts from the end); default: the format's
  std::optional<int> block;  ///< block size along the axis; default: the format's
  std::string scale_rule;    ///< ocp | ceil | even | amax_over_max | search; default: the format's
  std::string input;         ///< FILE.npy or FILE.h5:/path/dataset
  std::string output;        ///< FILE.npy or FILE.h5:/path/dataset
  std::string packed;        ///< also write packed codes and scales to this HDF5 file
  bool stats = false;        ///< compute SQNR, MSE, errors and clipped/saturated/flushed fractions
  bool force = false;        ///< replace existing outputs
  format::ConvertOptions options = [] {  ///< element conversion (overflow saturates by default)
    format::ConvertOptions o;
    o.overflow = format::Overflow::saturate;
    return o;
  }();
};

/// A quantised tensor written to `output`.
struct QuantizeResult {
  std::string format;  ///< the format's name
  std::size_t elements = 0;
  std::string output;
  std::string packed;  ///< the packed file written, or empty
  std::optional<metrics::QuantizationStats> stats;
};

/// Quantises the request's tensor and writes it; throws lpemu::Error for bad input.
QuantizeResult quantize(experiment::Context& ctx, const QuantizeRequest& request);

/// The result's one serialised form (`lpemu quantize --json`).
Fields fields(const QuantizeResult& r);

/// A request from named fields (format, axis, block, scale_rule, input, output, packed, stats,
/// force and the conversion options rounding, overflow, seed, sr_bits, ftz, daz).
QuantizeRequest quantize_request(const Fields& f);

}  // namespace lpemu::app
