// What a precision plan asks of training's attention and activation roles. Attention per head is
// six GEMMs in the NT form C = A·Bᵀ, each operand laid out [rows, contraction] so that block formats
// scale along the contraction axis of that GEMM (i: query tokens, t: key tokens, d: head dim):
//   qk  S  = Q·Kᵀ    A = Q  [i, d],  B = K  [t, d]   (contracts d)
//   pv  O  = P·V     A = P  [i, t],  B = Vᵀ [d, t]   (contracts t)
//   dp  dP = dO·Vᵀ   A = dO [i, d],  B = V  [t, d]   (contracts d)
//   dv  dV = Pᵀ·dO   A = Pᵀ [t, i],  B = dOᵀ [d, i]  (contracts i)
//   dq  dQ = dS·K    A = dS [i, t],  B = Kᵀ [d, t]   (contracts t)
//   dk  dK = dSᵀ·Q   A = dSᵀ [t, i], B = Qᵀ [d, i]   (contracts i)
// The forward pass quantises as inference does: Q by `q`; K by `k`, then `kv_cache`; V by `v`,
// then `kv_cache` (each along its features, as the cache holds it); the scores by `scores` and the
// probabilities by `probs` per head along t; the attention output by `attn_output`. In the backward
// GEMMs a saved forward tensor (Q, K, V, P) is re-quantised from its high-precision copy by its
// forward roles along that GEMM's contraction axis; the gradients dO and dS take `grad_output`, and
// the four results dP, dV, dQ, dK `grad_activation`. All six GEMMs run on the plan's
// `attention_gemm` datapath (default: lpemu's GEMM in the compute type). Quantisers are
// straight-through: the softmax backward reads the unquantised probabilities.
//
// The block's other activation roles are straight-through quantisations of the forward pass too:
// `residual` (the residual stream after each of the block's two additions), `mlp_hidden` (the
// MLP's activation output, the input of w2) and, outside the blocks, `logits`.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/quantizer.hpp"
#include "lpemu/train/range_counts.hpp"

namespace lpemu::train {

/// Attention's six per-head GEMMs in training (see the header comment).
enum class AttentionGemm : std::uint8_t { qk, pv, dp, dv, dq, dk };

/// The attention and activation roles of one block under a plan.
struct BlockSite {
  int layer = -1;
  std::shared_ptr<const engine::Quantizer> q, k, v, kv_cache, scores, probs, attn_output;
  std::shared_ptr<const engine::Quantizer> grad_output, grad_activation;  ///< at kind attention
  std::shared_ptr<const engine::Quantizer> residual_attention, residual_mlp, mlp_hidden;
  std::shared_ptr<const engine::Gemm> gemm;  ///< the attention_gemm datapath of all six GEMMs
  std::string gemm_name;
  /// The element format names the datapath reads each GEMM's A and B as ("" when Eigen).
  std::array<std::array<std::string, 2>, 6> formats;
  /// True when the plan quantises any attention role or sets attention_gemm here: attention then
  /// runs through the six GEMMs above; else through the unplanned loops.
  bool active = false;
  std::uint64_t stream = 0;  ///< this block's stochastic-rounding stream
  /// Where its quantisers add their range counts, per role (nullptr: not counted; a LinearPlan
  /// gives its blocks its own).
  std::shared_ptr<RoleCounts> counts;
};

/// Resolves the attention and activation roles of every block of a model with config `c`. Throws
/// SpecError naming the plan entry for delayed scaling of these roles, for an attention_gemm that
/// converts its operands, and for an operand format that cannot enter the attention datapath exactly
/// (block formats included: attention datapath operands take element formats).
std::vector<BlockSite> block_sites(const engine::PrecisionPlan& plan,
                                   const engine::QuantizerFactory& quantizers,
                                   const engine::GemmFactory& gemms, const engine::Config& c);

/// The logits quantiser of a plan (nullptr when `logits` is not set).
std::shared_ptr<const engine::Quantizer> logits_quantizer(const engine::PrecisionPlan& plan,
                                                          const engine::QuantizerFactory& quantizers,
                                                          const engine::Config& c);

/// The GEMM's name ("qk", "pv", "dp", "dv", "dq", "dk").
const char* attention_gemm_name(AttentionGemm g);

/// Quantises the forward Q, K and V of a block in place as inference does (header comment).
void quantize_qkv(const BlockSite& s, std::uint64_t step, engine::RowMatrix& q, engine::RowMatrix& k,
                  engine::RowMatrix& v);
/// The same in double.
void quantize_qkv(const BlockSite& s, std::uint64_t step, engine::RowMatrixD& q, engine::RowMatrixD& k,
                  engine::RowMatrixD& v);

/// Quantises one head's scores or probabilities [i, t] (role scores / probs) along t in place.
void quantize_scores(const BlockSite& s, std::uint64_t step, int head, bool probs, engine::RowMatrix& m);
/// The same in double.
void quantize_scores(const BlockSite& s, std::uint64_t step, int head, bool probs, engine::RowMatrixD& m);

/// Quantises the attention output [tokens, heads·d] (role attn_output) in place.
void quantize_attn_output(const BlockSite& s, std::uint64_t step, engine::RowMatrix& x);
/// The same in double.
void quantize_attn_output(const BlockSite& s, std::uint64_t step, engine::RowMatrixD& x);

/// Quantises the operands A and B of backward GEMM `g` (dp, dv, dq or dk) of head `head` in place,
/// both laid out [rows, contraction] from their high-precision values (header comment); qk and pv
/// are left as they are (their operands were quantised in the forward pass).
void quantize_attention_operands(const BlockSite& s, AttentionGemm g, std::uint64_t step, int head,
                                 engine::RowMatrix& a, engine::RowMatrix& b);
/// The same in double.
void quantize_attention_operands(const BlockSite& s, AttentionGemm g, std::uint64_t step, int head,
                                 engine::RowMatrixD& a, engine::RowMatrixD& b);

/// Quantises the result of backward GEMM `g` (grad_activation) in place; forward results unchanged.
void quantize_attention_result(const BlockSite& s, AttentionGemm g, std::uint64_t step, int head,
                               engine::RowMatrix& c);
/// The same in double.
void quantize_attention_result(const BlockSite& s, AttentionGemm g, std::uint64_t step, int head,
                               engine::RowMatrixD& c);

/// Quantises the residual stream after the block's attention (`after_mlp` false) or MLP addition.
void quantize_residual(const BlockSite& s, bool after_mlp, std::uint64_t step, engine::RowMatrix& x);
/// The same in double.
void quantize_residual(const BlockSite& s, bool after_mlp, std::uint64_t step, engine::RowMatrixD& x);

/// Quantises the MLP hidden activation (the input of w2) in place.
void quantize_mlp_hidden(const BlockSite& s, std::uint64_t step, engine::RowMatrix& x);
/// The same in double.
void quantize_mlp_hidden(const BlockSite& s, std::uint64_t step, engine::RowMatrixD& x);

/// Quantises the logits (role logits; `q` may be nullptr) in place, adding the range counts to
/// `counts` when given and enabled.
void quantize_logits(const engine::Quantizer* q, std::uint64_t step, engine::RowMatrix& x,
                     RoleCounts* counts = nullptr);
/// The same in double.
void quantize_logits(const engine::Quantizer* q, std::uint64_t step, engine::RowMatrixD& x,
                     RoleCounts* counts = nullptr);

}  // namespace lpemu::train
