// Quantisers (element and block formats), their factory, and operand encodings.
#include "lpemu/engine/quantizer.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <string_view>
#include <type_traits>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/quantize.hpp"

namespace lpemu::engine {
namespace {

// Elements encoded (and decoded) per task, small enough to stay in cache between the two.
constexpr std::size_t kEncodePiece = std::size_t{1} << 14;

// The encoding of matrix x in `element` without its codes.
EncodedOperand encoding_without_codes(const RowMatrix& x, const format::Format& element) {
  EncodedOperand e;
  e.format = element.name;
  e.element = element;
  e.tensor.format_name = element.name;
  e.tensor.layout.shape = {static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols())};
  e.tensor.layout.rows = static_cast<std::size_t>(x.rows());
  e.tensor.layout.cols = static_cast<std::size_t>(x.cols());
  e.tensor.layout.block_cols = std::max<std::size_t>(e.tensor.layout.cols, 1);
  return e;
}

// The encoding of matrix x in `element` with its codes still to be written.
EncodedOperand empty_encoding(const RowMatrix& x, const format::Format& element, std::string_view what) {
  if (element.bits > 32)
    throw Error(std::string(what) + ": '" + element.name + "' codes are wider than 32 bits");
  EncodedOperand e = encoding_without_codes(x, element);
  e.tensor.codes.resize(static_cast<std::size_t>(x.size()));
  return e;
}

// Each quantisation point gets its own stochastic stream: seeds mixed with the SplitMix64 finaliser.
using format::mix64;

class ElementQuantizer final : public Quantizer {
 public:
  ElementQuantizer(const format::Format& f, const QuantSpec& spec) : fmt_(f), spec_(spec) {}
  const std::string& name() const override { return fmt_.name; }
  const format::Format& element_format() const override { return fmt_; }
  void apply(RowMatrix& x, const QuantPoint& p) const override { run(x, p); }
  void apply(RowMatrixD& x, const QuantPoint& p) const override { run(x, p); }
  void apply(const RowMatrix& in, RowMatrix& out, const QuantPoint& p) const override {
    out.resize(in.rows(), in.cols());
    const auto n = static_cast<std::size_t>(in.size());
    format::quantize(fmt_, std::span<const float>(in.data(), n), std::span<float>(out.data(), n), options(p));
  }
  // Rows r0..r0+count-1 in one call of the bulk encoder (element index r·K + c, as encode()).
  RowCodes8 row_codes8(const RowMatrix& x, const QuantPoint& p, EncodedOperand& out) const override {
    if (fmt_.bits > 8) return {};
    out = encoding_without_codes(x, fmt_);
    const format::ConvertOptions o = options(p);
    return [this, &x, o](std::size_t r0, std::size_t count, std::uint8_t* codes) {
      const auto k = static_cast<std::size_t>(x.cols());
      format::ConvertOptions po = o;
      po.index_offset += r0 * k;
      format::encode(fmt_, std::span<const float>(x.data() + r0 * k, count * k),
                     std::span<std::uint8_t>(codes, count * k), po);
    };
  }
  // The codes of x's rounding, then x set to their values: one rounding pass and one decode
  // instead of quantize, encode and a check (quantize(x) = decode(encode(x)), the same rounding
  // with the same options and stochastic indices).
  EncodedOperand encode(RowMatrix& x, const QuantPoint& p) const override {
    EncodedOperand e = empty_encoding(x, fmt_, fmt_.name);
    const format::ConvertOptions o = options(p);
    const std::size_t n = static_cast<std::size_t>(x.size());
    const std::span<float> v(x.data(), n);
    tbb::parallel_for(std::size_t{0}, (n + kEncodePiece - 1) / kEncodePiece, [&](std::size_t piece) {
      const std::size_t lo = piece * kEncodePiece, len = std::min(kEncodePiece, n - lo);
      format::ConvertOptions po = o;
      po.index_offset += lo;
      const std::span<std::uint32_t> codes(e.tensor.codes.data() + lo, len);
      format::encode(fmt_, std::span<const float>(v.subspan(lo, len)), codes, po);
      format::decode(fmt_, std::span<const std::uint32_t>(codes), v.subspan(lo, len));
    });
    return e;
  }

 private:
  format::ConvertOptions options(const QuantPoint& p) const {
    format::ConvertOptions o = spec_.options;
    o.seed = mix64(o.seed ^ mix64(p.stream));
    o.index_offset = p.index_offset;
    return o;
  }
  template <class T>
  void run(Mat<T>& x, const QuantPoint& p) const {
    const std::span<T> s(x.data(), static_cast<std::size_t>(x.size()));
    format::quantize(fmt_, std::span<const T>(s), s, options(p));
  }
  format::Format fmt_;
  QuantSpec spec_;
};

// A block format applied along the point's contraction axis (blocks of the last axis of a
// [rows, cols] tensor for axis 1; axis 0 is transposed first).
class BlockQuantizer final : public Quantizer {
 public:
  BlockQuantizer(block::BlockFormat f, const QuantSpec& spec) : fmt_(std::move(f)), spec_(spec) {}
  const std::string& name() const override { return fmt_.name; }
  const format::Format& element_format() const override { return fmt_.element; }
  const block::BlockFormat* block_format() const override { return &fmt_; }
  EncodedOperand encode(RowMatrix& x, const QuantPoint& p) const override {
    if (p.axis != 1)
      throw Error("block format '" + fmt_.name + "': GEMM operands are encoded along their last axis");
    const block::BlockFormat f = at(p);
    const std::size_t shape[2] = {static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols())};
    const std::span<float> s(x.data(), static_cast<std::size_t>(x.size()));
    EncodedOperand e;
    e.format = fmt_.name;
    e.element = fmt_.element;
    e.block = std::make_shared<const block::BlockFormat>(f);
    e.tensor = block::encode(f, std::span<const float>(s), shape);
    block::decode(f, e.tensor, s);
    return e;
  }
  void apply(const RowMatrix& in, RowMatrix& out, const QuantPoint& p) const override {
    if (p.axis != 1) {
      Quantizer::apply(in, out, p);
      return;
    }
    out.resize(in.rows(), in.cols());
    const std::size_t shape[2] = {static_cast<std::size_t>(in.rows()), static_cast<std::size_t>(in.cols())};
    const auto n = static_cast<std::size_t>(in.size());
    block::quantize(at(p), std::span<const float>(in.data(), n), std::span<float>(out.data(), n), shape);
  }
  void apply(RowMatrix& x, const QuantPoint& p) const override {
    const block::BlockFormat f = at(p);
    if (p.axis == 0) {
      RowMatrix t = x.transpose();
      run(f, t);
      x = t.transpose();
    } else {
      run(f, x);
    }
  }

 private:
  // The format with this point's rounding stream.
  block::BlockFormat at(const QuantPoint& p) const {
    block::BlockFormat f = fmt_;
    f.element_options.rounding = spec_.options.rounding;
    f.element_options.sr_bits = spec_.options.sr_bits;
    f.element_options.seed = mix64(spec_.options.seed ^ mix64(p.stream));
    f.element_options.index_offset = p.index_offset;
    return f;
  }
  static void run(const block::BlockFormat& f, RowMatrix& x) {
    const std::size_t shape[2] = {static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols())};
    const std::span<float> s(x.data(), static_cast<std::size_t>(x.size()));
    block::quantize(f, std::span<const float>(s), s, shape);
  }
  block::BlockFormat fmt_;
  QuantSpec spec_;
};

}  // namespace

std::unique_ptr<Quantizer> make_block_quantizer(const block::BlockFormat& f, const QuantSpec& spec) {
  return std::make_unique<BlockQuantizer>(f, spec);
}

EncodedOperand encode_values(const RowMatrix& x, const format::Format& element, std::string_view what) {
  EncodedOperand e = empty_encoding(x, element, what);
  const std::size_t n = static_cast<std::size_t>(x.size());
  const std::span<const float> v(x.data(), n);
  // Encoded and decoded back in pieces (in parallel), each checked while it is in cache: every
  // value must come back bit for bit (NaN as any NaN). The first bad element in order is reported.
  constexpr std::size_t kPiece = kEncodePiece;
  const std::size_t pieces = (n + kPiece - 1) / kPiece;
  std::vector<std::size_t> bad(pieces, n);
  tbb::parallel_for(std::size_t{0}, pieces, [&](std::size_t p) {
    const std::size_t lo = p * kPiece, len = std::min(kPiece, n - lo);
    const std::span<std::uint32_t> codes(e.tensor.codes.data() + lo, len);
    format::encode(element, v.subspan(lo, len), codes);
    std::array<float, kPiece> back;  // NOLINT(cppcoreguidelines-pro-type-member-init): written next
    format::decode(element, std::span<const std::uint32_t>(codes), std::span<float>(back.data(), len));
    for (std::size_t i = 0; i < len; ++i) {
      if (back[i] != v[lo + i] && !(std::isnan(back[i]) && std::isnan(v[lo + i]))) {
        bad[p] = lo + i;
        return;
      }
    }
  });
  if (const std::size_t i = bad.empty() ? n : *std::min_element(bad.begin(), bad.end()); i < n) {
    throw Error(std::string(what) + ": value " + std::to_string(v[i]) + " (element " + std::to_string(i) +
                ") is not a value of '" + element.name + "'; quantise the operand to it first");
  }
  return e;
}

void Quantizer::apply(const RowMatrix& in, RowMatrix& out, const QuantPoint& p) const {
  out = in;
  apply(out, p);
}

RowCodes8 Quantizer::row_codes8(const RowMatrix& x, const QuantPoint& p, EncodedOperand& out) const {
  (void)x, (void)p, (void)out;
  return {};
}

void Quantizer::apply(RowMatrixD& x, const QuantPoint& p) const {
  RowMatrix f = x.cast<float>();
  apply(f, p);
  x = f.cast<double>();
}

QuantizerFactory QuantizerFactory::with_element_formats(const format::Registry& formats) {
  QuantizerFactory q;
  q.add_provider(
      "element format", formats.names(),
      [&formats](const QuantSpec& spec) {
        return std::unique_ptr<Quantizer>(std::make_unique<ElementQuantizer>(formats.get(spec.format), spec));
      },
      [&formats](std::string_view name) { return formats.find(name) != nullptr; });
  return q;
}

QuantizerFactory QuantizerFactory::standard(const format::Registry& formats,
                                            const block::BlockRegistry* block_formats) {
  QuantizerFactory q = with_element_formats(formats);
  if (block_formats != nullptr) block::check_no_element_names(*block_formats, formats);
  auto blocks = std::make_shared<block::BlockRegistry>(
      block_formats != nullptr ? *block_formats : block::BlockRegistry::with_user_paths(formats, {}));
  q.add_provider(
      "block format", blocks->names(),
      [blocks](const QuantSpec& spec) {
        return std::unique_ptr<Quantizer>(std::make_unique<BlockQuantizer>(blocks->get(spec.format), spec));
      },
      [blocks](std::string_view name) { return blocks->find(name) != nullptr; });
  return q;
}

void QuantizerFactory::add_provider(std::string kind, std::vector<std::string> names, Maker maker,
                                    std::function<bool(std::string_view)> accepts) {
  if (!accepts) {
    accepts = [names](std::string_view n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  }
  providers_.insert(providers_.begin(),
                    Provider{std::move(kind), std::move(names), std::move(maker), std::move(accepts)});
}

bool QuantizerFactory::knows(std::string_view name) const {
  return std::any_of(providers_.begin(), providers_.end(),
                     [&](const Provider& p) { return p.accepts(name); });
}

std::vector<std::string> QuantizerFactory::names() const {
  std::vector<std::string> out;
  for (const auto& p : providers_) out.insert(out.end(), p.names.begin(), p.names.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string_view to_string(Scaling s) {
  switch (s) {
    case Scaling::current: return "current";
    case Scaling::delayed: return "delayed";
    default: return "none";
  }
}

std::string_view to_string(AmaxAlgo a) { return a == AmaxAlgo::most_recent ? "most_recent" : "max"; }

block::BlockFormat per_tensor_format(const format::Format& element) {
  block::BlockFormat f;
  f.name = element.name + "_per_tensor";
  f.source = "per-tensor current scaling (scale = amax / max_elem in FP32)";
  f.element = element;
  f.scale = format::Registry::builtin().get("fp32");
  f.scale_name = "fp32";
  f.granularity = block::Granularity::per_tensor;
  f.rule = block::ScaleRule::amax_over_max;
  f.validate();
  return f;
}

std::unique_ptr<Quantizer> QuantizerFactory::make(const QuantSpec& spec) const {
  for (const auto& p : providers_) {
    if (!p.accepts(spec.format)) continue;
    if (spec.scaling == Scaling::none) return p.maker(spec);
    const std::string where = spec.origin.empty() ? std::string() : spec.origin + ": ";
    if (spec.scaling == Scaling::delayed) {
      throw SpecError(where + "format '" + spec.format +
                      "': scaling = \"delayed\" keeps an amax history across training steps, which only "
                      "training has; use scaling = \"current\"");
    }
    QuantSpec plain = spec;
    plain.scaling = Scaling::none;
    const std::unique_ptr<Quantizer> q = p.maker(plain);
    if (q->block_format() != nullptr) {
      throw SpecError(where + "format '" + spec.format +
                      "': scaling applies to element formats; a block format has its own scales");
    }
    return make_block_quantizer(per_tensor_format(q->element_format()), plain);
  }
  std::string msg =
      (spec.origin.empty() ? std::string() : spec.origin + ": ") + "unknown format '" + spec.format + "'";
  throw UnknownNameError(msg + lpemu::detail::closest_names_hint(spec.format, names()));
}

}  // namespace lpemu::engine
