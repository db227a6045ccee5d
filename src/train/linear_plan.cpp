#include "lpemu/train/linear_plan.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "train/mix.hpp"

namespace lpemu::train {
namespace {

using engine::GemmPass;
using engine::LayerKind;
using engine::Role;

using detail::mix;

// The roles training reads: the linear layers' operands, the training roles and the attention and
// activation roles of attention_plan.hpp (every role but the mixture-of-experts ones).
bool trained_role(Role r) { return engine::fallback_role(r) == r && r != Role::router_logits; }

// Delayed scaling of point `operand` at `step` (see the header comment); false when the current
// scaling quantiser is to be used.
template <class M>
bool delayed(const engine::Quantizer& q, DelayedScaling& d, std::uint64_t step, std::uint64_t operand,
             const engine::QuantPoint& p, M& x, RangeCounts* counts) {
  DelayedScaling::Point& pt = d.points[operand];
  if (pt.length == 0) return false;
  using T = typename M::Scalar;
  double amax = 0;
  bool finite = true;
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const double v = static_cast<double>(x.data()[i]);
    finite = finite && std::isfinite(v);
    amax = std::max(amax, std::abs(v));
  }
  double a = 0;
  {
    const std::lock_guard<std::mutex> lock(d.mutex);
    // The last `length` steps before this one (a recomputation at this step sees the same ones).
    int taken = 0;
    for (auto it = pt.history.rbegin(); it != pt.history.rend() && taken < pt.length; ++it) {
      if (it->first >= step) continue;
      a = std::max(a, it->second);
      ++taken;
      if (pt.algo == engine::AmaxAlgo::most_recent) break;  // the latest earlier step's amax alone
    }
    if (finite) {
      if (!pt.history.empty() && pt.history.back().first == step) {
        pt.history.back().second = std::max(pt.history.back().second, amax);
      } else {
        pt.history.emplace_back(step, amax);
      }
      if (pt.history.size() > static_cast<std::size_t>(pt.length) + 1) pt.history.erase(pt.history.begin());
    }
  }
  const format::Format& e = q.element_format();
  const double scale = static_cast<double>(static_cast<float>(std::ldexp(a, pt.margin) / e.max_finite));
  if (!finite || !std::isfinite(scale) || scale <= 0) return false;
  format::ConvertOptions o = pt.options;
  o.seed = format::mix64(o.seed ^ format::mix64(p.stream));
  o.overflow = format::Overflow::saturate;
  o.index_offset = 0;
  o.flush_subnormal_inputs = false;
  o.flush_subnormal_outputs = false;
  // Every element is finite here; its range counts are taken in the same pass (limit max_elem · S).
  const double limit = e.max_finite * scale;
  std::uint64_t over = 0, under = 0;
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const double v = static_cast<double>(x.data()[i]);
    const T r = static_cast<T>(
        format::quantize(e, v / scale, o, p.index_offset + static_cast<std::uint64_t>(i)) * scale);
    x.data()[i] = r;
    over += !std::isfinite(static_cast<double>(r)) || std::abs(v) > limit ? 1 : 0;
    under += v != 0.0 && r == T(0) ? 1 : 0;
  }
  if (counts != nullptr) *counts += RangeCounts{static_cast<std::uint64_t>(x.size()), over, under};
  return true;
}

// The role whose format quantises point `operand` (see DelayedScaling) of site `s`.
Role point_role(const LinearSite& s, std::uint64_t operand) {
  const bool head = s.kind == LayerKind::head;
  switch (operand) {
    case 0:
    case 5: return head ? Role::lm_head_input : Role::linear_input;
    case 1:
    case 3: return head ? Role::lm_head : Role::weights;
    case 2:
    case 4: return Role::grad_output;
    case 6: return Role::grad_activation;
    default: return Role::grad_weights;
  }
}

// Encodes `x` by block quantiser `q` (decode(encode) is apply() bit for bit), leaving the decoded
// values in x: for double through float, as Quantizer::apply does.
template <class M>
engine::EncodedOperand encode_operand(const engine::Quantizer& q, const engine::QuantPoint& p, M& x) {
  if constexpr (std::is_same_v<typename M::Scalar, float>) {
    return q.encode(x, p);
  } else {
    engine::RowMatrix f = x.template cast<float>();
    engine::EncodedOperand e = q.encode(f, p);
    x = f.template cast<double>();
    return e;
  }
}

// Quantises `x` by block quantiser `q` through its encoding `e` and returns each element's limit:
// the element format's largest finite value times the element's block scale and the tensor scale.
// The slow, general way (any scale rule, non-finite inputs).
template <class M>
std::vector<double> encode_with_limits(const engine::Quantizer& q, const engine::QuantPoint& p, M& x,
                                       engine::EncodedOperand& e) {
  e = encode_operand(q, p, x);
  const block::BlockFormat& f = *e.block;
  const block::BlockLayout& L = e.tensor.layout;
  std::vector<double> per_block(e.tensor.scales.size());
  for (std::size_t b = 0; b < per_block.size(); ++b) {
    per_block[b] = f.element.max_finite * block::scale_value(f, e.tensor.scales[b]) *
                   static_cast<double>(e.tensor.tensor_scale);
  }
  std::vector<double> limit(L.element_count());
  for (std::size_t i = 0; i < limit.size(); ++i) {
    const std::size_t a = i / (L.rows * L.cols), r = (i / L.cols) % L.rows, c = i % L.cols;
    limit[i] = per_block[(a * L.grid_rows() + r / L.block_rows) * L.grid_cols() + c / L.block_cols];
  }
  return limit;
}

// Calls f(block, first element, count) for every run of consecutive elements of one block of a
// row-major tensor cut by layout L (a view [outer, rows, cols], blocks of block_rows × block_cols).
template <class F>
void for_block_runs(const block::BlockLayout& L, const F& f) {
  const std::size_t gc = L.grid_cols();
  std::size_t row_block = 0;  // the first block of row r: (a · grid_rows + r / block_rows) · grid_cols
  std::size_t first = 0;      // the first element of row r
  for (std::size_t a = 0; a < L.outer; ++a) {
    for (std::size_t r = 0, in_block = 0; r < L.rows; ++r, first += L.cols) {
      std::size_t b = row_block;
      for (std::size_t c0 = 0; c0 < L.cols; c0 += L.block_cols, ++b)
        f(b, first + c0, std::min(L.block_cols, L.cols - c0));
      if (++in_block == L.block_rows || r + 1 == L.rows) in_block = 0, row_block += gc;
    }
  }
}

// The magnitude bits of float x (its bits without the sign) as a non-negative int32: for two
// non-NaN floats, |x| < |y| if and only if abs_bits(x) < abs_bits(y); ≥ 0x7f800000 for ±Inf and
// NaN. Signed 32-bit compares vectorise on every x86-64 target.
inline std::int32_t abs_bits(float x) {
  return static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(x) & 0x7fffffffU);
}
constexpr std::int32_t kInfBits = 0x7f800000;

// The magnitude bits of the largest float ≤ limit (limit ≥ 0, not NaN): for finite float x,
// |x| > limit if and only if abs_bits(x) > limit_bits(limit).
std::int32_t limit_bits(double limit) {
  if (limit >= static_cast<double>(std::numeric_limits<float>::max()))
    return abs_bits(std::numeric_limits<float>::max());
  float f = static_cast<float>(limit);
  if (static_cast<double>(f) > limit) f = std::nextafter(f, 0.0F);
  return abs_bits(f);
}

// Elements counted per inner loop: 32-bit counters that cannot wrap, so the loops vectorise.
constexpr std::size_t kCountChunk = std::size_t{1} << 24;

// Finite-element counts of x before quantisation: elements above `limit` (for float, given as
// limit_bits(limit)), and zeros.
template <class T, class Limit>
void count_before(const T* x, std::size_t n, Limit limit, std::uint64_t& over, std::uint64_t& zeros) {
  if constexpr (std::is_same_v<T, float>) {
    for (std::size_t lo = 0; lo < n; lo += kCountChunk) {
      std::uint32_t o = 0, z = 0;
      const std::size_t hi = std::min(n, lo + kCountChunk);
      for (std::size_t i = lo; i < hi; ++i) {
        const std::int32_t a = abs_bits(x[i]);
        o += a > limit ? 1U : 0U;
        z += a == 0 ? 1U : 0U;
      }
      over += o, zeros += z;
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const double a = std::abs(static_cast<double>(x[i]));
      over += a > limit ? 1U : 0U;
      zeros += a == 0.0 ? 1U : 0U;
    }
  }
}

// The zeros of x.
template <class T>
std::uint64_t count_zeros(const T* x, std::size_t n) {
  std::uint64_t z = 0;
  for (std::size_t lo = 0; lo < n; lo += kCountChunk) {
    std::uint32_t c = 0;
    const std::size_t hi = std::min(n, lo + kCountChunk);
    if constexpr (std::is_same_v<T, float>) {
      for (std::size_t i = lo; i < hi; ++i) c += abs_bits(x[i]) == 0 ? 1U : 0U;
    } else {
      for (std::size_t i = lo; i < hi; ++i) c += x[i] == T(0) ? 1U : 0U;
    }
    z += c;
  }
  return z;
}

// True when every element of x is finite (for double: also as a float, as the quantiser sees it).
template <class T>
bool all_finite(const T* x, std::size_t n) {
  std::int32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t a = abs_bits(static_cast<float>(x[i]));
    m = a > m ? a : m;
  }
  if constexpr (!std::is_same_v<T, float>) {
    for (std::size_t i = 0; i < n; ++i)
      if (!std::isfinite(x[i])) return false;
  }
  return m < kInfBits;
}

// Quantises finite `x` by block quantiser `q` (its fast apply) and adds the range counts to `n`
// without a copy of x. Every scale rule but `search` picks a block's scale from the block's amax
// alone (and the tensor scale from the tensor's amax), so the scales are those of a probe tensor
// holding one amax per block, encoded with blocks of one element; each block's limit is the element
// format's largest finite value times that scale and the tensor scale. Overflow (|x| above the limit;
// every element of a NaN-scale block) is counted before quantising, underflow as the zeros the
// quantisation added (a finite zero stays zero outside NaN-scale blocks). False, with x unchanged,
// for the `search` rule or a non-finite input: the caller then counts the slow, general way.
template <class M>
bool block_counts(const engine::Quantizer& q, const engine::QuantPoint& p, M& x, RangeCounts& n) {
  const block::BlockFormat& f = *q.block_format();
  if (f.rule == block::ScaleRule::search || p.axis != 1) return false;
  const std::size_t shape[2] = {static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols())};
  const block::BlockLayout L = block::make_layout(f, shape);
  if (L.element_count() != static_cast<std::size_t>(x.size())) return false;
  const auto* v = x.data();
  if (!all_finite(v, static_cast<std::size_t>(x.size()))) return false;
  // Each block's amax as the quantiser sees it (double rounded to float first).
  std::vector<float> amax(L.block_count(), 0.0F);
  for_block_runs(L, [&](std::size_t b, std::size_t first, std::size_t len) {
    float m = amax[b];
    for (std::size_t i = first; i < first + len; ++i) {
      const float a = std::abs(static_cast<float>(v[i]));
      m = a > m ? a : m;
    }
    amax[b] = m;
  });
  block::BlockFormat probe = f;
  probe.granularity = block::Granularity::block;
  probe.block_size = 1;
  probe.axis = -1;
  const std::size_t probe_shape[1] = {amax.size()};
  const block::BlockTensor t = block::encode(probe, amax, probe_shape);
  // Each block's limit (for float as limit_bits); NaN for a NaN block, where every element decodes to NaN.
  using T = typename M::Scalar;
  using Limit = std::conditional_t<std::is_same_v<T, float>, std::int32_t, double>;
  std::vector<Limit> limit(amax.size());
  std::vector<bool> nan_block(amax.size());
  for (std::size_t b = 0; b < limit.size(); ++b) {
    const double l =
        f.element.max_finite * block::scale_value(probe, t.scales[b]) * static_cast<double>(t.tensor_scale);
    nan_block[b] = std::isnan(l);
    if constexpr (std::is_same_v<T, float>) {
      limit[b] = nan_block[b] ? 0 : limit_bits(l);
    } else {
      limit[b] = l;
    }
  }
  std::uint64_t over = 0, zeros = 0;
  for_block_runs(L, [&](std::size_t b, std::size_t first, std::size_t len) {
    if (nan_block[b]) {
      over += len;
    } else {
      count_before(v + first, len, limit[b], over, zeros);
    }
  });
  q.apply(x, p);
  const std::uint64_t added = count_zeros(x.data(), static_cast<std::size_t>(x.size())) - zeros;
  n += RangeCounts{static_cast<std::uint64_t>(x.size()), over, added};
  return true;
}

// Quantises finite `x` by element quantiser `q` and adds the range counts to `n` without a copy:
// overflow is |x| above the format's largest finite value (counted before), underflow the zeros the
// quantisation added (a finite zero stays zero, and no finite value becomes NaN). False, with x
// unchanged, when x holds a non-finite value.
template <class M>
bool element_counts(const engine::Quantizer& q, const engine::QuantPoint& p, M& x, RangeCounts& n) {
  const auto size = static_cast<std::size_t>(x.size());
  if (!all_finite(x.data(), size)) return false;
  std::uint64_t over = 0, zeros = 0;
  const double limit = q.element_format().max_finite;
  if constexpr (std::is_same_v<typename M::Scalar, float>) {
    count_before(x.data(), size, limit_bits(limit), over, zeros);
  } else {
    count_before(x.data(), size, limit, over, zeros);
  }
  q.apply(x, p);
  n += RangeCounts{size, over, count_zeros(x.data(), size) - zeros};
  return true;
}

// Quantises operand `x` of site `s` in place by `q` (nothing for nullptr). With `enc` (an operand of
// a datapath GEMM) a block format's encoding goes there too: the codes and scales the datapath reads.
template <class M>
void quantize(const std::shared_ptr<const engine::Quantizer>& q, const LinearSite& s, std::string_view what,
              std::uint64_t step, std::uint64_t operand, M& x, engine::EncodedOperand* enc = nullptr) {
  if (!q) return;
  engine::QuantPoint p;
  p.layer = s.layer;
  p.kind = s.kind;
  p.tensor = what;
  p.axis = 1;
  p.stream = mix(s.stream ^ mix(step * 8 + operand));
  const bool count = s.counts != nullptr && s.counts->enabled.load(std::memory_order_relaxed);
  RangeCounts c;
  if (enc != nullptr && q->block_format() != nullptr) {
    // Delayed scaling never reaches a datapath GEMM (LinearPlan refuses it there).
    if (!count) {
      *enc = encode_operand(*q, p, x);
      return;
    }
    const M before = x;
    const std::vector<double> limits = encode_with_limits(*q, p, x, *enc);
    c = range_counts(before.data(), x.data(), static_cast<std::size_t>(x.size()),
                     [&limits](std::size_t i) { return limits[i]; });
  } else if (s.delayed && delayed(*q, *s.delayed, step, operand, p, x, count ? &c : nullptr)) {
    // counted in its pass
  } else if (!count) {
    q->apply(x, p);
    return;
  } else {
    apply_counted(*q, p, x, c);
  }
  if (!count) return;
  const std::lock_guard<std::mutex> lock(s.counts->mutex);
  s.counts->by_role[static_cast<std::size_t>(point_role(s, operand))] += c;
}

// apply_counted: the fast ways where they apply, else a copy of the input compared after.
template <class M>
void counted(const engine::Quantizer& q, const engine::QuantPoint& p, M& x, RangeCounts& c) {
  RangeCounts n;
  if (q.block_format() != nullptr ? block_counts(q, p, x, n) : element_counts(q, p, x, n)) {
    c += n;
    return;
  }
  // Non-finite inputs (or the search scale rule): compare with a copy of the input.
  const M before = x;
  const auto size = static_cast<std::size_t>(x.size());
  if (q.block_format() != nullptr) {
    engine::EncodedOperand e;
    const std::vector<double> limits = encode_with_limits(q, p, x, e);
    c += range_counts(before.data(), x.data(), size, [&limits](std::size_t i) { return limits[i]; });
  } else {
    q.apply(x, p);
    const double limit = q.element_format().max_finite;
    c += range_counts(before.data(), x.data(), size, [limit](std::size_t) { return limit; });
  }
}

// Q = blocks of H·D/√B on the columns of a and b: the fast Walsh–Hadamard transform per row.
template <class M>
void hadamard(int block, std::uint64_t seed, M& a, M& b) {
  if (block == 0) return;
  const Eigen::Index n = a.cols() - a.cols() % block;
  using T = typename M::Scalar;
  const T norm = T(1) / std::sqrt(T(block));
  std::vector<T> sign(static_cast<std::size_t>(n));
  for (Eigen::Index j = 0; j < n; ++j)
    sign[static_cast<std::size_t>(j)] = (mix(seed + static_cast<std::uint64_t>(j)) & 1U) != 0 ? T(-1) : T(1);
  for (M* m : {&a, &b}) {
    for (Eigen::Index r = 0; r < m->rows(); ++r) {
      T* row = m->row(r).data();
      for (Eigen::Index j = 0; j < n; ++j) row[j] *= sign[static_cast<std::size_t>(j)];
      for (Eigen::Index s0 = 0; s0 < n; s0 += block) {
        for (int h = 1; h < block; h *= 2) {
          for (int i = 0; i < block; i += 2 * h) {
            for (int j = i; j < i + h; ++j) {
              const T x = row[s0 + j];
              const T y = row[s0 + j + h];
              row[s0 + j] = x + y;
              row[s0 + j + h] = x - y;
            }
          }
        }
        for (int j = 0; j < block; ++j) row[s0 + j] *= norm;
      }
    }
  }
}

// The operands of `pass` quantised in place; with `ea` / `eb`, block formats encoded there too.
template <class M>
void operands(const LinearSite& s, GemmPass pass, std::uint64_t step, M& a, M& b,
              engine::EncodedOperand* ea = nullptr, engine::EncodedOperand* eb = nullptr) {
  switch (pass) {
    case GemmPass::forward:
      quantize(s.input, s, "input", step, 0, a, ea);
      quantize(s.weights, s, "weights", step, 1, b, eb);
      break;
    case GemmPass::dgrad:
      quantize(s.grad_output, s, "grad_output", step, 2, a, ea);
      if (!s.shared_weight) quantize(s.weights, s, "weights_t", step, 3, b, eb);
      break;
    case GemmPass::wgrad:
      hadamard(s.hadamard, mix(mix(s.stream ^ mix(step * 8 + 4)) + 0x48616461ULL), a, b);
      quantize(s.grad_output, s, "grad_output_t", step, 4, a, ea);
      quantize(s.input, s, "input_t", step, 5, b, eb);
      break;
  }
}

template <class M>
void result(const LinearSite& s, GemmPass pass, std::uint64_t step, M& c) {
  if (pass == GemmPass::dgrad) quantize(s.grad_activation, s, "grad_activation", step, 6, c);
  if (pass == GemmPass::wgrad) quantize(s.grad_weights, s, "grad_weights", step, 7, c);
}

}  // namespace

void apply_counted(const engine::Quantizer& q, const engine::QuantPoint& p, engine::RowMatrix& x,
                   RangeCounts& c) {
  counted(q, p, x, c);
}

void apply_counted(const engine::Quantizer& q, const engine::QuantPoint& p, engine::RowMatrixD& x,
                   RangeCounts& c) {
  counted(q, p, x, c);
}

std::string_view pass_name(GemmPass pass) {
  switch (pass) {
    case GemmPass::forward: return "forward";
    case GemmPass::dgrad: return "dgrad";
    default: return "wgrad";
  }
}

LinearPlan::LinearPlan(const engine::PrecisionPlan& plan, const engine::QuantizerFactory& quantizers,
                       const engine::GemmFactory& gemms, const engine::Config& c) {
  const std::string who = "plan '" + plan.name + "'";
  if (c.n_experts > 0) {
    throw Error(who + ": model '" + c.name +
                "' has mixture-of-experts blocks, which training does not support yet");
  }
  const auto refuse_role = [&](const engine::PrecisionPlan::Entry& e) {
    if (e.spec && !trained_role(e.role)) {
      throw SpecError(e.spec->origin + ": " + who + ": role " + std::string(engine::to_string(e.role)) +
                      " is quantised, which training does not emulate yet (mixture-of-experts "
                      "blocks are not trainable); set it to \"none\"");
    }
  };
  const auto refuse_gemm = [&](const std::optional<engine::GemmChoice>& g, std::string_view key) {
    if (!g) return;
    if (g->convert) {
      throw SpecError(g->origin + ": " + who + ": " + std::string(key) +
                      " converts its operands, which training does not emulate yet; quantise the "
                      "operands' roles instead");
    }
  };
  for (const auto& e : plan.roles) refuse_role(e);
  refuse_gemm(plan.gemm, "gemm");
  refuse_gemm(plan.attention_gemm, "attention_gemm");
  refuse_gemm(plan.dgrad_gemm, "dgrad_gemm");
  refuse_gemm(plan.wgrad_gemm, "wgrad_gemm");
  for (const auto& o : plan.overrides) {
    for (const auto& e : o.entries) refuse_role(e);
    refuse_gemm(o.gemm, "gemm");
    refuse_gemm(o.attention_gemm, "attention_gemm");
    refuse_gemm(o.dgrad_gemm, "dgrad_gemm");
    refuse_gemm(o.wgrad_gemm, "wgrad_gemm");
  }
  LinearSite s;
  // The quantiser of role r at (l, k); a delayed role registers its points' history length.
  const auto make = [&](Role r, int l, LayerKind k,
                        std::initializer_list<int> points) -> std::shared_ptr<const engine::Quantizer> {
    auto spec = plan.resolve(r, l, k, c.n_layers);
    if (!spec) return nullptr;
    if (spec->scaling == engine::Scaling::delayed) {
      if (!s.delayed) s.delayed = std::make_shared<DelayedScaling>();
      for (const int i : points) {
        s.delayed->points[static_cast<std::size_t>(i)].length = spec->amax_history;
        s.delayed->points[static_cast<std::size_t>(i)].margin = spec->margin;
        s.delayed->points[static_cast<std::size_t>(i)].algo = spec->amax_algo;
        s.delayed->points[static_cast<std::size_t>(i)].options = spec->options;
      }
      spec->scaling = engine::Scaling::current;
    }
    return std::shared_ptr<const engine::Quantizer>(quantizers.make(*spec));
  };
  const auto add = [&](int l, LayerKind k, const std::string& tensor) {
    s = LinearSite{};
    s.layer = l;
    s.kind = k;
    s.tensor = tensor;
    const bool head = k == LayerKind::head;
    s.weights = make(head ? Role::lm_head : Role::weights, l, k, {1, 3});
    s.input = make(head ? Role::lm_head_input : Role::linear_input, l, k, {0, 5});
    s.grad_output = make(Role::grad_output, l, k, {2, 4});
    s.grad_activation = make(Role::grad_activation, l, k, {6});
    s.grad_weights = make(Role::grad_weights, l, k, {7});
    const block::BlockFormat* bf = s.weights ? s.weights->block_format() : nullptr;
    s.shared_weight = bf != nullptr && bf->granularity == block::Granularity::tile;
    s.hadamard = plan.wgrad_hadamard;
    for (const GemmPass pass : {GemmPass::forward, GemmPass::dgrad, GemmPass::wgrad}) {
      const auto i = static_cast<std::size_t>(pass);
      const engine::GemmChoice choice = plan.resolve_gemm_site(l, k, tensor, c.n_layers, pass);
      s.gemm_name[i] = choice.datapath;
      s.gemm[i] = gemms.make(s.gemm_name[i]);
      const datapath::Datapath* dp = s.gemm[i]->datapath();
      if (dp == nullptr) continue;
      // A datapath GEMM reads its operands' element codes: each must be an element format it holds.
      const char* in_role = head ? "lm_head_input" : "linear_input";
      const char* w_role = head ? "lm_head" : "weights";
      using Side = std::pair<const engine::Quantizer*, const char*>;
      std::array<Side, 2> sides{Side{s.input.get(), in_role}, Side{s.weights.get(), w_role}};
      if (pass == GemmPass::dgrad) sides[0] = Side{s.grad_output.get(), "grad_output"};
      if (pass == GemmPass::wgrad)
        sides = {Side{s.grad_output.get(), "grad_output"}, Side{s.input.get(), in_role}};
      for (int side = 0; side < 2; ++side) {
        const auto [q, role] = sides[static_cast<std::size_t>(side)];
        const std::string where = (choice.origin.empty() ? plan.origin : choice.origin) + ": " + who + ": " +
                                  std::string(pass_name(pass)) + " GEMM of '" + tensor + "' (layer " +
                                  std::to_string(l) + "): ";
        // Block formats enter with their scales along this GEMM's contraction axis, as inference's do.
        const std::string why = engine::datapath_operand_problem(*dp, side == 0, q, role);
        if (!why.empty()) throw SpecError(where + why);
        const std::size_t point = 2 * i + static_cast<std::size_t>(side);  // see DelayedScaling
        if (s.delayed && s.delayed->points[point].length > 0) {
          throw SpecError(where + "operand " + (side == 0 ? "A" : "B") + " (" + role +
                          ") asks for delayed scaling, which training does not hand a datapath (its "
                          "scale comes from the amax history); use scaling = \"current\" or leave this "
                          "GEMM on \"none\"");
        }
      }
    }
    s.stream = mix(static_cast<std::uint64_t>(l + 1) * 64 + sites_.size());
    s.counts = counts_;
    sites_.push_back(std::move(s));
  };
  for (int l = 0; l < c.n_layers; ++l) {
    for (const char* t : {"wq", "wk", "wv", "wo"}) add(l, LayerKind::attention, t);
    for (const char* t : {"w1", "w2", "w3"}) add(l, LayerKind::mlp, t);
  }
  add(-1, LayerKind::head, "output");
  blocks_ = block_sites(plan, quantizers, gemms, c);
  for (BlockSite& b : blocks_) b.counts = counts_;
  logits_ = logits_quantizer(plan, quantizers, c);
  std::vector<bool> quantised(std::size(engine::kAllRoles), false);
  for (const LinearSite& site : sites_) {
    const std::pair<Role, const void*> points[] = {
        {site.kind == LayerKind::head ? Role::lm_head : Role::weights, site.weights.get()},
        {site.kind == LayerKind::head ? Role::lm_head_input : Role::linear_input, site.input.get()},
        {Role::grad_output, site.grad_output.get()},
        {Role::grad_activation, site.grad_activation.get()},
        {Role::grad_weights, site.grad_weights.get()}};
    for (const auto& [role, q] : points)
      if (q != nullptr) quantised[static_cast<std::size_t>(role)] = true;
  }
  for (const BlockSite& b : blocks_) {
    // Attention's gradient quantisers exist only where attention runs through its GEMMs.
    const std::pair<Role, const void*> points[] = {{Role::q, b.q.get()},
                                                   {Role::k, b.k.get()},
                                                   {Role::v, b.v.get()},
                                                   {Role::kv_cache, b.kv_cache.get()},
                                                   {Role::scores, b.scores.get()},
                                                   {Role::probs, b.probs.get()},
                                                   {Role::attn_output, b.attn_output.get()},
                                                   {Role::residual, b.residual_attention.get()},
                                                   {Role::residual, b.residual_mlp.get()},
                                                   {Role::mlp_hidden, b.mlp_hidden.get()},
                                                   {Role::grad_output, b.grad_output.get()},
                                                   {Role::grad_activation, b.grad_activation.get()}};
    for (const auto& [role, q] : points)
      if (q != nullptr) quantised[static_cast<std::size_t>(role)] = true;
  }
  if (logits_) quantised[static_cast<std::size_t>(Role::logits)] = true;
  for (const Role r : engine::kAllRoles)
    if (quantised[static_cast<std::size_t>(r)]) roles_.push_back(r);
}

void LinearPlan::set_counting(bool on) { counts_->enabled.store(on, std::memory_order_relaxed); }

void LinearPlan::reset_counts() {
  const std::lock_guard<std::mutex> lock(counts_->mutex);
  counts_->by_role.fill(RangeCounts{});
}

std::vector<RangeCounts> LinearPlan::range_counts() const {
  const std::lock_guard<std::mutex> lock(counts_->mutex);
  std::vector<RangeCounts> out;
  out.reserve(roles_.size());
  for (const Role r : roles_) out.push_back(counts_->by_role[static_cast<std::size_t>(r)]);
  return out;
}

const LinearSite& LinearPlan::site(int layer, std::string_view tensor) const {
  const auto it = std::find_if(sites_.begin(), sites_.end(),
                               [&](const LinearSite& s) { return s.layer == layer && s.tensor == tensor; });
  if (it == sites_.end()) {
    throw Error("training: no linear layer '" + std::string(tensor) + "' in block " + std::to_string(layer));
  }
  return *it;
}

void quantize_operands(const LinearSite& site, GemmPass pass, std::uint64_t step, engine::RowMatrix& a,
                       engine::RowMatrix& b) {
  operands(site, pass, step, a, b);
}

void quantize_operands(const LinearSite& site, GemmPass pass, std::uint64_t step, engine::RowMatrixD& a,
                       engine::RowMatrixD& b) {
  operands(site, pass, step, a, b);
}

void encode_operands(const LinearSite& site, GemmPass pass, std::uint64_t step, engine::RowMatrix& a,
                     engine::RowMatrix& b, engine::EncodedOperand& ea, engine::EncodedOperand& eb) {
  operands(site, pass, step, a, b, &ea, &eb);
}

void encode_operands(const LinearSite& site, GemmPass pass, std::uint64_t step, engine::RowMatrixD& a,
                     engine::RowMatrixD& b, engine::EncodedOperand& ea, engine::EncodedOperand& eb) {
  operands(site, pass, step, a, b, &ea, &eb);
}

void hadamard_columns(int block, std::uint64_t seed, engine::RowMatrix& a, engine::RowMatrix& b) {
  hadamard(block, seed, a, b);
}

void hadamard_columns(int block, std::uint64_t seed, engine::RowMatrixD& a, engine::RowMatrixD& b) {
  hadamard(block, seed, a, b);
}

void quantize_forward_weight(const LinearSite& site, std::uint64_t step, engine::RowMatrix& w) {
  quantize(site.weights, site, "weights", step, 1, w);
}

void quantize_forward_weight(const LinearSite& site, std::uint64_t step, engine::RowMatrixD& w) {
  quantize(site.weights, site, "weights", step, 1, w);
}

void quantize_result(const LinearSite& site, GemmPass pass, std::uint64_t step, engine::RowMatrix& c) {
  result(site, pass, step, c);
}

void quantize_result(const LinearSite& site, GemmPass pass, std::uint64_t step, engine::RowMatrixD& c) {
  result(site, pass, step, c);
}

}  // namespace lpemu::train
