#include "lpemu/cost/cost_format.hpp"

#include <algorithm>
#include <array>

#include "lpemu/block/block_format.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"

namespace lpemu::cost {
namespace {

struct ClassSpec {
  const char* name;
  bool is_float;
  int max_e, max_m;  // float classes: each (e, m) alternative below
  int max_e2, max_m2;
  int int_bits;  // integer classes: max width; float classes: widest exact integer input
};

// Narrowest first. A float element (e, m) fits a float class if e <= max_e and m <= max_m (or the
// second alternative); an integer of b bits fits a float class if b <= int_bits (exact in the
// class's significand and range) and an integer class if b <= int_bits.
constexpr std::array<ClassSpec, 9> kClasses{{
    {"fp4", true, 2, 1, 2, 1, 0},
    {"int4", false, 0, 0, 0, 0, 4},
    {"fp6", true, 2, 3, 3, 2, 0},
    {"fp8", true, 4, 3, 5, 2, 4},
    {"int8", false, 0, 0, 0, 0, 8},
    {"fp16", true, 5, 10, 5, 10, 12},
    {"bf16", true, 8, 7, 8, 7, 9},
    {"tf32", true, 8, 10, 8, 10, 12},
    {"fp32", true, 8, 23, 8, 23, 25},
}};

}  // namespace

double CostFormat::bits_per_element() const {
  return element.bits + (block_size > 0 ? static_cast<double>(scale.bits) / block_size : 0.0);
}

ElementWidth element_width(const format::Format& f) {
  ElementWidth w;
  w.bits = f.bits;
  if (f.kind == format::Kind::floating) {
    w.is_float = true;
    w.exponent_bits = f.exponent_bits;
    w.significand_bits = f.mantissa_bits + 1;
  } else {
    w.is_float = false;
    w.significand_bits = f.bits;
  }
  return w;
}

CostFormat resolve_format(std::string_view name, const format::Registry& formats,
                          const block::BlockRegistry* blocks) {
  const block::BlockRegistry& reg = blocks != nullptr ? *blocks : block::BlockRegistry::builtin();
  CostFormat c;
  c.name = std::string(name);
  // Block formats of lpemu::block (OCP MX v1.0: 32 elements per E8M0 scale; NVFP4: 16 per E4M3
  // scale plus one FP32 tensor scale; per-tensor, per-channel, tiles, user files).
  if (const block::BlockFormat* b = reg.find(name)) {
    c.name = b->name;
    c.element_name = b->element.name;
    c.element = element_width(b->element);
    c.block_size = b->granularity == block::Granularity::block  ? b->block_size
                   : b->granularity == block::Granularity::tile ? b->tile_rows * b->tile_cols
                                                                : 0;  // one scale per tensor/row/column
    if (c.block_size > 0 && !b->scale_is_pow2) {
      c.scale_name = b->scale.name;
      c.scale = element_width(b->scale);
    }
    if (c.block_size > 0 && b->scale_is_pow2) {
      c.scale_name = "pow2";
      c.scale = ElementWidth{true, 8, 8, 1};  // stored as an E8M0-like exponent byte
    }
    c.tensor_scale_bytes = b->tensor_scale == block::TensorScale::fp32 || c.block_size == 0 ? 4.0 : 0.0;
    return c;
  }
  if (const format::Format* f = formats.find(name)) {
    c.name = f->name;
    c.element_name = f->name;
    c.element = element_width(*f);
    return c;
  }
  std::vector<std::string> known = formats.names();
  for (const auto& b : reg.names()) known.push_back(b);
  throw UnknownNameError("unknown format '" + std::string(name) + "' (element or block format)" +
                         lpemu::detail::closest_names_hint(name, known));
}

const std::vector<std::string>& rate_classes() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> v;
    for (const auto& c : kClasses) v.emplace_back(c.name);
    return v;
  }();
  return kNames;
}

int class_significand_bits(std::string_view rate_class, int exponent_bits) {
  const auto it = std::find_if(kClasses.begin(), kClasses.end(),
                               [&](const ClassSpec& c) { return rate_class == c.name; });
  if (it == kClasses.end() || !it->is_float) return 0;
  int m = -1;
  if (exponent_bits <= it->max_e) m = it->max_m;
  if (exponent_bits <= it->max_e2) m = std::max(m, it->max_m2);
  return m + 1;
}

bool fits_class(const ElementWidth& w, std::string_view rate_class) {
  const auto it = std::find_if(kClasses.begin(), kClasses.end(),
                               [&](const ClassSpec& c) { return rate_class == c.name; });
  if (it == kClasses.end()) return false;
  const int m = w.significand_bits - 1;
  if (it->is_float) {
    if (!w.is_float) return w.bits <= it->int_bits;
    return (w.exponent_bits <= it->max_e && m <= it->max_m) ||
           (w.exponent_bits <= it->max_e2 && m <= it->max_m2);
  }
  return !w.is_float && w.bits <= it->int_bits;
}

}  // namespace lpemu::cost
