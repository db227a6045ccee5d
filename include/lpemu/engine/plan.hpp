// Precision plans: which format each tensor role is quantised to, per layer and layer kind, and
// which GEMM datapath each linear layer uses. Plans are TOML files (experiments/plans/, format in
// docs/plans-and-engine.md); `fp32` and `fp64` are built in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lpemu/engine/quantizer.hpp"

namespace lpemu::engine {

/// Which datapath runs one GEMM site, and whether the plan asks to convert operands that cannot
/// enter it exactly (`gemm = { datapath = "...", convert = true }`).
struct GemmChoice {
  std::string datapath = "eigen";  ///< a datapath name, or "eigen" (no datapath: Eigen in the compute type)
  bool convert = false;  ///< operands that do not enter exactly are converted (a named quantisation point)
  std::string origin;    ///< file:line of the entry that chose it ("" for the default)

  /// Same datapath and conversion (`origin` is not compared).
  friend bool operator==(const GemmChoice& a, const GemmChoice& b) {
    return a.datapath == b.datapath && a.convert == b.convert;
  }
};

/// Which of a linear layer's three GEMMs: forward X·Wᵀ (contracting the in features), data gradient
/// dY·W (contracting the out features) and weight gradient dYᵀ·X (contracting the tokens).
enum class GemmPass { forward, dgrad, wgrad };

/// The scalar type the engine computes in.
enum class Compute { fp32, fp64 };

/// The plan-file spelling of a compute type ("fp32", "fp64").
std::string_view to_string(Compute c);

/// Loss scaling of a training plan (FP16 mixed precision, Micikevicius et al. 2018, "Mixed
/// Precision Training"): the loss gradient is multiplied by the scale before the backward pass and
/// the gradients divided by it before the optimizer. Dynamic scaling follows PyTorch's
/// torch.amp.GradScaler (same defaults): a step whose gradients hold Inf/NaN is skipped and the scale
/// multiplied by backoff_factor; after growth_interval steps in a row without, by growth_factor.
struct LossScale {
  enum class Kind : std::uint8_t { none, fixed, dynamic };
  Kind kind = Kind::none;       ///< none, fixed ("static" in plan files) or dynamic
  double init_scale = 65536.0;  ///< the static scale, or the dynamic scale's first value
  double growth_factor = 2.0;   ///< dynamic: factor after growth_interval good steps
  double backoff_factor = 0.5;  ///< dynamic: factor after a step with Inf/NaN gradients
  int growth_interval = 2000;   ///< dynamic: good steps in a row before the scale grows

  /// Same kind and parameters.
  friend bool operator==(const LossScale&, const LossScale&) = default;
};

/// A precision plan. Resolution: the [roles] entry, then each matching [[override]] in file order.
/// Equality compares what a plan does: names, compute, entries (as sets: a table names each role
/// once) and GEMM choices, never where they were written (the `origin` fields).
class PrecisionPlan {
 public:
  /// A role assignment: the spec, or no spec (identity) when `format` is "none".
  struct Entry {
    Role role;
    std::optional<QuantSpec> spec;  ///< nullopt: leave the tensor unchanged

    friend bool operator==(const Entry&, const Entry&) = default;
  };
  /// An override block: selected layers (negative counts from the end; empty = all) and kind.
  struct Override {
    std::vector<int> layers;
    std::optional<LayerKind> kind;
    std::vector<Entry> entries;
    std::optional<GemmChoice> gemm;
    std::optional<GemmChoice> attention_gemm;
    std::optional<GemmChoice> dgrad_gemm;  ///< training: the data-gradient GEMMs dY·W
    std::optional<GemmChoice> wgrad_gemm;  ///< training: the weight-gradient GEMMs dYᵀ·X
    std::string origin;

    friend bool operator==(const Override& a, const Override& b);
  };

  std::string name = "fp32";
  std::string description;
  Compute compute = Compute::fp32;
  std::vector<Entry> roles;
  std::optional<GemmChoice> gemm;            ///< default GEMM strategy; nullopt = eigen
  std::optional<GemmChoice> attention_gemm;  ///< attention's QKᵀ and PV; nullopt = eigen
  std::optional<GemmChoice> dgrad_gemm;      ///< training's data-gradient GEMMs; nullopt = eigen
  std::optional<GemmChoice> wgrad_gemm;      ///< training's weight-gradient GEMMs; nullopt = eigen
  /// Training: block size of the random Hadamard transform of both weight-gradient GEMM operands
  /// along the token axis (a power of two, 2..256); 0 = none. Inference ignores it.
  int wgrad_hadamard = 0;
  /// Training: loss scaling (the plan's [loss_scale] table; kind none: no scaling).
  LossScale loss_scale;
  std::vector<Override> overrides;
  std::string origin;  ///< file the plan came from ("builtin:fp32" for built-ins)

  /// The spec for a role at (layer, kind) in a model of n_layers blocks; nullopt = identity. A
  /// mixture-of-experts role no applicable entry names resolves as its fallback_role().
  std::optional<QuantSpec> resolve(Role role, int layer, LayerKind kind, int n_layers) const;
  /// The GEMM strategy name at (layer, kind); "eigen" when unset.
  std::string resolve_gemm(int layer, LayerKind kind, int n_layers) const;
  /// The datapath that runs GEMM site `site` at (layer, kind) and whether conversion is asked for.
  /// Sites: the linear tensors "wq", "wk", "wv", "wo", "w1", "w2", "w3" (kind attention or mlp),
  /// "output" (the LM head, kind head, layer -1), a mixture-of-experts block's "router",
  /// "expert_w1", "expert_w2", "expert_w3" (kind mlp, key gemm), and attention's "qk" and "pv" (key
  /// attention_gemm). The [roles] entry, then each matching [[override]] entry in file order; the
  /// head takes [roles] gemm and overrides with kind = "head". Throws SpecError for another site.
  GemmChoice resolve_gemm_site(int layer, LayerKind kind, std::string_view site, int n_layers) const;
  /// The datapath of GEMM `pass` of linear site `site` (as resolve_gemm_site names them, qk and pv
  /// excepted): forward as resolve_gemm_site; dgrad and wgrad from the keys dgrad_gemm and
  /// wgrad_gemm, resolved like gemm, default "eigen" whatever `gemm` says.
  GemmChoice resolve_gemm_site(int layer, LayerKind kind, std::string_view site, int n_layers,
                               GemmPass pass) const;
  /// True when no role is quantised and every GEMM is the default (a pure reference plan).
  bool is_reference() const;

  friend bool operator==(const PrecisionPlan& a, const PrecisionPlan& b);
};

/// The plan TOML document of `p`, the exact inverse of parse_plan_toml: reading it gives a plan
/// equal to `p`. Every spec carries its own options (no [defaults] table): a format name alone
/// when its options are the defaults, else { format = ..., rounding = ..., ... }; layer
/// selectors as indices. With `table_prefix` ("plan.") the tables are written as
/// [plan.roles] / [[plan.override]], for a plan inside another document (an experiment's [[plan]]).
std::string to_toml(const PrecisionPlan& p, std::string_view table_prefix = {});

/// A layer selector of a plan file: "first" (0), "last" (-1) or an integer (negative counts
/// from the end); throws SpecError otherwise.
int parse_layer(std::string_view text);

// Named changes of a plan: each returns the plan changed as the words say.

/// `p` quantising `role` to `format` ("none": left unchanged) everywhere: the role's entries are
/// dropped from every override and [roles] sets it. `options` and `origin` go into the spec.
PrecisionPlan with_role_format(PrecisionPlan p, Role role, std::string format,
                               const format::ConvertOptions& options = {}, std::string origin = {});
/// `p` with [roles] gemm = `datapath` for every linear layer (no override keeps its own gemm);
/// attention's GEMMs are unchanged. `origin` says who asked (the command line, say).
PrecisionPlan with_gemm(PrecisionPlan p, std::string datapath, std::string origin = {});
/// `p` with an [[override]] (no layer or kind selector) running every block's linear layers on
/// `datapath`; the LM head keeps [roles] gemm.
PrecisionPlan with_block_gemm(PrecisionPlan p, std::string datapath);
/// `p` with an [[override]] for `layers` (indices, negative from the end) setting each of `roles`
/// to `format` and, when `gemm` is given, their GEMM.
PrecisionPlan with_layers(PrecisionPlan p, std::vector<int> layers, const std::vector<Role>& roles,
                          const std::string& format, std::optional<std::string> gemm = {});
/// The plan document `plan_toml` (a plan's tables as another document holds them, e.g. an
/// experiment's inline [[plan]], from `origin`) with name = `name`, as toml++ prints it. The
/// fields are not checked here: parse_plan_toml checks them where the plan is built.
std::string named_plan_toml(std::string_view plan_toml, std::string_view origin, const std::string& name);
/// `p` with every GEMM, attention's included, on the default (eigen) float accumulation.
PrecisionPlan without_gemms(PrecisionPlan p);
/// `p` with only `role` quantised (every other role and the linear-layer GEMMs at the reference;
/// attention_gemm kept).
PrecisionPlan only_role(PrecisionPlan p, Role role);
/// A plan quantising only `role`, only in block `layer` (-1: the LM head), as `p` resolves it
/// there in a model of `n_layers` blocks; every GEMM at the reference. nullopt when `p` does not
/// quantise the role there (or the role does not belong to that place: lm_head, lm_head_input and
/// logits only to the head, every other role only to blocks).
std::optional<PrecisionPlan> only_role_at(const PrecisionPlan& p, Role role, int layer, int n_layers);

/// Parses a plan document; `origin` names it in errors (file:line, key, value, expectation).
/// Format names are checked against `quantizers` and GEMM names against `gemms`.
PrecisionPlan parse_plan_toml(std::string_view text, std::string_view origin,
                              const QuantizerFactory& quantizers, const GemmFactory& gemms);
/// Loads a plan: "fp32"/"fp64" built-ins, a .toml path, or NAME found as experiments/plans/NAME.toml
/// under `search_dirs`; throws IoError/SpecError/UnknownNameError.
PrecisionPlan load_plan(const std::string& name_or_path, const QuantizerFactory& quantizers,
                        const GemmFactory& gemms, const std::vector<std::string>& search_dirs = {});
/// The built-in reference plan "fp32" or "fp64".
PrecisionPlan builtin_plan(std::string_view name);

}  // namespace lpemu::engine
