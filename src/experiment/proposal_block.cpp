// Block-format part of a proposal: the block section of spec.md and blocks.csv, packed
// blocks with their decoded values, edge blocks included. Expected outputs come from lpemu::block
// (encode/decode), which tests/support/reference/block_reference checks independently.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "experiment/proposal_detail.hpp"
#include "lpemu/block/pack.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::experiment {
namespace {

using detail::float_bits_list;
using detail::hex_list;
using detail::real;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// The format as the vectors use it: blocked formats cut along the last axis.
block::BlockFormat vector_format(const block::BlockFormat& f) {
  block::BlockFormat g = f;
  if (g.granularity == block::Granularity::block) g.axis = -1;
  return g;
}

/// The amax of the `scale_overflow` row: twice the largest value the block scale can carry (+Inf
/// when it cannot overflow: power-of-two scales, or a tensor scale that absorbs any amax).
double scale_overflow_amax(const block::BlockFormat& f) {
  if (f.scale_is_pow2 || f.tensor_scale != block::TensorScale::none) return HUGE_VAL;
  return 2 * f.element.max_finite * f.scale.max_finite;
}

/// Shape of one unit (one block, one tile, or a [4, 8] tensor for per-tensor/row/column scales).
std::vector<std::size_t> unit_shape(const block::BlockFormat& f) {
  switch (f.granularity) {
    case block::Granularity::block: return {static_cast<std::size_t>(f.block_size)};
    case block::Granularity::tile:
      return {static_cast<std::size_t>(f.tile_rows), static_cast<std::size_t>(f.tile_cols)};
    default: return {4, 8};
  }
}

/// A shape of `units` units laid out along the last axis.
std::vector<std::size_t> times_units(std::vector<std::size_t> shape, std::size_t units) {
  shape.back() *= units;
  return shape;
}

/// Non-negative finite element values in increasing order (every one for narrow elements).
std::vector<double> element_values(const format::Format& e) {
  std::vector<double> v;
  const std::uint64_t n = e.code_mask() + 1;
  const std::uint64_t step = e.bits <= 10 ? 1 : n / 1024;
  for (std::uint64_t c = 0; c < n; c += step) {
    const double x = format::decode(e, c);
    if (std::isfinite(x) && x >= 0 && !std::signbit(x)) v.push_back(x);
  }
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

/// Builds the cases; each is a name, a shape and its row-major inputs.
struct Case {
  std::string name;
  std::vector<std::size_t> shape;
  std::vector<float> x;
};

std::vector<Case> make_cases(const block::BlockFormat& f, std::uint64_t seed) {
  const auto ushape = unit_shape(f);
  std::size_t n = 1;
  for (const auto d : ushape) n *= d;
  const double emax_val = f.element.max_finite;
  const auto vals = element_values(f.element);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<Case> cases;
  const auto add = [&](std::string name, std::vector<float> x, std::size_t units = 1) {
    cases.push_back({std::move(name), times_units(ushape, units), std::move(x)});
  };
  const auto fill = [&](double amax_at0, const auto& gen) {
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(gen(i));
    x[0] = static_cast<float>(amax_at0);
    return x;
  };

  add("all_zero", std::vector<float>(n, 0.0F));
  add("signed_zeros", fill(0.0, [](std::size_t i) { return i % 2 ? -0.0 : 0.0; }));
  // Every element value (both signs) times 2^3, with the block's amax at max·2^3: decodes exactly.
  for (std::size_t start = 0; start<vals.size(); start += n / 2> 0 ? n / 2 : 1) {
    add("element_values", fill(emax_val * 8, [&](std::size_t i) {
          const double v = vals[(start + i / 2) % vals.size()] * 8;
          return i % 2 ? -v : v;
        }));
    if (cases.size() > 40) break;
  }
  // Midpoints between neighbouring element values (ties), the scale pinned by amax = max.
  add("ties", fill(emax_val, [&](std::size_t i) {
        const std::size_t k = (i / 2) % (vals.size() - 1);
        const double m = (vals[k] + vals[k + 1]) / 2;
        return i % 2 ? -m : m;
      }));
  add("ties_next_up", fill(emax_val, [&](std::size_t i) {
        const std::size_t k = (i / 2) % (vals.size() - 1);
        const float m = static_cast<float>((vals[k] + vals[k + 1]) / 2);
        return static_cast<double>(std::nextafter(m, i % 2 ? -kInf : kInf)) * (i % 2 ? -1 : 1);
      }));
  for (const int k : {0, 7, -9}) {
    const double p = std::ldexp(1.0, k);
    add("amax_pow2_" + std::to_string(k), fill(p, [&](std::size_t) { return p * normal(rng) / 4; }));
    add("amax_below_pow2_" + std::to_string(k),
        fill(std::nextafter(static_cast<float>(p), 0.0F), [&](std::size_t) { return p * normal(rng) / 4; }));
  }
  // amax just above max·2^s: under the OCP rule the largest elements clamp to ±max.
  add("amax_above_max",
      fill(emax_val * 1.0625 * 16, [&](std::size_t i) { return emax_val * 16 * (i % 3 ? 1.03 : -1.07); }));
  add("nan_inside", fill(1.0, [&](std::size_t i) { return i == n / 2 ? std::nan("") : normal(rng); }));
  add("inf_inside",
      fill(1.0, [&](std::size_t i) { return i == n / 2 ? static_cast<double>(kInf) : normal(rng); }));
  add("neg_inf_inside",
      fill(1.0, [&](std::size_t i) { return i == n / 3 ? -static_cast<double>(kInf) : normal(rng); }));
  const double reach = scale_overflow_amax(f);
  if (reach < static_cast<double>(std::numeric_limits<float>::max())) {
    add("scale_overflow", fill(reach, [&](std::size_t) { return reach * normal(rng) / 4; }));
  }
  add("max_float32",
      fill(std::numeric_limits<float>::max(), [&](std::size_t) { return 1e38 * normal(rng); }));
  add("scale_underflow",
      fill(std::ldexp(1.0, -140), [&](std::size_t) { return std::ldexp(normal(rng), -141); }));
  add("float32_subnormals", fill(std::ldexp(1.0, -130), [&](std::size_t i) {
        return static_cast<double>(std::numeric_limits<float>::denorm_min()) *
               static_cast<double>(i * 37 % 1000) * (i % 2 ? -1 : 1);
      }));
  add("outlier", fill(1e4, [&](std::size_t) { return 1e-3 * normal(rng); }));
  for (const double sigma : {1.0, 1e-20, 1e20, 3e-3}) {
    add("normal_sigma_" + real(sigma),
        fill(sigma * normal(rng), [&](std::size_t) { return sigma * normal(rng); }));
  }
  // Multi-unit tensors: blocks of very different magnitude share one tensor (two-level scaling).
  {
    std::vector<float> x;
    for (const double m : {1.0, 1e-2, 1e-4, 1e3}) {
      for (std::size_t i = 0; i < n; ++i) x.push_back(static_cast<float>(m * normal(rng)));
    }
    if (f.granularity == block::Granularity::block || f.granularity == block::Granularity::tile) {
      add("tensor_four_blocks", std::move(x), 4);
    }
  }
  if (f.granularity == block::Granularity::block && f.block_size > 1) {
    // A partial last block (the tensor is not a multiple of the block).
    std::vector<float> x(static_cast<std::size_t>(f.block_size) + static_cast<std::size_t>(f.block_size) / 2);
    for (auto& v : x) v = static_cast<float>(normal(rng));
    cases.push_back({"partial_last_block", {x.size()}, std::move(x)});
  }
  std::uniform_real_distribution<double> e(-30, 30);
  for (int r = 0; r < 16; ++r) {
    const double scale = std::exp2(e(rng));
    add("random", fill(scale * normal(rng), [&](std::size_t) { return scale * normal(rng); }));
  }
  return cases;
}

const char* rule_words(block::ScaleRule r) {
  switch (r) {
    case block::ScaleRule::ocp:
      return "2^(floor(log2 amax) − emax_elem) (the OCP MX v1.0 shared-scale computation)";
    case block::ScaleRule::ceil: return "the smallest 2^s with amax ≤ max_elem·2^s (nothing saturates)";
    case block::ScaleRule::even:
      return "the ocp rule applied to amax rounded half-up to the element's precision";
    case block::ScaleRule::amax_over_max:
      return "amax / max_elem (/ tensor scale) rounded to the scale format";
    case block::ScaleRule::search:
      return "the least-squared-error candidate among the base scale and its neighbours";
  }
  return "";
}

}  // namespace

std::vector<BlockVector> block_vectors(const block::BlockFormat& fmt, std::uint64_t seed) {
  const block::BlockFormat f = vector_format(fmt);
  if (f.element.bits > 32)
    throw SpecError("block format '" + f.name + "': elements wider than 32 bits cannot be packed");
  std::vector<BlockVector> rows;
  for (auto& c : make_cases(f, seed)) {
    BlockVector v;
    v.row = rows.size();
    v.name = std::move(c.name);
    v.shape = std::move(c.shape);
    v.inputs = std::move(c.x);
    const block::BlockTensor t = block::encode(f, v.inputs, v.shape);
    v.tensor_scale = t.tensor_scale;
    v.scales = t.scales;
    v.packed = block::pack_codes(t.codes, f.element.bits);
    v.decoded.resize(v.inputs.size());
    block::decode(f, t, v.decoded);
    rows.push_back(std::move(v));
  }
  return rows;
}

namespace detail {

std::string block_spec_markdown(const block::BlockFormat& f) {
  std::ostringstream s;
  s << "## Block format: " << f.name << "\n\n";
  if (!f.source.empty()) s << "Source: " << f.source << "\n\n";
  if (!f.description.empty()) s << f.description << "\n\n";
  s << "value = element × block scale"
    << (f.tensor_scale == block::TensorScale::fp32 ? " × tensor scale" : "")
    << "\n\n| field | value |\n|---|---|\n";
  s << "| element | " << f.element.name << " (" << f.element.bits << " bits, max "
    << real(f.element.max_finite) << ", emax_elem " << f.element_emax() << "; section below) |\n";
  s << "| block scale | "
    << (f.scale_is_pow2 ? std::string("an unbounded power of two, stored as its int32 exponent")
                        : f.scale.name + " (" + std::to_string(f.scale.bits) + " bits)")
    << " |\n";
  s << "| granularity | " << block::to_string(f.granularity);
  if (f.granularity == block::Granularity::block)
    s << ": " << f.block_size << " consecutive elements along axis " << f.axis;
  if (f.granularity == block::Granularity::tile) s << ": " << f.tile_rows << "×" << f.tile_cols << " tiles";
  s << " |\n";
  s << "| scale rule | " << block::to_string(f.rule) << ": " << rule_words(f.rule) << " |\n";
  s << "| element rounding | " << format::to_string(f.element_options.rounding) << ", saturating to ±max |\n";
  s << "| NaN/Inf in a block | " << block::to_string(f.nonfinite) << " |\n";
  const double reach = scale_overflow_amax(f);
  s << "| scale overflow | " << block::to_string(f.scale_overflow)
    << (reach < static_cast<double>(std::numeric_limits<float>::max())
            ? " (row `scale_overflow` reaches it)"
            : " (unreachable from float32 inputs: the scale's range, with the tensor scale if any, covers "
              "FLT_MAX; "
              "row `max_float32` is the largest input)")
    << " |\n";
  s << "| float32 subnormal inputs | " << block::to_string(f.subnormal_inputs) << " |\n";
  s << "| signed zero | " << block::to_string(f.signed_zero) << " |\n";
  s << "| tensor scale | " << block::to_string(f.tensor_scale)
    << (f.tensor_scale == block::TensorScale::fp32 ? ": g = fp32(amax_tensor / (max_elem · max_scale))" : "")
    << " |\n";
  s << "\n### Packed layout\n\n"
       "Element codes in row-major tensor order form a little-endian bit stream: code i of width b occupies "
       "stream "
       "bits [i·b, (i+1)·b), stream bit k being bit k mod 8 of byte ⌊k/8⌋. FP4 thus puts element 0 in the "
       "low "
       "nibble of byte 0 (as NVIDIA's `__nv_fp4x2_e2m1` and `cvt.rn.f16x2.e2m1x2` read a byte), FP6 packs 4 "
       "elements in 3 bytes, 8-bit codes are one byte each, wider codes little-endian. Scales are stored "
       "apart, one "
       "code per block in block order (row-major over [outer, block row, block col]); the FP32 tensor scale "
       "on "
       "its own. In `blocks.csv` each row is one small tensor; blocked formats are cut along its last "
       "axis.\n";
  return s.str();
}

std::filesystem::path write_block_vectors(const std::filesystem::path& dir, const block::BlockFormat& f,
                                          std::uint64_t seed) {
  const auto rows = block_vectors(f, seed);
  std::filesystem::path p = dir / "blocks.csv";
  std::ostringstream out;
  out << "row,case,shape,inputs,tensor_scale,expected_scales,expected_packed,expected_decoded\n";
  const int scale_digits = f.scale_is_pow2 ? 8 : (f.scale.bits + 3) / 4;
  for (const auto& v : rows) {
    std::string shape;
    for (const auto d : v.shape) shape += (shape.empty() ? "" : "x") + std::to_string(d);
    out << v.row << ',' << v.name << ',' << shape << ',' << float_bits_list(v.inputs) << ','
        << float_bits_list(std::span<const float>(&v.tensor_scale, 1)) << ','
        << hex_list(std::span<const std::uint32_t>(v.scales), scale_digits) << ','
        << hex_list(std::span<const std::uint8_t>(v.packed), 2) << ',' << float_bits_list(v.decoded) << '\n';
  }
  write_text(p, out.str());
  return p;
}

}  // namespace detail
}  // namespace lpemu::experiment
