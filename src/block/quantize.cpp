// Block quantisation entry points: fake-quantisation, encoding and decoding. The fast kernels
// (quantize_fast.cpp) and the generic kernel (quantize_generic.cpp) give identical bits; the
// scale rules are in scale_rules.cpp and the layout in layout.cpp.
#include "lpemu/block/quantize.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include "block/quantize_detail.hpp"
#include "block/quantize_fast.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::block {

using detail::Ctx;
using detail::for_block_rows;
using detail::for_segments;
using detail::generic_block;
using detail::narrow;

namespace {

void check_sizes(const BlockLayout& L, std::size_t in, std::size_t out, const char* what) {
  if (in != L.element_count() || out != L.element_count()) {
    throw ShapeError(std::string(what) + ": the shape holds " + std::to_string(L.element_count()) +
                     " elements but the input has " + std::to_string(in) + " and the output " +
                     std::to_string(out));
  }
}

// NVFP4-style tensor scale: fp32(amax_tensor / (max_elem · max_scale)); 1 when that is not a
// positive finite float (all-zero or non-finite tensors).
void set_tensor_scale(Ctx& c, std::span<const float> in) {
  if (c.f.tensor_scale == TensorScale::none) return;
  // The finite amax; under subnormal_inputs = flush a subnormal amax means every finite input is
  // subnormal or zero, so it is 0.
  std::uint32_t ab = detail::simd_finite_amax(in.data(), in.size());
  if (c.f.subnormal_inputs == SubnormalInputs::flush && ab < 0x00800000U) ab = 0;
  const float amax = std::bit_cast<float>(ab);
  const float g = narrow(static_cast<double>(amax) / (c.max_elem * c.f.scale.max_finite));
  c.g = (std::isfinite(g) && g > 0.0F) ? static_cast<double>(g) : 1.0;
}

void quantize_impl(const BlockFormat& fmt, std::span<const float> in, std::span<float> out,
                   std::span<const std::size_t> shape, bool allow_fast) {
  Ctx c(fmt, shape);
  check_sizes(c.L, in.size(), out.size(), "block quantize");
  if (in.empty()) return;
  set_tensor_scale(c, in);
  if (allow_fast && detail::quantize_fast(c, in, out)) return;
  for_block_rows(c.L, [&](std::size_t a, std::size_t bi) {
    for (std::size_t bj = 0; bj < c.L.grid_cols(); ++bj)
      generic_block(c, in.data(), out.data(), nullptr, nullptr, a, bi, bj);
  });
}

}  // namespace

void quantize(const BlockFormat& fmt, std::span<const float> in, std::span<float> out,
              std::span<const std::size_t> shape) {
  quantize_impl(fmt, in, out, shape, true);
}

void detail::quantize_generic(const BlockFormat& fmt, std::span<const float> in, std::span<float> out,
                              std::span<const std::size_t> shape) {
  quantize_impl(fmt, in, out, shape, false);
}

BlockTensor encode(const BlockFormat& fmt, std::span<const float> in, std::span<const std::size_t> shape) {
  Ctx c(fmt, shape);
  check_sizes(c.L, in.size(), in.size(), "block encode");
  if (fmt.element.bits > 32) {
    throw ShapeError("block encode: element format '" + fmt.element.name + "' has " +
                     std::to_string(fmt.element.bits) + "-bit codes; at most 32 are supported");
  }
  set_tensor_scale(c, in);
  BlockTensor t;
  t.format_name = fmt.name;
  t.layout = c.L;
  t.codes.assign(in.size(), 0);
  t.scales.assign(c.L.block_count(), 0);
  t.tensor_scale = static_cast<float>(c.g);
  if (in.empty()) return t;
  for_block_rows(c.L, [&](std::size_t a, std::size_t bi) {
    for (std::size_t bj = 0; bj < c.L.grid_cols(); ++bj) {
      const std::size_t b = (a * c.L.grid_rows() + bi) * c.L.grid_cols() + bj;
      generic_block(c, in.data(), nullptr, t.codes.data(), &t.scales[b], a, bi, bj);
    }
  });
  return t;
}

double scale_value(const BlockFormat& fmt, std::uint32_t code) {
  if (fmt.scale_is_pow2) {
    if (code == kPow2NanCode) return std::numeric_limits<double>::quiet_NaN();
    return std::ldexp(1.0, static_cast<std::int32_t>(code));
  }
  return format::decode(fmt.scale, code);
}

void decode(const BlockFormat& fmt, const BlockTensor& t, std::span<float> out) {
  const BlockLayout& L = t.layout;
  if (out.size() != L.element_count() || t.codes.size() != L.element_count() ||
      t.scales.size() != L.block_count()) {
    throw ShapeError("block decode: the block tensor has " + std::to_string(t.codes.size()) + " codes and " +
                     std::to_string(t.scales.size()) + " scales for a layout of " +
                     std::to_string(L.element_count()) + " elements in " + std::to_string(L.block_count()) +
                     " blocks; the output has " + std::to_string(out.size()));
  }
  const double g = static_cast<double>(t.tensor_scale);
  for_block_rows(L, [&](std::size_t a, std::size_t bi) {
    for (std::size_t bj = 0; bj < L.grid_cols(); ++bj) {
      const std::size_t b = (a * L.grid_rows() + bi) * L.grid_cols() + bj;
      const double sv = scale_value(fmt, t.scales[b]);
      const double s = sv * g;
      const bool zero = sv == 0.0;  // NOLINT
      for_segments(L, a, bi, bj, [&](std::size_t lo, std::size_t n) {
        for (std::size_t i = lo; i < lo + n; ++i) {
          const double q = format::decode(fmt.element, t.codes[i]);
          out[i] = std::isnan(s) ? std::numeric_limits<float>::quiet_NaN() : narrow(zero ? q * 0.0 : q * s);
        }
      });
    }
  });
}

}  // namespace lpemu::block