// Role and layer-kind names as plan files spell them, and the roles' fallbacks.
#include <string_view>

#include "lpemu/detail/names.hpp"
#include "lpemu/engine/quantizer.hpp"
#include "lpemu/error.hpp"

namespace lpemu::engine {
namespace {

constexpr std::string_view kRoleNames[] = {"weights",
                                           "linear_input",
                                           "q",
                                           "k",
                                           "v",
                                           "kv_cache",
                                           "scores",
                                           "probs",
                                           "attn_output",
                                           "mlp_hidden",
                                           "residual",
                                           "lm_head",
                                           "lm_head_input",
                                           "logits",
                                           "expert_weights",
                                           "expert_input",
                                           "expert_hidden",
                                           "router_weights",
                                           "router_input",
                                           "router_logits",
                                           "grad_output",
                                           "grad_activation",
                                           "grad_weights",
                                           "master_weights",
                                           "optimizer_state",
                                           "weight_update"};

}  // namespace

std::string_view to_string(Role r) { return kRoleNames[static_cast<std::size_t>(r)]; }

Role fallback_role(Role r) {
  switch (r) {
    case Role::expert_weights:
    case Role::router_weights: return Role::weights;
    case Role::expert_input:
    case Role::router_input: return Role::linear_input;
    case Role::expert_hidden: return Role::mlp_hidden;
    default: return r;
  }
}

std::vector<std::string> role_names() {
  std::vector<std::string> out;
  for (const Role r : kAllRoles) out.emplace_back(to_string(r));
  return out;
}

Role parse_role(std::string_view text) {
  Role r{};
  if (parse_role(text, r)) return r;
  const auto known = role_names();
  throw SpecError("role '" + std::string(text) + "': expected one of " + lpemu::detail::join_names(known) +
                  lpemu::detail::closest_names_hint(text, known));
}

bool parse_role(std::string_view text, Role& out) {
  for (const Role r : kAllRoles) {
    if (to_string(r) == text) {
      out = r;
      return true;
    }
  }
  return false;
}

namespace {
constexpr lpemu::detail::EnumName<LayerKind> kLayerKindNames[] = {
    {"attention", LayerKind::attention}, {"mlp", LayerKind::mlp}, {"head", LayerKind::head}};
}  // namespace

std::string_view to_string(LayerKind k) { return lpemu::detail::enum_name(kLayerKindNames, k); }

bool parse_layer_kind(std::string_view text, LayerKind& out) {
  const auto k = lpemu::detail::enum_value(kLayerKindNames, text);
  if (k) out = *k;
  return k.has_value();
}

LayerKind parse_layer_kind(std::string_view text) {
  if (const auto k = lpemu::detail::enum_value(kLayerKindNames, text)) return *k;
  throw SpecError("layer kind '" + std::string(text) + "': expected one of " +
                  lpemu::detail::join_names(lpemu::detail::enum_spellings(kLayerKindNames)));
}

}  // namespace lpemu::engine
