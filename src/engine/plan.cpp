#include "lpemu/engine/plan.hpp"

#include <algorithm>
#include <filesystem>

#include "io/toml.hpp"

#include "io/toml_util.hpp"
#include "lpemu/detail/named_registry.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/registry.hpp"

namespace lpemu::engine {
namespace {

using io::detail::show;
using io::detail::where;

[[noreturn]] void fail(std::string_view origin, const toml::node* node, std::string_view key,
                       const std::string& value, std::string_view expected) {
  throw SpecError(where(origin, node) + ": plan key '" + std::string(key) + "' = " + value + ": expected " +
                  std::string(expected));
}

std::vector<std::string> role_names() {
  std::vector<std::string> out;
  for (const Role r : kAllRoles) out.emplace_back(to_string(r));
  return out;
}

struct Parser {
  std::string_view origin;
  const QuantizerFactory& quantizers;
  const GemmFactory& gemms;
  format::ConvertOptions defaults;

  std::string string_of(const toml::node& n, std::string_view key, std::string_view expected) const {
    if (!n.is_string()) fail(origin, &n, key, show(n), expected);
    return *n.value<std::string>();
  }

  void read_options(const toml::table& t, std::string_view ctx, format::ConvertOptions& o,
                    bool allow_format) const {
    for (const auto& [k, v] : t) {
      const std::string key(k.str());
      const std::string full = std::string(ctx) + "." + key;
      if (key == "rounding") {
        try {
          o.rounding = format::parse_rounding(string_of(v, full, "a rounding mode name"));
        } catch (const SpecError& e) {
          fail(origin, &v, full, show(v), e.what());
        }
      } else if (key == "overflow") {
        try {
          o.overflow = format::parse_overflow(string_of(v, full, "\"saturate\" or \"native\""));
        } catch (const SpecError&) {
          fail(origin, &v, full, show(v), "\"saturate\" or \"native\"");
        }
      } else if (key == "seed") {
        if (!v.is_integer() || *v.value<std::int64_t>() < 0)
          fail(origin, &v, full, show(v), "an integer ≥ 0");
        o.seed = static_cast<std::uint64_t>(*v.value<std::int64_t>());
      } else if (key == "sr_bits") {
        if (!v.is_integer() || *v.value<std::int64_t>() < 1 || *v.value<std::int64_t>() > 32) {
          fail(origin, &v, full, show(v), "an integer in 1..32");
        }
        o.sr_bits = static_cast<int>(*v.value<std::int64_t>());
      } else if (key == "ftz" || key == "daz") {
        if (!v.is_boolean()) fail(origin, &v, full, show(v), "true or false");
        (key == "ftz" ? o.flush_subnormal_outputs : o.flush_subnormal_inputs) = *v.value<bool>();
      } else if (!(allow_format && key == "format")) {
        fail(origin, &v, full, "(unknown key)",
             allow_format ? "one of format, rounding, overflow, seed, sr_bits, ftz, daz"
                          : "one of rounding, overflow, seed, sr_bits, ftz, daz");
      }
    }
  }

  std::optional<QuantSpec> spec(const toml::node& v, std::string_view key) const {
    QuantSpec s;
    s.options = defaults;
    s.origin = where(origin, &v);
    const toml::node* name_node = &v;
    if (v.is_string()) {
      s.format = *v.value<std::string>();
    } else if (v.is_table()) {
      const toml::table& t = *v.as_table();
      name_node = t.get("format");
      if (name_node == nullptr) fail(origin, &v, std::string(key) + ".format", "(missing)", "a format name");
      s.format = string_of(*name_node, std::string(key) + ".format", "a format name");
      read_options(t, key, s.options, true);
    } else {
      fail(origin, &v, key, show(v), "a format name, \"none\", or a table { format = ..., rounding = ... }");
    }
    if (s.format == "none") return std::nullopt;
    if (!quantizers.knows(s.format)) {
      throw UnknownNameError(where(origin, name_node) + ": plan key '" + std::string(key) + "' = \"" +
                             s.format + "\": unknown format" +
                             lpemu::detail::closest_names_hint(s.format, quantizers.names()));
    }
    return s;
  }

  // `gemm = "D"` (or "none" = eigen), or `gemm = { datapath = "D", convert = true }`.
  GemmChoice gemm(const toml::node& v, std::string_view key) const {
    GemmChoice g;
    g.origin = where(origin, &v);
    const toml::node* name_node = &v;
    if (v.is_table()) {
      const toml::table& t = *v.as_table();
      for (const auto& [k2, v2] : t) {
        const std::string sub(k2.str());
        if (sub == "convert") {
          if (!v2.is_boolean()) fail(origin, &v2, std::string(key) + ".convert", show(v2), "true or false");
          g.convert = *v2.value<bool>();
        } else if (sub != "datapath") {
          fail(origin, &v2, std::string(key) + "." + sub, "(unknown key)", "one of datapath, convert");
        }
      }
      name_node = t.get("datapath");
      if (name_node == nullptr)
        fail(origin, &v, std::string(key) + ".datapath", "(missing)", "a GEMM datapath name");
    }
    const std::string name =
        string_of(*name_node, key, "a GEMM datapath name, \"none\", or { datapath = ..., convert = true }");
    g.datapath = name == "none" ? "eigen" : name;
    if (!gemms.knows(g.datapath)) {
      throw UnknownNameError(where(origin, name_node) + ": plan key '" + std::string(key) + "' = \"" + name +
                             "\": unknown gemm datapath" +
                             lpemu::detail::closest_names_hint(name, gemms.names()));
    }
    return g;
  }

  // Reads role entries of a table, skipping `skip` keys; returns the gemm entry if present.
  std::optional<GemmChoice> entries(const toml::table& t, std::string_view ctx,
                                    std::vector<PrecisionPlan::Entry>& out,
                                    std::initializer_list<std::string_view> skip,
                                    std::optional<GemmChoice>& attention_gemm) const {
    std::optional<GemmChoice> g;
    for (const auto& [k, v] : t) {
      const std::string key(k.str());
      if (std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
      const std::string full = std::string(ctx) + "." + key;
      if (key == "gemm") {
        g = gemm(v, full);
        continue;
      }
      if (key == "attention_gemm") {
        attention_gemm = gemm(v, full);
        if (attention_gemm->convert) {
          fail(origin, &v, full + ".convert", "true",
               "false: attention's operands enter as their role formats (q, k, v, kv_cache, probs); quantise "
               "them instead");
        }
        continue;
      }
      Role role{};
      if (!parse_role(key, role)) {
        std::vector<std::string> known = role_names();
        known.emplace_back("gemm");
        known.emplace_back("attention_gemm");
        throw SpecError(where(origin, &v) + ": plan key '" + full + "': unknown role" +
                        lpemu::detail::closest_names_hint(key, known) +
                        "; roles are weights, linear_input, q, k, v, kv_cache, scores, probs, attn_output, "
                        "mlp_hidden, residual, lm_head, lm_head_input, logits, expert_weights, expert_input, "
                        "expert_hidden, router_weights, router_input, router_logits, gemm, attention_gemm");
      }
      out.push_back({role, spec(v, full)});
    }
    return g;
  }
};

bool layer_selected(const std::vector<int>& layers, int layer, int n_layers) {
  if (layers.empty()) return true;
  for (const int l : layers) {
    if ((l >= 0 ? l : n_layers + l) == layer) return true;
  }
  return false;
}

// Whether override `o` applies at (layer, kind): the head only takes overrides with kind = "head".
bool override_applies(const PrecisionPlan::Override& o, int layer, LayerKind kind, int n_layers) {
  if (kind == LayerKind::head) return o.kind == LayerKind::head;
  if (o.kind == LayerKind::head) return false;
  return layer_selected(o.layers, layer, n_layers) && (!o.kind || *o.kind == kind);
}

}  // namespace

std::optional<QuantSpec> PrecisionPlan::resolve(Role role, int layer, LayerKind kind, int n_layers) const {
  std::optional<QuantSpec> out;
  bool set = false;
  for (const auto& e : roles) {
    if (e.role == role) out = e.spec, set = true;
  }
  for (const auto& o : overrides) {
    if (!override_applies(o, layer, kind, n_layers)) continue;
    for (const auto& e : o.entries) {
      if (e.role == role) out = e.spec, set = true;
    }
  }
  // Mixture-of-experts roles that no applicable entry names take their general role's entry.
  if (!set && fallback_role(role) != role) return resolve(fallback_role(role), layer, kind, n_layers);
  return out;
}

std::string PrecisionPlan::resolve_gemm(int layer, LayerKind kind, int n_layers) const {
  return resolve_gemm_site(layer, kind,
                           kind == LayerKind::head ? "output" : (kind == LayerKind::mlp ? "w1" : "wq"),
                           n_layers)
      .datapath;
}

GemmChoice PrecisionPlan::resolve_gemm_site(int layer, LayerKind kind, std::string_view site,
                                            int n_layers) const {
  constexpr std::string_view kLinear[] = {"wq", "wk",     "wv",     "wo",        "w1",        "w2",
                                          "w3", "output", "router", "expert_w1", "expert_w2", "expert_w3"};
  if (site == "qk" || site == "pv") {
    GemmChoice out = attention_gemm.value_or(GemmChoice{});
    if (kind != LayerKind::attention) return GemmChoice{};
    for (const auto& o : overrides) {
      if (o.attention_gemm && override_applies(o, layer, kind, n_layers)) out = *o.attention_gemm;
    }
    return out;
  }
  if (std::find(std::begin(kLinear), std::end(kLinear), site) == std::end(kLinear)) {
    throw SpecError("plan '" + name + "': GEMM site '" + std::string(site) +
                    "': expected one of wq, wk, wv, wo, w1, w2, w3, output, router, expert_w1, expert_w2, "
                    "expert_w3, qk, pv");
  }
  GemmChoice out = gemm.value_or(GemmChoice{});
  for (const auto& o : overrides) {
    if (o.gemm && override_applies(o, layer, kind, n_layers)) out = *o.gemm;
  }
  return out;
}

bool PrecisionPlan::is_reference() const {
  auto identity_gemm = [](const std::optional<GemmChoice>& g) {
    return !g || g->datapath == "eigen" || g->datapath == "fp32" || g->datapath == "native";
  };
  for (const auto& e : roles) {
    if (e.spec) return false;
  }
  if (!identity_gemm(gemm) || !identity_gemm(attention_gemm)) return false;
  for (const auto& o : overrides) {
    if (!identity_gemm(o.gemm) || !identity_gemm(o.attention_gemm)) return false;
    for (const auto& e : o.entries) {
      if (e.spec) return false;
    }
  }
  return true;
}

PrecisionPlan parse_plan_toml(std::string_view text, std::string_view origin,
                              const QuantizerFactory& quantizers, const GemmFactory& gemms) {
  const toml::table doc = io::detail::parse(text, origin);
  PrecisionPlan plan;
  plan.origin = std::string(origin);
  plan.name = std::filesystem::path(std::string(origin)).stem().string();
  Parser p{origin, quantizers, gemms, {}};
  if (const toml::node* d = doc.get("defaults")) {
    if (!d->is_table()) fail(origin, d, "defaults", show(*d), "a table of rounding, overflow, seed, ...");
    p.read_options(*d->as_table(), "defaults", p.defaults, false);
  }
  for (const auto& [k, v] : doc) {
    const std::string key(k.str());
    if (key == "name") {
      plan.name = p.string_of(v, key, "a string");
    } else if (key == "description") {
      plan.description = p.string_of(v, key, "a string");
    } else if (key == "compute") {
      const std::string c = p.string_of(v, key, "\"fp32\" or \"fp64\"");
      if (c != "fp32" && c != "fp64") fail(origin, &v, key, show(v), "\"fp32\" or \"fp64\"");
      plan.compute = c == "fp64" ? Compute::fp64 : Compute::fp32;
    } else if (key == "defaults") {
      continue;
    } else if (key == "roles") {
      if (!v.is_table()) fail(origin, &v, key, show(v), "a table mapping roles to formats");
      plan.gemm = p.entries(*v.as_table(), "roles", plan.roles, {}, plan.attention_gemm);
    } else if (key == "override") {
      if (!v.is_array_of_tables()) fail(origin, &v, key, show(v), "an array of tables [[override]]");
      for (const auto& item : *v.as_array()) {
        const toml::table& t = *item.as_table();
        PrecisionPlan::Override o;
        o.origin = where(origin, &item);
        if (const toml::node* l = t.get("layers")) {
          const auto add = [&](const toml::node& n) {
            if (n.is_integer()) {
              o.layers.push_back(static_cast<int>(*n.value<std::int64_t>()));
            } else if (n.is_string() && *n.value<std::string>() == "first") {
              o.layers.push_back(0);
            } else if (n.is_string() && *n.value<std::string>() == "last") {
              o.layers.push_back(-1);
            } else {
              fail(origin, &n, "override.layers", show(n),
                   "layer indices (negative count from the end), \"first\" or \"last\"");
            }
          };
          if (l->is_array()) {
            for (const auto& n : *l->as_array()) add(n);
          } else {
            add(*l);
          }
        }
        if (const toml::node* kn = t.get("kind")) {
          const std::string kind = p.string_of(*kn, "override.kind", "\"attention\", \"mlp\" or \"head\"");
          LayerKind lk{};
          if (!parse_layer_kind(kind, lk)) {
            fail(origin, kn, "override.kind", show(*kn), "\"attention\", \"mlp\" or \"head\"");
          }
          o.kind = lk;
        }
        o.gemm = p.entries(t, "override", o.entries, {"layers", "kind"}, o.attention_gemm);
        plan.overrides.push_back(std::move(o));
      }
    } else {
      fail(origin, &v, key, "(unknown key)",
           "one of name, description, compute, defaults, roles, [[override]]");
    }
  }
  return plan;
}

PrecisionPlan builtin_plan(std::string_view name) {
  PrecisionPlan p;
  p.name = std::string(name);
  p.origin = "builtin:" + std::string(name);
  if (name == "fp32") {
    p.description = "float32 reference: no quantisation, Eigen float GEMM";
  } else if (name == "fp64") {
    p.description = "float64 reference: computes in double, no quantisation";
    p.compute = Compute::fp64;
  } else {
    throw UnknownNameError("unknown built-in plan '" + std::string(name) + "': expected fp32 or fp64");
  }
  return p;
}

PrecisionPlan load_plan(const std::string& name_or_path, const QuantizerFactory& quantizers,
                        const GemmFactory& gemms, const std::vector<std::string>& search_dirs) {
  namespace fs = std::filesystem;
  fs::path file;
  if (fs::exists(name_or_path) && fs::is_regular_file(name_or_path)) {
    file = name_or_path;
  } else {
    std::vector<std::string> tried;
    for (const auto& d : search_dirs) {
      const fs::path c = fs::path(d) / "experiments" / "plans" / (name_or_path + ".toml");
      tried.push_back(c.string());
      if (fs::exists(c)) {
        file = c;
        break;
      }
    }
    if (file.empty()) {
      if (name_or_path == "fp32" || name_or_path == "fp64") return builtin_plan(name_or_path);
      std::string msg = "plan '" + name_or_path + "' is not a file, a built-in plan (fp32, fp64)";
      msg += tried.empty() ? std::string(" or a known name") : ", or any of:";
      for (const auto& t : tried) msg += " " + t;
      throw IoError(msg);
    }
  }
  return parse_plan_toml(lpemu::detail::read_spec_file(file, "plan"), file.string(), quantizers, gemms);
}

}  // namespace lpemu::engine
