#include "lpemu/train/attention_plan.hpp"

#include <mutex>
#include <string_view>

#include "lpemu/datapath/datapath.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/registry.hpp"
#include "train/mix.hpp"

namespace lpemu::train {
namespace {

using engine::LayerKind;
using engine::Role;

using detail::mix;

// The quantisation points of a block, each with its own stream.
enum Point : std::uint64_t {
  kQ,
  kK,
  kV,
  kKCache,
  kVCache,
  kScores,
  kProbs,
  kAttnOutput,
  kResidualAttention,
  kResidualMlp,
  kMlpHidden,
  kOperands,  // + 2 · GEMM + side for the backward GEMMs' operands
  kResults = kOperands + 12,
  kLogits = kResults + 6,
};

// q.apply(x, p), adding the range counts to role `role` of `counts` when given and enabled.
template <class M>
void apply_counting(const engine::Quantizer& q, const engine::QuantPoint& p, Role role, RoleCounts* counts,
                    M& x) {
  if (counts == nullptr || !counts->enabled.load(std::memory_order_relaxed)) {
    q.apply(x, p);
    return;
  }
  RangeCounts c;
  apply_counted(q, p, x, c);
  const std::lock_guard<std::mutex> lock(counts->mutex);
  counts->by_role[static_cast<std::size_t>(role)] += c;
}

template <class M>
void quantize(const std::shared_ptr<const engine::Quantizer>& q, const BlockSite& s, Role role,
              LayerKind kind, std::string_view what, std::uint64_t step, std::uint64_t point, int head,
              M& x) {
  if (!q) return;
  engine::QuantPoint p;
  p.role = role;
  p.layer = s.layer;
  p.kind = kind;
  p.tensor = what;
  p.head = head;
  p.axis = 1;
  p.stream = mix(mix(s.stream ^ mix(step * 64 + point)) + static_cast<std::uint64_t>(head + 1));
  apply_counting(*q, p, role, s.counts.get(), x);
}

// Q, K or V of the backward GEMMs re-quantised by its forward roles: K and V by k / v then kv_cache.
template <class M>
void saved(const BlockSite& s, char which, std::uint64_t step, std::uint64_t point, int head, M& x) {
  if (which == 'q') {
    quantize(s.q, s, Role::q, LayerKind::attention, "q_t", step, point, head, x);
    return;
  }
  quantize(which == 'k' ? s.k : s.v, s, which == 'k' ? Role::k : Role::v, LayerKind::attention,
           which == 'k' ? "k_t" : "v_t", step, point, head, x);
  quantize(s.kv_cache, s, Role::kv_cache, LayerKind::attention, which == 'k' ? "k_cache_t" : "v_cache_t",
           step, point + 32, head, x);
}

template <class M>
void operands(const BlockSite& s, AttentionGemm g, std::uint64_t step, int head, M& a, M& b) {
  const auto gi = static_cast<std::uint64_t>(g);
  const std::uint64_t pa = kOperands + 2 * (gi - 2);
  const auto grad = [&](M& x) {
    quantize(s.grad_output, s, Role::grad_output, LayerKind::attention, "grad_output", step, pa, head, x);
  };
  switch (g) {
    case AttentionGemm::dp:  // dO [i, d], V [t, d]
      grad(a);
      saved(s, 'v', step, pa + 1, head, b);
      break;
    case AttentionGemm::dv:  // Pᵀ [t, i], dOᵀ [d, i]
      quantize(s.probs, s, Role::probs, LayerKind::attention, "probs_t", step, pa, head, a);
      quantize(s.grad_output, s, Role::grad_output, LayerKind::attention, "grad_output_t", step, pa + 1, head,
               b);
      break;
    case AttentionGemm::dq:  // dS [i, t], Kᵀ [d, t]
      grad(a);
      saved(s, 'k', step, pa + 1, head, b);
      break;
    case AttentionGemm::dk:  // dSᵀ [t, i], Qᵀ [d, i]
      grad(a);
      saved(s, 'q', step, pa + 1, head, b);
      break;
    default: break;
  }
}

template <class M>
void qkv(const BlockSite& s, std::uint64_t step, M& q, M& k, M& v) {
  quantize(s.q, s, Role::q, LayerKind::attention, "q", step, kQ, -1, q);
  quantize(s.k, s, Role::k, LayerKind::attention, "k", step, kK, -1, k);
  quantize(s.v, s, Role::v, LayerKind::attention, "v", step, kV, -1, v);
  quantize(s.kv_cache, s, Role::kv_cache, LayerKind::attention, "k_cache", step, kKCache, -1, k);
  quantize(s.kv_cache, s, Role::kv_cache, LayerKind::attention, "v_cache", step, kVCache, -1, v);
}

}  // namespace

const char* attention_gemm_name(AttentionGemm g) {
  constexpr const char* kNames[] = {"qk", "pv", "dp", "dv", "dq", "dk"};
  return kNames[static_cast<std::size_t>(g)];
}

std::vector<BlockSite> block_sites(const engine::PrecisionPlan& plan,
                                   const engine::QuantizerFactory& quantizers,
                                   const engine::GemmFactory& gemms, const engine::Config& c) {
  const std::string who = "plan '" + plan.name + "'";
  std::vector<BlockSite> out;
  for (int l = 0; l < c.n_layers; ++l) {
    BlockSite s;
    s.layer = l;
    s.stream = mix(0x617474656e74ULL + static_cast<std::uint64_t>(l));
    const auto make = [&](Role r, LayerKind k) -> std::shared_ptr<const engine::Quantizer> {
      const auto spec = plan.resolve(r, l, k, c.n_layers);
      if (!spec) return nullptr;
      if (spec->scaling == engine::Scaling::delayed && !engine::is_training_role(r)) {
        throw SpecError(spec->origin + ": " + who + ": role " + std::string(engine::to_string(r)) +
                        " asks for delayed scaling, which training emulates only on the linear layers' "
                        "operands and the gradient roles; use scaling = \"current\"");
      }
      return std::shared_ptr<const engine::Quantizer>(quantizers.make(*spec));
    };
    s.q = make(Role::q, LayerKind::attention);
    s.k = make(Role::k, LayerKind::attention);
    s.v = make(Role::v, LayerKind::attention);
    s.kv_cache = make(Role::kv_cache, LayerKind::attention);
    s.scores = make(Role::scores, LayerKind::attention);
    s.probs = make(Role::probs, LayerKind::attention);
    s.attn_output = make(Role::attn_output, LayerKind::attention);
    s.residual_attention = make(Role::residual, LayerKind::attention);
    s.residual_mlp = make(Role::residual, LayerKind::mlp);
    s.mlp_hidden = make(Role::mlp_hidden, LayerKind::mlp);
    const engine::GemmChoice choice = plan.resolve_gemm_site(l, LayerKind::attention, "qk", c.n_layers);
    if (choice.convert) {
      throw SpecError((choice.origin.empty() ? plan.origin : choice.origin) + ": " + who +
                      ": attention_gemm converts its operands, which training does not emulate; quantise "
                      "the attention roles instead");
    }
    s.gemm_name = choice.datapath;
    s.gemm = gemms.make(choice.datapath);
    s.active = s.q || s.k || s.v || s.kv_cache || s.scores || s.probs || s.attn_output ||
               s.gemm->datapath() != nullptr;
    // Gradient roles only matter (and are only made) where attention runs through its GEMMs.
    if (s.active) {
      s.grad_output = make(Role::grad_output, LayerKind::attention);
      s.grad_activation = make(Role::grad_activation, LayerKind::attention);
    }
    if (const datapath::Datapath* dp = s.gemm->datapath()) {
      const engine::Quantizer* kq = s.kv_cache ? s.kv_cache.get() : s.k.get();
      const engine::Quantizer* vq = s.kv_cache ? s.kv_cache.get() : s.v.get();
      const engine::Quantizer* dq = s.grad_output.get();
      // Each GEMM's A and B roles, as the header comment lays them out.
      const std::array<std::array<std::pair<const engine::Quantizer*, const char*>, 2>, 6> sides = {{
          {{{s.q.get(), "q"}, {kq, "k / kv_cache"}}},
          {{{s.probs.get(), "probs"}, {vq, "v / kv_cache"}}},
          {{{dq, "grad_output"}, {vq, "v / kv_cache"}}},
          {{{s.probs.get(), "probs"}, {dq, "grad_output"}}},
          {{{dq, "grad_output"}, {kq, "k / kv_cache"}}},
          {{{dq, "grad_output"}, {s.q.get(), "q"}}},
      }};
      for (std::size_t g = 0; g < 6; ++g) {
        for (int side = 0; side < 2; ++side) {
          const auto [q, role] = sides[g][static_cast<std::size_t>(side)];
          const std::string why = engine::datapath_operand_problem(*dp, side == 0, q, role,
                                                                   "attention operands take element formats");
          if (!why.empty()) {
            throw SpecError((choice.origin.empty() ? plan.origin : choice.origin) + ": " + who +
                            ": attention GEMM '" + attention_gemm_name(static_cast<AttentionGemm>(g)) +
                            "' (layer " + std::to_string(l) + "): " + why);
          }
          s.formats[g][static_cast<std::size_t>(side)] = q != nullptr ? q->element_format().name : "fp32";
        }
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::shared_ptr<const engine::Quantizer> logits_quantizer(const engine::PrecisionPlan& plan,
                                                          const engine::QuantizerFactory& quantizers,
                                                          const engine::Config& c) {
  const auto spec = plan.resolve(Role::logits, -1, LayerKind::head, c.n_layers);
  if (!spec) return nullptr;
  if (spec->scaling == engine::Scaling::delayed) {
    throw SpecError(spec->origin + ": plan '" + plan.name +
                    "': role logits asks for delayed scaling, which training emulates only on the linear "
                    "layers' operands and the gradient roles; use scaling = \"current\"");
  }
  return std::shared_ptr<const engine::Quantizer>(quantizers.make(*spec));
}

void quantize_qkv(const BlockSite& s, std::uint64_t step, engine::RowMatrix& q, engine::RowMatrix& k,
                  engine::RowMatrix& v) {
  qkv(s, step, q, k, v);
}

void quantize_qkv(const BlockSite& s, std::uint64_t step, engine::RowMatrixD& q, engine::RowMatrixD& k,
                  engine::RowMatrixD& v) {
  qkv(s, step, q, k, v);
}

void quantize_scores(const BlockSite& s, std::uint64_t step, int head, bool probs, engine::RowMatrix& m) {
  quantize(probs ? s.probs : s.scores, s, probs ? Role::probs : Role::scores, LayerKind::attention,
           probs ? "probs" : "scores", step, probs ? kProbs : kScores, head, m);
}

void quantize_scores(const BlockSite& s, std::uint64_t step, int head, bool probs, engine::RowMatrixD& m) {
  quantize(probs ? s.probs : s.scores, s, probs ? Role::probs : Role::scores, LayerKind::attention,
           probs ? "probs" : "scores", step, probs ? kProbs : kScores, head, m);
}

void quantize_attn_output(const BlockSite& s, std::uint64_t step, engine::RowMatrix& x) {
  quantize(s.attn_output, s, Role::attn_output, LayerKind::attention, "attn_output", step, kAttnOutput, -1,
           x);
}

void quantize_attn_output(const BlockSite& s, std::uint64_t step, engine::RowMatrixD& x) {
  quantize(s.attn_output, s, Role::attn_output, LayerKind::attention, "attn_output", step, kAttnOutput, -1,
           x);
}

void quantize_attention_operands(const BlockSite& s, AttentionGemm g, std::uint64_t step, int head,
                                 engine::RowMatrix& a, engine::RowMatrix& b) {
  operands(s, g, step, head, a, b);
}

void quantize_attention_operands(const BlockSite& s, AttentionGemm g, std::uint64_t step, int head,
                                 engine::RowMatrixD& a, engine::RowMatrixD& b) {
  operands(s, g, step, head, a, b);
}

void quantize_attention_result(const BlockSite& s, AttentionGemm g, std::uint64_t step, int head,
                               engine::RowMatrix& c) {
  if (g == AttentionGemm::qk || g == AttentionGemm::pv) return;
  quantize(s.grad_activation, s, Role::grad_activation, LayerKind::attention, attention_gemm_name(g), step,
           kResults + static_cast<std::uint64_t>(g), head, c);
}

void quantize_attention_result(const BlockSite& s, AttentionGemm g, std::uint64_t step, int head,
                               engine::RowMatrixD& c) {
  if (g == AttentionGemm::qk || g == AttentionGemm::pv) return;
  quantize(s.grad_activation, s, Role::grad_activation, LayerKind::attention, attention_gemm_name(g), step,
           kResults + static_cast<std::uint64_t>(g), head, c);
}

void quantize_residual(const BlockSite& s, bool after_mlp, std::uint64_t step, engine::RowMatrix& x) {
  quantize(after_mlp ? s.residual_mlp : s.residual_attention, s, Role::residual,
           after_mlp ? LayerKind::mlp : LayerKind::attention, "residual", step,
           after_mlp ? kResidualMlp : kResidualAttention, -1, x);
}

void quantize_residual(const BlockSite& s, bool after_mlp, std::uint64_t step, engine::RowMatrixD& x) {
  quantize(after_mlp ? s.residual_mlp : s.residual_attention, s, Role::residual,
           after_mlp ? LayerKind::mlp : LayerKind::attention, "residual", step,
           after_mlp ? kResidualMlp : kResidualAttention, -1, x);
}

void quantize_mlp_hidden(const BlockSite& s, std::uint64_t step, engine::RowMatrix& x) {
  quantize(s.mlp_hidden, s, Role::mlp_hidden, LayerKind::mlp, "mlp_hidden", step, kMlpHidden, -1, x);
}

void quantize_mlp_hidden(const BlockSite& s, std::uint64_t step, engine::RowMatrixD& x) {
  quantize(s.mlp_hidden, s, Role::mlp_hidden, LayerKind::mlp, "mlp_hidden", step, kMlpHidden, -1, x);
}

namespace {
template <class M>
void logits(const engine::Quantizer* q, std::uint64_t step, M& x, RoleCounts* counts) {
  if (q == nullptr) return;
  engine::QuantPoint p;
  p.role = Role::logits;
  p.tensor = "logits";
  p.axis = 1;
  p.stream = mix(mix(0x6c6f67697473ULL ^ mix(step * 64 + kLogits)));
  apply_counting(*q, p, Role::logits, counts, x);
}
}  // namespace

void quantize_logits(const engine::Quantizer* q, std::uint64_t step, engine::RowMatrix& x,
                     RoleCounts* counts) {
  logits(q, step, x, counts);
}

void quantize_logits(const engine::Quantizer* q, std::uint64_t step, engine::RowMatrixD& x,
                     RoleCounts* counts) {
  logits(q, step, x, counts);
}

}  // namespace lpemu::train
