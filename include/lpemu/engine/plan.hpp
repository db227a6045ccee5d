// Precision plans: which format each tensor role is quantised to, per layer and layer kind, and
// which GEMM datapath each linear layer uses. Plans are TOML files (experiments/plans/, format in
// docs/plans-and-engine.md); `fp32` and `fp64` are built in.
#pragma once

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
};

/// The scalar type the engine computes in.
enum class Compute { fp32, fp64 };

/// A precision plan. Resolution: the [roles] entry, then each matching [[override]] in file order.
class PrecisionPlan {
 public:
  /// A role assignment: the spec, or no spec (identity) when `format` is "none".
  struct Entry {
    Role role;
    std::optional<QuantSpec> spec;  ///< nullopt: leave the tensor unchanged
  };
  /// An override block: selected layers (negative counts from the end; empty = all) and kind.
  struct Override {
    std::vector<int> layers;
    std::optional<LayerKind> kind;
    std::vector<Entry> entries;
    std::optional<GemmChoice> gemm;
    std::optional<GemmChoice> attention_gemm;
    std::string origin;
  };

  std::string name = "fp32";
  std::string description;
  Compute compute = Compute::fp32;
  std::vector<Entry> roles;
  std::optional<GemmChoice> gemm;            ///< default GEMM strategy; nullopt = eigen
  std::optional<GemmChoice> attention_gemm;  ///< attention's QKᵀ and PV; nullopt = eigen
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
  /// True when no role is quantised and every GEMM is the default (a pure reference plan).
  bool is_reference() const;
};

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
