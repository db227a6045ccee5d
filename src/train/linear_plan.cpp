#include "lpemu/train/linear_plan.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "lpemu/block/block_format.hpp"
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
             const engine::QuantPoint& p, M& x, double& used_scale) {
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
  const double scale = static_cast<double>(static_cast<float>(a / e.max_finite));
  if (!finite || !std::isfinite(scale) || scale <= 0) return false;
  used_scale = scale;
  format::ConvertOptions o = pt.options;
  o.seed = format::mix64(o.seed ^ format::mix64(p.stream));
  o.overflow = format::Overflow::saturate;
  o.index_offset = 0;
  o.flush_subnormal_inputs = false;
  o.flush_subnormal_outputs = false;
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const double y = static_cast<double>(x.data()[i]) / scale;
    x.data()[i] =
        static_cast<T>(format::quantize(e, y, o, p.index_offset + static_cast<std::uint64_t>(i)) * scale);
  }
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

// Quantises `x` by block quantiser `q` through its encoding (decode(encode) is apply() bit for bit)
// and returns each element's limit: the element format's largest finite value times the element's
// block scale and the tensor scale.
template <class M>
std::vector<double> encode_with_limits(const engine::Quantizer& q, const engine::QuantPoint& p, M& x) {
  engine::EncodedOperand e;
  if constexpr (std::is_same_v<typename M::Scalar, float>) {
    e = q.encode(x, p);
  } else {  // as Quantizer::apply does for double: through float
    engine::RowMatrix f = x.template cast<float>();
    e = q.encode(f, p);
    x = f.template cast<double>();
  }
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

template <class M>
void quantize(const std::shared_ptr<const engine::Quantizer>& q, const LinearSite& s, std::string_view what,
              std::uint64_t step, std::uint64_t operand, M& x) {
  if (!q) return;
  engine::QuantPoint p;
  p.layer = s.layer;
  p.kind = s.kind;
  p.tensor = what;
  p.axis = 1;
  p.stream = mix(s.stream ^ mix(step * 8 + operand));
  const bool count = s.counts != nullptr;
  M before;
  if (count) before = x;
  double limit = q->element_format().max_finite, scale = 1;
  std::vector<double> limits;
  if (s.delayed && delayed(*q, *s.delayed, step, operand, p, x, scale)) {
    limit *= scale;
  } else if (count && q->block_format() != nullptr) {
    limits = encode_with_limits(*q, p, x);
  } else {
    q->apply(x, p);
  }
  if (!count) return;
  const auto n = static_cast<std::size_t>(x.size());
  const RangeCounts c =
      limits.empty()
          ? range_counts(before.data(), x.data(), n, [limit](std::size_t) { return limit; })
          : range_counts(before.data(), x.data(), n, [&limits](std::size_t i) { return limits[i]; });
  const std::lock_guard<std::mutex> lock(s.counts->mutex);
  s.counts->by_role[static_cast<std::size_t>(point_role(s, operand))] += c;
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

template <class M>
void operands(const LinearSite& s, GemmPass pass, std::uint64_t step, M& a, M& b) {
  switch (pass) {
    case GemmPass::forward:
      quantize(s.input, s, "input", step, 0, a);
      quantize(s.weights, s, "weights", step, 1, b);
      break;
    case GemmPass::dgrad:
      quantize(s.grad_output, s, "grad_output", step, 2, a);
      if (!s.shared_weight) quantize(s.weights, s, "weights_t", step, 3, b);
      break;
    case GemmPass::wgrad:
      hadamard(s.hadamard, mix(mix(s.stream ^ mix(step * 8 + 4)) + 0x48616461ULL), a, b);
      quantize(s.grad_output, s, "grad_output_t", step, 4, a);
      quantize(s.input, s, "input_t", step, 5, b);
      break;
  }
}

template <class M>
void result(const LinearSite& s, GemmPass pass, std::uint64_t step, M& c) {
  if (pass == GemmPass::dgrad) quantize(s.grad_activation, s, "grad_activation", step, 6, c);
  if (pass == GemmPass::wgrad) quantize(s.grad_weights, s, "grad_weights", step, 7, c);
}

}  // namespace

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
        const engine::Quantizer* q = sides[static_cast<std::size_t>(side)].first;
        std::string why =
            q != nullptr && q->block_format() != nullptr
                ? "training hands a datapath element codes only, not block scales (use an element format "
                  "or leave this GEMM on \"none\")"
                : engine::datapath_entry_problem(
                      *dp, side == 0,
                      q != nullptr ? q->element_format() : format::Registry::builtin().get("fp32"), nullptr);
        if (why.empty()) continue;
        throw SpecError((choice.origin.empty() ? plan.origin : choice.origin) + ": " + who + ": " +
                        std::string(pass_name(pass)) + " GEMM of '" + tensor + "' (layer " +
                        std::to_string(l) + "): operand " + (side == 0 ? "A" : "B") + " (" +
                        sides[static_cast<std::size_t>(side)].second + ") in format '" +
                        (q != nullptr ? q->name() : std::string("fp32")) + "' cannot enter datapath '" +
                        dp->name + "' exactly: " + why);
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
  for (const Role r : engine::kAllRoles)
    if (quantised[static_cast<std::size_t>(r)]) roles_.push_back(r);
}

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
