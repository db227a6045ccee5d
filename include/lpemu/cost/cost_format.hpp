// What the cost model needs to know about a number format: element widths, block-scale
// overhead and which peak-rate class of a target it runs on.
//
// Element formats come from lpemu::format::Registry, block formats from lpemu::block's registry
// (built-ins: MXFP8/6/4 and MXINT8 with 32-element E8M0 blocks per OCP MX v1.0, NVFP4 with
// 16-element E4M3 blocks and one FP32 tensor scale; plus user files).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lpemu/format/registry.hpp"

namespace lpemu::block {
class BlockRegistry;
}

namespace lpemu::cost {

/// Bit widths of one element (or scale) format as the hardware sees them.
struct ElementWidth {
  bool is_float = true;
  int bits = 0;              ///< storage bits
  int exponent_bits = 0;     ///< 0 for integers
  int significand_bits = 0;  ///< incl. the hidden bit for floats; magnitude bits + sign for ints (= bits)
};

/// A storage/compute format for the cost model: an element plus optional block and tensor scales.
struct CostFormat {
  std::string name;
  std::string element_name;
  ElementWidth element;
  int block_size = 0;             ///< elements per block scale; 0 = no block scale
  std::string scale_name;         ///< e.g. "e8m0", "fp8_e4m3"
  ElementWidth scale;             ///< width of the block scale
  double tensor_scale_bytes = 0;  ///< bytes of per-tensor scale (NVFP4: one FP32 = 4)

  /// Storage bits per element including the amortised block scale (MXFP8: 8 + 8/32 = 8.25).
  double bits_per_element() const;
};

/// Widths of an element format from the format registry.
ElementWidth element_width(const format::Format& f);

/// Resolves an element-format or block-format name (block formats from `blocks`, nullptr: the
/// built-ins); throws UnknownNameError.
CostFormat resolve_format(std::string_view name, const format::Registry& formats,
                          const block::BlockRegistry* blocks = nullptr);

/// Peak-rate classes in the order tried (narrowest first): fp4 int4 fp6 fp8 int8 fp16 bf16 tf32 fp32.
const std::vector<std::string>& rate_classes();

/// True if every value of `w` is exactly representable by the inputs of a `rate_class` unit.
bool fits_class(const ElementWidth& w, std::string_view rate_class);
/// Significand bits (hidden bit included) a float rate class keeps for elements of `exponent_bits`
/// exponent bits (its widest alternative covering that range); 0 for integer classes, unknown
/// names and exponent ranges the class cannot hold.
int class_significand_bits(std::string_view rate_class, int exponent_bits);

}  // namespace lpemu::cost
