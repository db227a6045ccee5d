#include "lpemu/train/linear_plan.hpp"

#include <algorithm>

#include "lpemu/block/block_format.hpp"
#include "lpemu/error.hpp"

namespace lpemu::train {
namespace {

using engine::GemmPass;
using engine::LayerKind;
using engine::Role;

// SplitMix64's finaliser: distinct streams for distinct (site, step, operand).
std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The roles training reads: the linear layers' operands and the training roles.
bool trained_role(Role r) {
  return r == Role::weights || r == Role::linear_input || r == Role::lm_head || r == Role::lm_head_input ||
         engine::is_training_role(r);
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
  q->apply(x, p);
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
                      " is quantised, which training does not emulate yet (training reads weights, "
                      "linear_input, lm_head, lm_head_input and the training roles); set it to \"none\"");
    }
  };
  const auto refuse_gemm = [&](const std::optional<engine::GemmChoice>& g, std::string_view key) {
    if (!g) return;
    if (key == "attention_gemm" && g->datapath != "eigen") {
      throw SpecError(g->origin + ": " + who +
                      ": attention_gemm is set, which training does not emulate yet; remove it");
    }
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
  const auto make = [&](Role r, int l, LayerKind k) -> std::shared_ptr<const engine::Quantizer> {
    const auto spec = plan.resolve(r, l, k, c.n_layers);
    if (!spec) return nullptr;
    return std::shared_ptr<const engine::Quantizer>(quantizers.make(*spec));
  };
  const auto add = [&](int l, LayerKind k, const std::string& tensor) {
    LinearSite s;
    s.layer = l;
    s.kind = k;
    s.tensor = tensor;
    const bool head = k == LayerKind::head;
    s.weights = make(head ? Role::lm_head : Role::weights, l, k);
    s.input = make(head ? Role::lm_head_input : Role::linear_input, l, k);
    s.grad_output = make(Role::grad_output, l, k);
    s.grad_activation = make(Role::grad_activation, l, k);
    s.grad_weights = make(Role::grad_weights, l, k);
    const block::BlockFormat* bf = s.weights ? s.weights->block_format() : nullptr;
    s.shared_weight = bf != nullptr && bf->granularity == block::Granularity::tile;
    for (const GemmPass pass : {GemmPass::forward, GemmPass::dgrad, GemmPass::wgrad}) {
      const auto i = static_cast<std::size_t>(pass);
      s.gemm_name[i] = plan.resolve_gemm_site(l, k, tensor, c.n_layers, pass).datapath;
      s.gemm[i] = gemms.make(s.gemm_name[i]);
    }
    s.stream = mix(static_cast<std::uint64_t>(l + 1) * 64 + sites_.size());
    sites_.push_back(std::move(s));
  };
  for (int l = 0; l < c.n_layers; ++l) {
    for (const char* t : {"wq", "wk", "wv", "wo"}) add(l, LayerKind::attention, t);
    for (const char* t : {"w1", "w2", "w3"}) add(l, LayerKind::mlp, t);
  }
  add(-1, LayerKind::head, "output");
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
