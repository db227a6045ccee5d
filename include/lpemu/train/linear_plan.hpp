// What a precision plan asks of training's linear layers. Each linear layer is three GEMMs in the
// NT form C = A·Bᵀ, both operands laid out [rows, contraction] so that block formats scale along
// the contraction axis of that GEMM:
//   forward  Y  = X·Wᵀ    A = X  [M, K],  B = W  [N, K]   (contracts K, the in features)
//   dgrad    dX = dY·W    A = dY [M, N],  B = Wᵀ [K, N]   (contracts N, the out features)
//   wgrad    dW = dYᵀ·X   A = dYᵀ [N, M], B = Xᵀ [K, M]   (contracts M, the tokens)
// The forward operands take the formats of `weights` / `linear_input` (`lm_head` /
// `lm_head_input` for the classifier) in every GEMM they enter, re-quantised from the
// high-precision copy along that GEMM's contraction axis — except a weight in a 2-D tile format,
// quantised once so forward and data gradient share one quantised weight. dY takes `grad_output`,
// dX `grad_activation` and dW `grad_weights`. Quantisers are straight-through: the gradient of a
// quantised tensor is passed on unchanged.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/quantizer.hpp"

namespace lpemu::train {

/// The operand formats and GEMMs of one linear layer under a plan.
struct LinearSite {
  int layer = -1;                                    ///< block index, -1 for the classifier
  engine::LayerKind kind = engine::LayerKind::head;  ///< attention, mlp or head
  std::string tensor;                                ///< "wq", ..., "w3", "output"
  std::shared_ptr<const engine::Quantizer> weights, input, grad_output, grad_activation, grad_weights;
  std::array<std::shared_ptr<const engine::Gemm>, 3> gemm;  ///< forward, dgrad, wgrad
  std::array<std::string, 3> gemm_name;                     ///< their datapath names
  /// True when the weight format is a 2-D tile block format: forward and dgrad share one quantised W.
  bool shared_weight = false;
  std::uint64_t stream = 0;  ///< this site's stochastic-rounding stream (mixed with step and operand)
};

/// Every linear site of a model under a plan, resolved once.
class LinearPlan {
 public:
  /// Resolves `plan` for a model with config `c`. Throws lpemu::Error naming the plan and role when
  /// the plan quantises a role that training does not emulate yet (q, k, v, kv_cache, scores,
  /// probs, attn_output, mlp_hidden, residual, logits, the mixture-of-experts roles), sets
  /// attention_gemm, or asks a GEMM to convert its operands.
  LinearPlan(const engine::PrecisionPlan& plan, const engine::QuantizerFactory& quantizers,
             const engine::GemmFactory& gemms, const engine::Config& c);
  /// The site of linear `tensor` ("wq" ... "w3") in block `layer`, or "output" (layer -1).
  const LinearSite& site(int layer, std::string_view tensor) const;
  /// The step whose stochastic rounding draws are made (mixed into every stream).
  void set_step(std::uint64_t step) { step_ = step; }
  /// The step set by set_step (0 at first).
  std::uint64_t step() const { return step_; }

 private:
  std::vector<LinearSite> sites_;
  std::uint64_t step_ = 0;
};

/// The three GEMM passes of a linear layer, as names ("forward", "dgrad", "wgrad").
std::string_view pass_name(engine::GemmPass pass);

/// The operands A and B of `pass` at `site` as they enter its GEMM: `a` and `b` laid out [rows,
/// contraction] (see the header comment), quantised in place by the pass's operand formats; for a
/// shared 2-D weight in the dgrad pass, `b` must already be the transposed quantised forward weight
/// (it is then left as it is).
void quantize_operands(const LinearSite& site, engine::GemmPass pass, std::uint64_t step,
                       engine::RowMatrix& a, engine::RowMatrix& b);
/// The same in double.
void quantize_operands(const LinearSite& site, engine::GemmPass pass, std::uint64_t step,
                       engine::RowMatrixD& a, engine::RowMatrixD& b);
/// Quantises weight `w` [N, K] in place as the forward GEMM of `site` at `step` does (the dgrad
/// GEMM's weight too, transposed, when `site.shared_weight`).
void quantize_forward_weight(const LinearSite& site, std::uint64_t step, engine::RowMatrix& w);
/// The same in double.
void quantize_forward_weight(const LinearSite& site, std::uint64_t step, engine::RowMatrixD& w);
/// Quantises a GEMM result of `pass` in place: dX by grad_activation (dgrad), dW by grad_weights
/// (wgrad); forward outputs are left unchanged.
void quantize_result(const LinearSite& site, engine::GemmPass pass, std::uint64_t step, engine::RowMatrix& c);
/// The same in double.
void quantize_result(const LinearSite& site, engine::GemmPass pass, std::uint64_t step,
                     engine::RowMatrixD& c);

}  // namespace lpemu::train
