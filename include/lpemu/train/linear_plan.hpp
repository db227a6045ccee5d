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
//
// With a plan's `wgrad_hadamard = B`, both wgrad operands are first multiplied along M by the same
// random orthogonal matrix Q = diag(blocks of H_B·D/√B) (H_B the Sylvester Hadamard matrix, D random
// ±1 signs per token drawn from the site's stream and the step), as the NVFP4 training recipe
// (NVIDIA, "Pretraining Large Language Models with NVFP4", 2025) does: (dYᵀQ)(XᵀQ)ᵀ = dYᵀX exactly
// in exact arithmetic, while outliers are spread over B tokens before quantisation. Tokens past the
// last whole block are left as they are.
//
// A role with scaling = "delayed" quantises each of its points at step s with the per-tensor FP32
// scale S = fp32(A · 2^margin / max_elem), A the largest finite amax that point saw at earlier steps
// (at most amax_history of them; with amax_compute_algo = "most_recent", the amax of the latest of
// them), elements fmt(x / S) saturated, times S; it then records this tensor's amax for step s.
// margin and amax_compute_algo are those of Transformer Engine's DelayedScaling recipe
// (transformer_engine/common/recipe/delayed_scaling.cu: scale = fp8_max · 2^−margin / amax). While the
// history is empty or A is 0, and for a tensor holding NaN or ±Inf (whose amax is not recorded), it quantises
// with current scaling.
#pragma once

#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/quantizer.hpp"
#include "lpemu/train/attention_plan.hpp"
#include "lpemu/train/range_counts.hpp"

namespace lpemu::train {

/// Delayed per-tensor scaling state of one linear site: for each of its eight quantisation points
/// (forward X and W, dgrad dY and Wᵀ, wgrad dYᵀ and Xᵀ, the results dX and dW) the history length
/// (0: not delayed), the element options and the amaxes of the last steps.
struct DelayedScaling {
  struct Point {
    int length = 0;
    int margin = 0;                                 ///< S = fp32(amax · 2^margin / max_elem)
    engine::AmaxAlgo algo = engine::AmaxAlgo::max;  ///< the window's largest amax, or the latest
    format::ConvertOptions options;
    std::vector<std::pair<std::uint64_t, double>> history;  ///< (step, amax), oldest first, length + 1
  };
  std::array<Point, 8> points;
  std::mutex mutex;
};

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
  /// Block size of the random Hadamard transform of the wgrad operands along M (0: none).
  int hadamard = 0;
  /// Delayed-scaling state (nullptr when no role of this site uses scaling = "delayed"); the
  /// delayed roles' quantisers above are their current-scaling ones, used while the history is empty.
  std::shared_ptr<DelayedScaling> delayed;
  std::uint64_t stream = 0;  ///< this site's stochastic-rounding stream (mixed with step and operand)
  std::shared_ptr<RoleCounts> counts;  ///< where its quantisers' range counts add up (the plan's)
};

/// Every linear site of a model under a plan, resolved once.
class LinearPlan {
 public:
  /// Resolves `plan` for a model with config `c`: every linear site, and every block's attention
  /// and activation roles (attention_plan.hpp). Throws lpemu::Error naming the plan and role when
  /// the plan quantises a role that training does not emulate yet (the mixture-of-experts roles),
  /// asks a GEMM to convert its operands, or puts on a datapath GEMM an operand that cannot enter it
  /// exactly (engine::datapath_operand_problem, with block scales along that GEMM's contraction
  /// axis) or that asks for delayed scaling.
  LinearPlan(const engine::PrecisionPlan& plan, const engine::QuantizerFactory& quantizers,
             const engine::GemmFactory& gemms, const engine::Config& c);
  /// The site of linear `tensor` ("wq" ... "w3") in block `layer`, or "output" (layer -1).
  const LinearSite& site(int layer, std::string_view tensor) const;
  /// The attention and activation roles of block `layer`.
  const BlockSite& block(int layer) const { return blocks_.at(static_cast<std::size_t>(layer)); }
  /// The logits quantiser (nullptr when the plan leaves the logits alone).
  const engine::Quantizer* logits() const { return logits_.get(); }
  /// The step whose stochastic rounding draws are made (mixed into every stream).
  void set_step(std::uint64_t step) { step_ = step; }
  /// The step set by set_step (0 at first).
  std::uint64_t step() const { return step_; }
  /// The factor the loss gradient is multiplied by before the backward pass (loss scaling; 1: none).
  void set_loss_scale(double scale) { loss_scale_ = scale; }
  /// The loss scale set by set_loss_scale (1 at first).
  double loss_scale() const { return loss_scale_; }
  /// The roles the plan quantises in training's forward and backward passes (the linear layers'
  /// operands and gradients, the attention and activation roles, logits), in declaration order:
  /// the roles range_counts() reports.
  const std::vector<engine::Role>& quantised_roles() const { return roles_; }
  /// Turns range counting on (the default) or off: a pass whose counts nobody reads (validation)
  /// skips the counting work. Counting never changes the quantised values.
  void set_counting(bool on);
  /// Zeroes the range counts.
  void reset_counts();
  /// Per role of quantised_roles(), the range counts of every tensor of that role quantised since
  /// reset_counts() (a weight counts in each GEMM it enters, re-quantised per GEMM).
  std::vector<RangeCounts> range_counts() const;
  /// Where the plan's quantisers (linear sites, blocks, logits) add their range counts.
  RoleCounts* counts() const { return counts_.get(); }

 private:
  std::vector<LinearSite> sites_;
  std::vector<engine::Role> roles_;
  std::shared_ptr<RoleCounts> counts_ = std::make_shared<RoleCounts>();
  std::vector<BlockSite> blocks_;
  std::shared_ptr<const engine::Quantizer> logits_;
  std::uint64_t step_ = 0;
  double loss_scale_ = 1;
};

/// The three GEMM passes of a linear layer, as names ("forward", "dgrad", "wgrad").
std::string_view pass_name(engine::GemmPass pass);

/// Multiplies the columns of `a` and `b` in place by Q (see the header comment) with block size
/// `block` and signs drawn from `seed`; a no-op for block 0.
void hadamard_columns(int block, std::uint64_t seed, engine::RowMatrix& a, engine::RowMatrix& b);
/// The same in double.
void hadamard_columns(int block, std::uint64_t seed, engine::RowMatrixD& a, engine::RowMatrixD& b);

/// The operands A and B of `pass` at `site` as they enter its GEMM: `a` and `b` laid out [rows,
/// contraction] (see the header comment), quantised in place by the pass's operand formats; for a
/// shared 2-D weight in the dgrad pass, `b` must already be the transposed quantised forward weight
/// (it is then left as it is). The wgrad pass applies the site's Hadamard transform first.
void quantize_operands(const LinearSite& site, engine::GemmPass pass, std::uint64_t step,
                       engine::RowMatrix& a, engine::RowMatrix& b);
/// The same in double.
void quantize_operands(const LinearSite& site, engine::GemmPass pass, std::uint64_t step,
                       engine::RowMatrixD& a, engine::RowMatrixD& b);
/// As quantize_operands, for a GEMM on a datapath: an operand in a block format is also encoded into
/// `ea` / `eb` (element codes, block scales along the contraction axis, tensor scale: what the
/// datapath reads; the values left in `a` / `b` are their decoding); an operand in an element format
/// or unquantised leaves its encoding empty (the datapath reads its values).
void encode_operands(const LinearSite& site, engine::GemmPass pass, std::uint64_t step, engine::RowMatrix& a,
                     engine::RowMatrix& b, engine::EncodedOperand& ea, engine::EncodedOperand& eb);
/// The same in double (encoded through float, as Quantizer::apply quantises double).
void encode_operands(const LinearSite& site, engine::GemmPass pass, std::uint64_t step, engine::RowMatrixD& a,
                     engine::RowMatrixD& b, engine::EncodedOperand& ea, engine::EncodedOperand& eb);
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
