// Quantisation points and the pluggable quantisers and GEMM strategies a precision plan names.
// Element formats (lpemu::format) are built in; block formats and datapaths register their own
// providers with QuantizerFactory::add_provider and GemmFactory::add without engine changes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/engine/tensor.hpp"
#include "lpemu/format/format.hpp"
#include "lpemu/format/rounding.hpp"

namespace lpemu::format {
class Registry;
}
namespace lpemu::block {
class BlockRegistry;
}
namespace lpemu::datapath {
struct Datapath;
class DatapathRegistry;
}  // namespace lpemu::datapath

namespace lpemu::engine {

/// A tensor role that a plan can map to a format. Spelled as in plan files.
enum class Role {
  weights,         ///< weights of every linear layer inside blocks
  linear_input,    ///< the input of every linear layer inside blocks
  q,               ///< queries after RoPE
  k,               ///< keys after RoPE
  v,               ///< values
  kv_cache,        ///< keys and values as stored in the KV cache
  scores,          ///< scaled attention scores q·k/√d before softmax
  probs,           ///< softmax probabilities
  attn_output,     ///< concatenated head outputs (input of wo)
  mlp_hidden,      ///< FFN hidden activation (input of w2)
  residual,        ///< residual stream after each residual add
  lm_head,         ///< classifier weights
  lm_head_input,   ///< classifier input (after the final norm)
  logits,          ///< classifier output
  expert_weights,  ///< weights of every expert of a mixture-of-experts block (default: weights)
  expert_input,    ///< an expert's input, its tokens gathered (default: linear_input)
  expert_hidden,   ///< an expert's hidden activation, input of its w2 (default: mlp_hidden)
  router_weights,  ///< the router (gate) matrix of a mixture-of-experts block (default: weights)
  router_input,    ///< the router's input (default: linear_input)
  router_logits,   ///< the router's output, before softmax and top-k
  // Training roles (read only by training; an inference run never quantises them):
  grad_output,      ///< dY at each linear layer's output, operand of its dgrad and wgrad GEMMs
  grad_activation,  ///< the activation gradient dX flowing back out of each linear layer
  grad_weights,     ///< the weight gradient dW of each linear layer
  master_weights,   ///< the optimizer's high-precision copy of the weights
  optimizer_state,  ///< the optimizer's state (SGD momentum, AdamW moments)
  weight_update,    ///< the update the optimizer adds to the master weights
};

/// Every role in declaration order.
inline constexpr Role kAllRoles[] = {Role::weights,
                                     Role::linear_input,
                                     Role::q,
                                     Role::k,
                                     Role::v,
                                     Role::kv_cache,
                                     Role::scores,
                                     Role::probs,
                                     Role::attn_output,
                                     Role::mlp_hidden,
                                     Role::residual,
                                     Role::lm_head,
                                     Role::lm_head_input,
                                     Role::logits,
                                     Role::expert_weights,
                                     Role::expert_input,
                                     Role::expert_hidden,
                                     Role::router_weights,
                                     Role::router_input,
                                     Role::router_logits,
                                     Role::grad_output,
                                     Role::grad_activation,
                                     Role::grad_weights,
                                     Role::master_weights,
                                     Role::optimizer_state,
                                     Role::weight_update};

/// True for the training roles (grad_output ... weight_update), which only training reads.
constexpr bool is_training_role(Role r) { return r >= Role::grad_output; }

/// The role a mixture-of-experts role takes its entry from when a plan does not set it
/// (expert_weights, router_weights: weights; expert_input, router_input: linear_input;
/// expert_hidden: mlp_hidden); the role itself for every other role.
Role fallback_role(Role r);

/// The plan-file spelling of a role.
std::string_view to_string(Role r);
/// Parses a role name; nullptr-free: returns false if unknown.
bool parse_role(std::string_view text, Role& out);
/// The role spelled `text`; throws SpecError "role 'x': expected one of weights, linear_input, ...;
/// closest known names: ..." otherwise.
Role parse_role(std::string_view text);
/// Every role's plan-file spelling, in declaration order.
std::vector<std::string> role_names();

/// Which half of a block a tensor belongs to (for per-kind overrides); head = outside the blocks.
enum class LayerKind { attention, mlp, head };
/// The plan-file spelling of a layer kind.
std::string_view to_string(LayerKind k);
/// Parses "attention", "mlp" or "head" into `out`; false for any other text.
bool parse_layer_kind(std::string_view text, LayerKind& out);
/// The layer kind spelled `text`; throws SpecError listing "attention", "mlp" and "head" otherwise.
LayerKind parse_layer_kind(std::string_view text);

/// One place where a tensor is quantised: what it is and where it sits.
struct QuantPoint {
  Role role = Role::weights;
  int layer = -1;  ///< block index, -1 outside the blocks
  LayerKind kind = LayerKind::head;
  std::string_view tensor;  ///< e.g. "wq", "w1_w3_input", "scores"
  int head = -1;            ///< attention head for per-head tensors, else -1
  int axis = 1;             ///< the GEMM contraction axis of this tensor (block formats scale along it)
  std::uint64_t index_offset = 0;  ///< stochastic rounding: element index of element (0, 0)
  std::uint64_t stream = 0;        ///< mixed into the stochastic seed so that points use distinct streams
};

/// Per-tensor scaling recipe of an element format (FP8 training recipes of NVIDIA Transformer
/// Engine and torchao): none; current (one FP32 scale S = fp32(amax / max_elem) from this tensor's
/// amax, elements fmt(x / S) saturated, times S: the per-tensor block format rule); delayed (the same
/// with the amax replaced by the largest of the last `amax_history` amaxes of this quantisation
/// point, updated after use; training only).
enum class Scaling : std::uint8_t { none, current, delayed };
/// Which amax of the history delayed scaling uses (Transformer Engine's DelayedScaling
/// `amax_compute_algo`): the largest of the window, or the one recorded at the latest earlier step.
enum class AmaxAlgo : std::uint8_t { max, most_recent };
/// The plan-file spelling of an AmaxAlgo ("max", "most_recent").
std::string_view to_string(AmaxAlgo a);
/// The plan-file spelling of a Scaling ("none", "current", "delayed").
std::string_view to_string(Scaling s);

/// A format reference as written in a plan: name plus conversion options.
struct QuantSpec {
  std::string format;  ///< element or block format name
  format::ConvertOptions options;
  std::string origin;               ///< file:line of the entry, for messages
  Scaling scaling = Scaling::none;  ///< per-tensor scaling recipe (element formats only)
  int amax_history = 16;            ///< delayed scaling: amaxes kept per quantisation point (1..1024)
  /// Delayed scaling: the scale leaves 2^margin of headroom, S = fp32(amax · 2^margin / max_elem)
  /// (Transformer Engine's DelayedScaling `margin`; 0..32).
  int margin = 0;
  AmaxAlgo amax_algo = AmaxAlgo::max;  ///< delayed scaling: which amax of the history sets the scale

  /// Same format, options and scaling (`origin`, where the spec was written, is not compared).
  friend bool operator==(const QuantSpec& a, const QuantSpec& b) {
    return a.format == b.format && a.options == b.options && a.scaling == b.scaling &&
           (a.scaling != Scaling::delayed ||
            (a.amax_history == b.amax_history && a.margin == b.margin && a.amax_algo == b.amax_algo));
  }
};

/// The per-tensor block format that current scaling of element format `element` quantises with: an
/// FP32 scale over the whole tensor, scale rule amax_over_max (as the built-in fp8_e4m3_per_tensor).
block::BlockFormat per_tensor_format(const format::Format& element);

/// A GEMM operand [rows, K] as a quantisation point encoded it (blocks along K): element codes,
/// block scales and tensor scale from lpemu::block::encode, or element codes alone.
struct EncodedOperand {
  std::string format;                               ///< the plan's format name ("fp32": unquantised values)
  format::Format element;                           ///< the format of the codes
  std::shared_ptr<const block::BlockFormat> block;  ///< nullptr for an element format
  block::BlockTensor tensor;                        ///< codes (row-major [rows, K]), scales, tensor scale
  /// A GEMM strategy's prepared (packed) form of this operand, made on its first GEMM and reused
  /// while the operand lives (weights); tied to `tensor.codes`' storage, so a copy prepares anew,
  /// or, once a session released the codes (Gemm::prepare_weight), the operand's only form.
  mutable std::shared_ptr<const void> prepared;
};

/// Element codes of `x` in `element` (values must lie on its grid; checked, throws Error naming `what`).
EncodedOperand encode_values(const RowMatrix& x, const format::Format& element, std::string_view what);

/// Fake-quantises tensors in place (values stay float, on the format's grid).
/// Writes the codes of rows r0..r0+count-1 of a GEMM operand [rows, K] to `out`, [count, K] bytes.
/// Safe to call from several threads at once on disjoint rows.
using RowCodes8 = std::function<void(std::size_t r0, std::size_t count, std::uint8_t* out)>;

class Quantizer {
 public:
  virtual ~Quantizer() = default;
  /// The format name.
  virtual const std::string& name() const = 0;
  /// The element format of the codes (for a block format: its element format).
  virtual const format::Format& element_format() const = 0;
  /// The block format, or nullptr for an element format.
  virtual const block::BlockFormat* block_format() const { return nullptr; }
  /// Quantises `x` (a GEMM operand [rows, K], point axis 1) in place and returns its encoding;
  /// decode(encode) equals apply(), bit for bit.
  virtual EncodedOperand encode(RowMatrix& x, const QuantPoint& p) const = 0;
  /// Quantises a float tensor in place.
  virtual void apply(RowMatrix& x, const QuantPoint& p) const = 0;
  /// Quantises `in` into `out` (resized; the bits of apply() on a copy of `in`), one pass over
  /// `in` with no intermediate copy where the quantiser allows (default: copy, then apply()).
  virtual void apply(const RowMatrix& in, RowMatrix& out, const QuantPoint& p) const;
  /// The encoding of `x` (a GEMM operand [rows, K], point axis 1) without its codes, set in `out`,
  /// and a function that writes the codes of any of x's rows, one byte each: the codes encode()
  /// gives, x left unchanged (it must outlive the function). Empty (`out` untouched) where the
  /// quantiser has no such encoder (default; block formats, codes over 8 bits).
  virtual RowCodes8 row_codes8(const RowMatrix& x, const QuantPoint& p, EncodedOperand& out) const;
  /// Quantises a double tensor in place (default: through float, exact for formats within fp32).
  virtual void apply(RowMatrixD& x, const QuantPoint& p) const;
};

/// Creates quantisers by format name from registered providers (element formats built in).
class QuantizerFactory {
 public:
  /// Makes a quantiser for a spec whose format the provider knows.
  using Maker = std::function<std::unique_ptr<Quantizer>(const QuantSpec&)>;

  /// A factory that knows every element format of `formats` (the registry must outlive it).
  static QuantizerFactory with_element_formats(const format::Registry& formats);
  /// Every built-in kind of quantiser: the element formats of `formats` and the block formats of
  /// `blocks` (nullptr: built-ins plus LPEMU_FORMATS_PATH); the single place to register kinds.
  static QuantizerFactory standard(const format::Registry& formats,
                                   const block::BlockRegistry* blocks = nullptr);
  /// Adds a provider of names (e.g. block formats); later providers are searched first. `accepts`
  /// (default: membership in `names`) decides which names, aliases included, the provider makes.
  void add_provider(std::string kind, std::vector<std::string> names, Maker maker,
                    std::function<bool(std::string_view)> accepts = {});
  /// True if some provider knows `name`.
  bool knows(std::string_view name) const;
  /// Every known name, sorted.
  std::vector<std::string> names() const;
  /// A quantiser for `spec`; throws UnknownNameError with the closest names. Current scaling of an
  /// element format gives its per_tensor_format(); delayed scaling, which needs state across steps,
  /// and scaling of a block format throw SpecError naming the spec's origin.
  std::unique_ptr<Quantizer> make(const QuantSpec& spec) const;

 private:
  struct Provider {
    std::string kind;
    std::vector<std::string> names;
    Maker maker;
    std::function<bool(std::string_view)> accepts;
  };
  std::vector<Provider> providers_;
};

/// Where a GEMM sits (for datapath strategies and their hooks).
struct GemmPoint {
  int layer = -1;
  LayerKind kind = LayerKind::head;
  std::string_view tensor;    ///< "wq", ..., "output"
  std::string_view a_format;  ///< format A's values lie on (the plan's input format; "" = float)
  std::string_view b_format;  ///< format B's values lie on (the plan's weight format; "" = float)
  const EncodedOperand* a_operand = nullptr;  ///< A's encoding (datapath GEMMs; nullptr: from the values)
  const EncodedOperand* b_operand = nullptr;  ///< B's encoding (datapath GEMMs; nullptr: from the values)
};

/// Why operand side a (`a_side`) or b of `dp` cannot take codes of `element` with the scales of
/// `block` (nullptr: none) exactly; "" when it can. Exact entries: element values representable in
/// the datapath's input format; block scales along K of the datapath's scale format and block size;
/// per-tensor / per-row FP32 scales and an FP32 tensor scale (applied after accumulation).
std::string datapath_entry_problem(const datapath::Datapath& dp, bool a_side, const format::Format& element,
                                   const block::BlockFormat* block);
/// The one datapath-entry check of a quantised GEMM operand (inference sessions and training): why
/// the operand of side a (`a_side`) or b of `dp`, quantised by `q` (nullptr: unquantised fp32
/// values), cannot enter it exactly, as "operand A (ROLE) in format 'F' cannot enter datapath 'D'
/// exactly: WHY" (" (ROLE)" only for a non-empty `role`); "" when it can. With an empty
/// `block_refusal`, a block format's scales are checked against the datapath's
/// (datapath_entry_problem); otherwise the caller hands the datapath element codes only, and a block
/// format whose element format could enter is refused with WHY = `block_refusal`.
std::string datapath_operand_problem(const datapath::Datapath& dp, bool a_side, const Quantizer* q,
                                     std::string_view role, std::string_view block_refusal = {});
/// The format an explicit conversion to side a/b of `dp` quantises to: the datapath's block format
/// (input element, scale format and block size) on block-scaled datapaths, else the input element
/// format with an FP32 per-tensor scale (applied after accumulation).
block::BlockFormat conversion_format(const datapath::Datapath& dp, bool a_side);
/// A quantiser for `f` (as plan block formats are made), with `spec`'s rounding options.
std::unique_ptr<Quantizer> make_block_quantizer(const block::BlockFormat& f, const QuantSpec& spec);

/// Computes C = A · Bᵀ (A [m, k], B [n, k], C [m, n]): the accumulation datapath of a linear layer.
class Gemm {
 public:
  virtual ~Gemm() = default;
  /// The strategy's name (a datapath preset or "eigen").
  virtual const std::string& name() const = 0;
  /// C = A · Bᵀ in float. For a strategy with a datapath(), b may be empty (0×0) when p.b_operand
  /// holds B's encoding (a weight a session keeps only encoded): B is [layout.shape[0], K].
  virtual void nt(const RowMatrix& a, const RowMatrix& b, RowMatrix& c, const GemmPoint& p) const = 0;
  /// C = A · Bᵀ in double (default: through float).
  virtual void nt(const RowMatrixD& a, const RowMatrixD& b, RowMatrixD& c, const GemmPoint& p) const;
  /// The datapath this strategy emulates, or nullptr (Eigen).
  virtual const datapath::Datapath* datapath() const { return nullptr; }
  /// Prepares weight B [rows, K] (`b`'s prepared form) for the GEMMs of `site` now; true if that
  /// form holds all the strategy reads, so that its owner may release `b.tensor.codes` (default:
  /// nothing prepared, false).
  virtual bool prepare_weight(const EncodedOperand& b, std::size_t rows, std::size_t k,
                              std::string_view site) const {
    (void)b, (void)rows, (void)k, (void)site;
    return false;
  }
  /// As prepare_weight for an operand whose codes come from `codes` (Quantizer::row_codes8;
  /// `b.tensor.codes` empty), read in one pass: true if the prepared form then holds all the
  /// strategy reads. False (nothing prepared, `codes` not called) where the strategy does not
  /// prepare from such codes (default).
  virtual bool prepare_weight8(const EncodedOperand& b, const RowCodes8& codes, std::size_t rows,
                               std::size_t k, std::string_view site) const {
    (void)b, (void)codes, (void)rows, (void)k, (void)site;
    return false;
  }
};

/// The default GEMM (linear() of ops.hpp): float by lpemu's kernel, every output summed in ascending
/// k without FMA; double by Eigen in fixed tiles. Bit-identical for any thread count.
const Gemm& eigen_gemm();

/// A GEMM operand [rows, K] given as codes of `q`'s format (one per element, as floats), with, for
/// a block format, its scale codes in block order and its FP32 tensor scale; `values` receives the
/// decoded values. Throws Error naming `what` for a code or scale count that does not fit.
EncodedOperand operand_from_codes(const Quantizer& q, const RowMatrix& codes,
                                  std::span<const float> scale_codes, float tensor_scale, RowMatrix& values,
                                  std::string_view what);
/// C = A·Bᵀ (A [m, K], B [n, K]) on strategy `g`, operands entering as in a session: quantised
/// and encoded by `qa` / `qb` unless `ea` / `eb` already hold them (nullptr: fp32 values).
RowMatrix gemm_operands(const Gemm& g, RowMatrix a, RowMatrix b, const Quantizer* qa, const Quantizer* qb,
                        const EncodedOperand* ea = nullptr, const EncodedOperand* eb = nullptr);

/// GEMM strategies by name; "eigen" (also called "fp32", "native", "none") is built in, and builtin() also
/// holds one strategy per built-in datapath preset (lpemu::datapath).
class GemmFactory {
 public:
  /// Makes a strategy by name.
  using Maker = std::function<std::shared_ptr<const Gemm>()>;
  /// The built-in factory: "eigen" and every built-in datapath preset.
  static GemmFactory builtin();
  /// "eigen" and every datapath of `datapaths` (built-ins and user files).
  static GemmFactory with_datapaths(const datapath::DatapathRegistry& datapaths);
  /// Registers `dp` (copied) as a bit-exact GEMM strategy under its name.
  void add_datapath(const datapath::Datapath& dp);
  /// Registers a named strategy (e.g. a datapath preset).
  void add(std::string name, Maker maker);
  /// True if `name` is known.
  bool knows(std::string_view name) const;
  /// Every known name, sorted.
  std::vector<std::string> names() const;
  /// The strategy `name`; throws UnknownNameError with the closest names.
  std::shared_ptr<const Gemm> make(std::string_view name) const;

 private:
  std::vector<std::pair<std::string, Maker>> makers_;
};

}  // namespace lpemu::engine
