#include "lpemu/engine/quantizer.hpp"

#include <algorithm>
#include <functional>
#include <string_view>
#include <type_traits>
#include <mutex>
#include <deque>
#include <cmath>
#include <span>

#include <tbb/parallel_for.h>

#include "lpemu/engine/ops.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/datapath/gemm.hpp"

namespace lpemu::engine {
namespace {

constexpr std::string_view kRoleNames[] = {"weights",  "linear_input", "q",           "k",          "v",
                                           "kv_cache", "scores",       "probs",       "attn_output",
                                           "mlp_hidden", "residual",   "lm_head",     "lm_head_input",
                                           "logits"};

// SplitMix64 finaliser, used to give each quantisation point its own stochastic stream.
std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class ElementQuantizer final : public Quantizer {
 public:
  ElementQuantizer(const format::Format& f, const QuantSpec& spec) : fmt_(f), spec_(spec) {}
  const std::string& name() const override { return fmt_.name; }
  void apply(RowMatrix& x, const QuantPoint& p) const override { run(x, p); }
  void apply(RowMatrixD& x, const QuantPoint& p) const override { run(x, p); }

 private:
  template <class T>
  void run(Mat<T>& x, const QuantPoint& p) const {
    format::ConvertOptions o = spec_.options;
    o.seed = mix64(o.seed ^ mix64(p.stream));
    o.index_offset = p.index_offset;
    const std::span<T> s(x.data(), static_cast<std::size_t>(x.size()));
    format::quantize(fmt_, std::span<const T>(s), s, o);
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
  void apply(RowMatrix& x, const QuantPoint& p) const override {
    block::BlockFormat f = fmt_;
    f.element_options.rounding = spec_.options.rounding;
    f.element_options.sr_bits = spec_.options.sr_bits;
    f.element_options.seed = mix64(spec_.options.seed ^ mix64(p.stream));
    f.element_options.index_offset = p.index_offset;
    if (p.axis == 0) {
      RowMatrix t = x.transpose();
      run(f, t);
      x = t.transpose();
    } else {
      run(f, x);
    }
  }

 private:
  static void run(const block::BlockFormat& f, RowMatrix& x) {
    const std::size_t shape[2] = {static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols())};
    const std::span<float> s(x.data(), static_cast<std::size_t>(x.size()));
    block::quantize(f, std::span<const float>(s), s, shape);
  }
  block::BlockFormat fmt_;
  QuantSpec spec_;
};

// The power-of-two exponent s that puts amax in binade `target` (0 for a zero or non-finite
// amax), clamped to E8M0's range.
std::int32_t pow2_shift(double amax, int target) {
  if (!(amax > 0) || !std::isfinite(amax)) return 0;
  return std::clamp(std::ilogb(amax) - target, -127, 127);
}

// Where a row's amax goes: the input format's top binade, but low enough that products of two
// such values, and sums of many, stay well inside the output format (bf16 inputs with an fp32
// accumulator: 2^59; fp8 with fp16 output: 2^3).
int target_binade(const format::Format& in, const format::Format& out) {
  return std::min(std::ilogb(in.max_finite), (std::ilogb(out.max_finite) - 1) / 2 - 4);
}

// A bit-exact datapath. Operands arrive as floats on a plan's grids (element, per-tensor or block
// scaled); like a real low-precision GEMM, the strategy hands the datapath codes and moves scales
// out in powers of two, which is exact. Without block scales in the datapath, a row of A or B
// already on the input format's grid goes in as it is; any other row gets one exponent (its amax
// in the binade target_binade() picks), applied to the output after the datapath runs (the GEMM
// epilogue). With block scales (OCP MX, scale_application product/group) each scale_block along K
// gets its OCP MX shared exponent, passed to the datapath as its E8M0 scales. Values then encode
// exactly when they lie on the input grid up to that scale, else round to nearest even, saturating.
class DatapathGemm final : public Gemm {
 public:
  explicit DatapathGemm(const datapath::Datapath& dp) : dp_(dp) {}
  const std::string& name() const override { return dp_.name; }
  void nt(const RowMatrix& a, const RowMatrix& b, RowMatrix& c, const GemmPoint&) const override {
    if (a.cols() != b.cols()) throw ShapeError("datapath gemm: inner dimensions differ");
    const auto m = static_cast<std::size_t>(a.rows());
    const auto n = static_cast<std::size_t>(b.rows());
    const auto k = static_cast<std::size_t>(a.cols());
    if (k == 0) {  // an empty sum: every output is exactly zero (the kernels below assume K > 0)
      c.setZero(a.rows(), b.rows());
      return;
    }
    const bool blocked = dp_.scale_application != datapath::ScaleApplication::none && dp_.scale_block > 0;
    const std::size_t sb = blocked ? static_cast<std::size_t>(dp_.scale_block) : std::max<std::size_t>(k, 1);
    const std::size_t kb = (k + sb - 1) / sb;
    std::vector<std::int32_t> ea(m * kb);  // [m × kb]; B's are [kb × n], the layouts GemmScales wants
    // Narrow operands (the common FP8/FP6/FP4 case) take float scaling, 8-bit codes and the
    // datapath's 8-bit GEMM; others go through doubles and 64-bit codes. The float path is exact:
    // x·2^-s is exact in float down to 2^-126, and below that lies under half the smallest
    // subnormal of every format it is used for (min_subnormal ≥ 2^-124), so rounding is unchanged.
    const auto narrow_ok = [](const format::Format& f) {
      return f.bits <= 8 && format::fits_in_float(f) && f.min_subnormal >= 0x1p-124;
    };
    const bool narrow = narrow_ok(dp_.a) && narrow_ok(dp_.b) && dp_.output().bits <= 32 &&
                        format::fits_in_float(dp_.output());
    // Block-scaled datapaths use the OCP MX rule (amax in the element's top binade).
    const int target_a = blocked ? std::ilogb(dp_.a.max_finite) : target_binade(dp_.a, dp_.output());
    const int target_b = blocked ? std::ilogb(dp_.b.max_finite) : target_binade(dp_.b, dp_.output());
    std::shared_ptr<const EncodedB> enc;
    const std::vector<double> d =
        narrow ? run<float, std::uint8_t, std::uint32_t>(a, b, target_a, target_b, blocked, sb, kb, ea, enc)
               : run<double, std::uint64_t, std::uint64_t>(a, b, target_a, target_b, blocked, sb, kb, ea, enc);
    const std::vector<std::int32_t>& eb = enc->e;
    c.resize(a.rows(), b.rows());
    if (blocked) {
      for (std::size_t i = 0; i < d.size(); ++i) c.data()[i] = static_cast<float>(d[i]);
      return;
    }
    // The epilogue: 2^(ea_i + eb_j), exact in double, then one rounding to float.
    std::vector<double> pb(n);
    for (std::size_t j = 0; j < n; ++j) pb[j] = std::ldexp(1.0, eb[j]);
    for (std::size_t i = 0; i < m; ++i) {
      const double pa = std::ldexp(1.0, ea[i]);
      for (std::size_t j = 0; j < n; ++j) c.data()[i * n + j] = static_cast<float>(d[i * n + j] * pa * pb[j]);
    }
  }

 private:
  // B's codes ([k, n]) and exponents ([kb, n]) as scale_and_encode makes them.
  struct EncodedB {
    const float* data = nullptr;
    Eigen::Index rows = 0, cols = 0;
    std::size_t hash = 0;
    std::vector<std::int32_t> e;
    std::vector<std::uint8_t> codes8;
    std::vector<std::uint64_t> codes64;
  };
  static constexpr std::size_t kCachedMatrices = 64;
  static constexpr std::size_t kCachedBytes = std::size_t{1} << 30;  ///< at most 1 GiB of codes kept

  static std::size_t bytes_of(const EncodedB& e) {
    return e.codes8.size() + e.codes64.size() * sizeof(std::uint64_t) + e.e.size() * sizeof(std::int32_t);
  }

  // B is a layer's weights, the same matrix call after call: its encoding is kept for the last
  // kCachedMatrices matrices (at most kCachedBytes), keyed by address, shape and a hash of every bit (a matrix changed
  // in place hashes differently and is encoded again).
  std::shared_ptr<const EncodedB> encoded_b(const RowMatrix& b, bool narrow, int target, bool blocked, std::size_t sb,
                                            std::size_t kb) const {
    const std::string_view bytes(reinterpret_cast<const char*>(b.data()), static_cast<std::size_t>(b.size()) * sizeof(float));
    const std::size_t hash = std::hash<std::string_view>{}(bytes);
    {
      const std::lock_guard<std::mutex> lock(cache_mutex_);
      for (const auto& e : cache_) {
        if (e->data == b.data() && e->rows == b.rows() && e->cols == b.cols() && e->hash == hash) return e;
      }
    }
    auto enc = std::make_shared<EncodedB>();
    enc->data = b.data();
    enc->rows = b.rows();
    enc->cols = b.cols();
    enc->hash = hash;
    const auto n = static_cast<std::size_t>(b.rows());
    const auto k = static_cast<std::size_t>(b.cols());
    enc->e.resize(kb * n);
    if (narrow) {
      enc->codes8.resize(k * n);
      scale_and_encode<float>(b, dp_.b, target, blocked, sb, kb, enc->e.data(), false, enc->codes8.data());
    } else {
      enc->codes64.resize(k * n);
      scale_and_encode<double>(b, dp_.b, target, blocked, sb, kb, enc->e.data(), false, enc->codes64.data());
    }
    const std::lock_guard<std::mutex> lock(cache_mutex_);
    cache_.push_front(enc);
    std::size_t total = 0;
    for (const auto& e : cache_) total += bytes_of(*e);
    while (cache_.size() > 1 && (cache_.size() > kCachedMatrices || total > kCachedBytes)) {
      total -= bytes_of(*cache_.back());
      cache_.pop_back();
    }
    return enc;
  }

  // Encodes A, fetches B's encoding, runs the datapath on codes of type In (results Out) and
  // returns the decoded outputs [m × n]; `enc` receives B's encoding (its exponents).
  template <class T, class In, class Out>
  std::vector<double> run(const RowMatrix& a, const RowMatrix& b, int target_a, int target_b, bool blocked,
                          std::size_t sb, std::size_t kb, std::vector<std::int32_t>& ea,
                          std::shared_ptr<const EncodedB>& enc) const {
    constexpr bool kNarrow = std::is_same_v<In, std::uint8_t>;
    const auto m = static_cast<std::size_t>(a.rows());
    const auto n = static_cast<std::size_t>(b.rows());
    const auto k = static_cast<std::size_t>(a.cols());
    std::vector<In> ac(m * k);
    scale_and_encode<T>(a, dp_.a, target_a, blocked, sb, kb, ea.data(), true, ac.data());
    enc = encoded_b(b, kNarrow, target_b, blocked, sb, kb);
    datapath::GemmScales scales;
    if (blocked) scales = {ea, enc->e};
    std::vector<Out> dc(m * n);
    if constexpr (kNarrow) {
      datapath::gemm(dp_, m, n, k, ac, enc->codes8, {}, dc, scales);
    } else {
      datapath::gemm(dp_, m, n, k, ac, enc->codes64, {}, dc, scales);
    }
    std::vector<T> out(m * n);
    format::decode(dp_.output(), std::span<const Out>(dc), std::span<T>(out));
    return std::vector<double>(out.begin(), out.end());
  }

  // X [rows, k] encoded into `out` ([rows, k] for A; transposed to [k, rows] for B). Without block
  // scales, a row whose values all lie on f's grid is taken as it is (its codes are what a core
  // would be fed: subnormals stay subnormal, e = 0); any other row is scaled by 2^-s to put its
  // amax in binade `target`. With block scales (`blocked`), every scale block of `sb` along k gets
  // its OCP MX exponent. The exponents s go to `e`.
  template <class T, class Code>
  static void scale_and_encode(const RowMatrix& x, const format::Format& f, int target, bool blocked, std::size_t sb,
                               std::size_t kb, std::int32_t* e, bool a_side, Code* out) {
    const auto rows = static_cast<std::size_t>(x.rows());
    const auto k = static_cast<std::size_t>(x.cols());
    format::ConvertOptions sat;
    sat.overflow = format::Overflow::saturate;
    std::vector<T> v(x.data(), x.data() + rows * k);
    std::vector<Code> codes(rows * k);
    std::vector<char> as_is(rows, 0);
    if (!blocked) {
      format::encode(f, std::span<const T>(v), std::span<Code>(codes), sat);
      std::vector<T> back(rows * k);
      format::decode(f, std::span<const Code>(codes), std::span<T>(back));
      for (std::size_t r = 0; r < rows; ++r) {
        bool same = true;
        for (std::size_t t = r * k; t < (r + 1) * k; ++t) same = same && (back[t] == v[t] || (v[t] != v[t] && back[t] != back[t]));
        as_is[r] = same ? 1 : 0;
      }
    }
    tbb::parallel_for(std::size_t{0}, rows, [&](std::size_t r) {
      const float* row = x.data() + r * k;
      for (std::size_t blk = 0; blk < kb; ++blk) {
        const std::size_t k0 = blk * sb;
        const std::size_t len = std::min(sb, k - k0);
        float amax = 0;
        for (std::size_t t = 0; t < len; ++t) {
          const float y = std::fabs(row[k0 + t]);
          if (y > amax && std::isfinite(y)) amax = y;
        }
        const std::int32_t s = as_is[r] != 0 ? 0 : pow2_shift(static_cast<double>(amax), target);
        (a_side ? e[r * kb + blk] : e[blk * rows + r]) = s;
        const T scale = static_cast<T>(std::ldexp(1.0, -s));
        for (std::size_t t = 0; t < len; ++t) v[r * k + k0 + t] = static_cast<T>(row[k0 + t]) * scale;
      }
    });
    const bool all_as_is = !blocked && std::all_of(as_is.begin(), as_is.end(), [](char c) { return c != 0; });
    if (!all_as_is) format::encode(f, std::span<const T>(v), std::span<Code>(codes), sat);
    if (a_side) {
      std::copy(codes.begin(), codes.end(), out);
      return;
    }
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t t = 0; t < k; ++t) out[t * rows + r] = codes[r * k + t];
    }
  }


 private:
  datapath::Datapath dp_;
  mutable std::mutex cache_mutex_;
  mutable std::deque<std::shared_ptr<const EncodedB>> cache_;
};

class EigenGemm final : public Gemm {
 public:
  const std::string& name() const override { return name_; }
  void nt(const RowMatrix& a, const RowMatrix& b, RowMatrix& c, const GemmPoint&) const override {
    linear(a, b, Vec<float>(), c);
  }
  void nt(const RowMatrixD& a, const RowMatrixD& b, RowMatrixD& c, const GemmPoint&) const override {
    linear(a, b, Vec<double>(), c);
  }

 private:
  std::string name_ = "eigen";
};

}  // namespace

std::string_view to_string(Role r) { return kRoleNames[static_cast<std::size_t>(r)]; }

bool parse_role(std::string_view text, Role& out) {
  for (const Role r : kAllRoles) {
    if (to_string(r) == text) {
      out = r;
      return true;
    }
  }
  return false;
}

std::string_view to_string(LayerKind k) {
  switch (k) {
    case LayerKind::attention:
      return "attention";
    case LayerKind::mlp:
      return "mlp";
    case LayerKind::head:
    default:
      return "head";
  }
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

QuantizerFactory QuantizerFactory::standard(const format::Registry& formats, const block::BlockRegistry* block_formats) {
  QuantizerFactory q = with_element_formats(formats);
  auto blocks = std::make_shared<block::BlockRegistry>(block_formats != nullptr
                                                           ? *block_formats
                                                           : block::BlockRegistry::with_user_paths(formats, {}));
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
  return std::any_of(providers_.begin(), providers_.end(), [&](const Provider& p) { return p.accepts(name); });
}

std::vector<std::string> QuantizerFactory::names() const {
  std::vector<std::string> out;
  for (const auto& p : providers_) out.insert(out.end(), p.names.begin(), p.names.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::unique_ptr<Quantizer> QuantizerFactory::make(const QuantSpec& spec) const {
  for (const auto& p : providers_) {
    if (p.accepts(spec.format)) return p.maker(spec);
  }
  std::string msg = (spec.origin.empty() ? std::string() : spec.origin + ": ") + "unknown format '" +
                    spec.format + "'";
  const auto close = format::closest_names(spec.format, names());
  if (!close.empty()) {
    msg += "; closest:";
    for (const auto& c : close) msg += " " + c;
  }
  throw UnknownNameError(msg);
}

void Gemm::nt(const RowMatrixD& a, const RowMatrixD& b, RowMatrixD& c, const GemmPoint& p) const {
  const RowMatrix af = a.cast<float>();
  const RowMatrix bf = b.cast<float>();
  RowMatrix cf;
  nt(af, bf, cf, p);
  c = cf.cast<double>();
}

const Gemm& eigen_gemm() {
  static const EigenGemm g;
  return g;
}

GemmFactory GemmFactory::builtin() { return with_datapaths(datapath::DatapathRegistry::builtin()); }

GemmFactory GemmFactory::with_datapaths(const datapath::DatapathRegistry& datapaths) {
  GemmFactory f;
  auto shared = []() { return std::shared_ptr<const Gemm>(&eigen_gemm(), [](const Gemm*) {}); };
  f.add("eigen", shared);
  f.add("fp32", shared);
  f.add("native", shared);
  for (const auto& name : datapaths.names()) f.add_datapath(datapaths.get(name));
  return f;
}

void GemmFactory::add_datapath(const datapath::Datapath& dp) {
  auto strategy = std::make_shared<const DatapathGemm>(dp);
  add(dp.name, [strategy]() { return std::shared_ptr<const Gemm>(strategy); });
}

void GemmFactory::add(std::string name, Maker maker) { makers_.emplace_back(std::move(name), std::move(maker)); }

bool GemmFactory::knows(std::string_view name) const {
  return std::any_of(makers_.begin(), makers_.end(), [&](const auto& m) { return m.first == name; });
}

std::vector<std::string> GemmFactory::names() const {
  std::vector<std::string> out;
  for (const auto& m : makers_) out.push_back(m.first);
  std::sort(out.begin(), out.end());
  return out;
}

std::shared_ptr<const Gemm> GemmFactory::make(std::string_view name) const {
  for (auto it = makers_.rbegin(); it != makers_.rend(); ++it) {
    if (it->first == name) return it->second();
  }
  std::string msg = "unknown gemm datapath '" + std::string(name) + "'";
  const auto close = format::closest_names(name, names());
  if (!close.empty()) {
    msg += "; closest:";
    for (const auto& c : close) msg += " " + c;
  }
  throw UnknownNameError(msg);
}

}  // namespace lpemu::engine
