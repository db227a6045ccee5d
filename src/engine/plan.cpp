#include "lpemu/engine/plan.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <sstream>

#include "format/enum_names.hpp"
#include "io/toml.hpp"

#include "io/toml_util.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/detail/named_registry.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/registry.hpp"

namespace lpemu::engine {
namespace {

using io::detail::TableReader;
using io::detail::where;

constexpr lpemu::detail::EnumName<Compute> kComputeNames[] = {{"fp32", Compute::fp32},
                                                              {"fp64", Compute::fp64}};
constexpr lpemu::detail::EnumName<Scaling> kScalingNames[] = {
    {"none", Scaling::none}, {"current", Scaling::current}, {"delayed", Scaling::delayed}};
constexpr lpemu::detail::EnumName<AmaxAlgo> kAmaxAlgoNames[] = {{"max", AmaxAlgo::max},
                                                                {"most_recent", AmaxAlgo::most_recent}};

// Entries as a set: a plan table names each role once, so order carries no meaning.
std::vector<PrecisionPlan::Entry> sorted(std::vector<PrecisionPlan::Entry> es) {
  std::stable_sort(es.begin(), es.end(), [](const auto& a, const auto& b) { return a.role < b.role; });
  return es;
}

std::string spec_text(const std::optional<QuantSpec>& spec) {
  using io::detail::TomlWriter;
  if (!spec) return TomlWriter::quote("none");
  const format::ConvertOptions& o = spec->options;
  const format::ConvertOptions d{};
  if (o.rounding == d.rounding && o.overflow == d.overflow && o.seed == d.seed && o.sr_bits == d.sr_bits &&
      o.flush_subnormal_outputs == d.flush_subnormal_outputs &&
      o.flush_subnormal_inputs == d.flush_subnormal_inputs && spec->scaling == Scaling::none)
    return TomlWriter::quote(spec->format);
  std::vector<std::pair<std::string, std::string>> kv{{"format", TomlWriter::quote(spec->format)}};
  if (o.rounding != d.rounding) kv.emplace_back("rounding", TomlWriter::quote(format::to_string(o.rounding)));
  if (o.overflow != d.overflow) kv.emplace_back("overflow", TomlWriter::quote(format::to_string(o.overflow)));
  if (o.seed != d.seed) kv.emplace_back("seed", std::to_string(o.seed));
  if (o.sr_bits != d.sr_bits) kv.emplace_back("sr_bits", std::to_string(o.sr_bits));
  if (o.flush_subnormal_outputs) kv.emplace_back("ftz", "true");
  if (o.flush_subnormal_inputs) kv.emplace_back("daz", "true");
  if (spec->scaling != Scaling::none) kv.emplace_back("scaling", TomlWriter::quote(to_string(spec->scaling)));
  if (spec->scaling == Scaling::delayed) {
    kv.emplace_back("amax_history", std::to_string(spec->amax_history));
    if (spec->margin != 0) kv.emplace_back("margin", std::to_string(spec->margin));
    if (spec->amax_algo != AmaxAlgo::max)
      kv.emplace_back("amax_compute_algo", TomlWriter::quote(to_string(spec->amax_algo)));
  }
  return TomlWriter::inline_table(kv);
}

std::string gemm_text(const GemmChoice& g) {
  using io::detail::TomlWriter;
  if (!g.convert) return TomlWriter::quote(g.datapath);
  return TomlWriter::inline_table({{"datapath", TomlWriter::quote(g.datapath)}, {"convert", "true"}});
}

// The GEMM keys of a [roles] table or an [[override]]: gemm, attention_gemm, dgrad_gemm, wgrad_gemm.
struct GemmKeys {
  std::optional<GemmChoice>* gemm;
  std::optional<GemmChoice>* attention_gemm;
  std::optional<GemmChoice>* dgrad_gemm;
  std::optional<GemmChoice>* wgrad_gemm;
};

void write_entries(io::detail::TomlWriter& w, const std::vector<PrecisionPlan::Entry>& entries,
                   const std::optional<GemmChoice>& gemm, const std::optional<GemmChoice>& attention_gemm,
                   const std::optional<GemmChoice>& dgrad_gemm, const std::optional<GemmChoice>& wgrad_gemm) {
  // In key order, as a table holds them, so that the text does not depend on the order of changes.
  std::vector<const PrecisionPlan::Entry*> by_name;
  for (const auto& e : entries) by_name.push_back(&e);
  std::stable_sort(by_name.begin(), by_name.end(),
                   [](const auto* a, const auto* b) { return to_string(a->role) < to_string(b->role); });
  for (const auto* e : by_name) w.raw(to_string(e->role), spec_text(e->spec));
  if (gemm) w.raw("gemm", gemm_text(*gemm));
  if (attention_gemm) w.raw("attention_gemm", gemm_text(*attention_gemm));
  if (dgrad_gemm) w.raw("dgrad_gemm", gemm_text(*dgrad_gemm));
  if (wgrad_gemm) w.raw("wgrad_gemm", gemm_text(*wgrad_gemm));
}

struct Parser {
  std::string_view origin;
  const QuantizerFactory& quantizers;
  const GemmFactory& gemms;
  format::ConvertOptions defaults;

  // Conversion options (rounding, overflow, ...) of a table; `allow_format` for a role's own table.
  static void read_options(const TableReader& r, format::ConvertOptions& o, bool allow_format) {
    if (allow_format) {
      r.only({"format", "rounding", "overflow", "seed", "sr_bits", "ftz", "daz", "scaling", "amax_history",
              "margin", "amax_compute_algo"});
    } else {
      r.only({"rounding", "overflow", "seed", "sr_bits", "ftz", "daz"});
    }
    if (const auto m = r.opt_choice("rounding", format::detail::kRoundingNames)) o.rounding = *m;
    if (const auto v = r.opt_choice("overflow", format::detail::kOverflowNames)) o.overflow = *v;
    if (const auto v = r.opt_integer("seed", 0, std::numeric_limits<std::int64_t>::max(), "an integer ≥ 0"))
      o.seed = static_cast<std::uint64_t>(*v);
    if (const auto v = r.opt_integer("sr_bits", 1, 32)) o.sr_bits = static_cast<int>(*v);
    o.flush_subnormal_outputs = r.boolean("ftz", o.flush_subnormal_outputs);
    o.flush_subnormal_inputs = r.boolean("daz", o.flush_subnormal_inputs);
  }

  // The entry `key` of table `r`: a format name, "none", or { format = ..., rounding = ... }.
  std::optional<QuantSpec> spec(const TableReader& r, std::string_view key) const {
    const toml::node& v = *r.node(key);
    QuantSpec s;
    s.options = defaults;
    s.origin = where(origin, &v);
    const toml::node* name_node = &v;
    std::string name_field = r.field(key);
    if (v.is_string()) {
      s.format = *v.value<std::string>();
    } else if (v.is_table()) {
      const TableReader t = r.sub(key);
      read_options(t, s.options, true);
      name_node = t.node("format");
      name_field = t.field("format");
      if (name_node == nullptr || !name_node->is_string()) t.fail("format", "a format name");
      s.format = *name_node->value<std::string>();
    } else {
      r.fail(key, "a format name, \"none\", or a table { format = ..., rounding = ... }");
    }
    if (s.format == "none") return std::nullopt;
    if (!quantizers.knows(s.format)) {
      throw UnknownNameError(io::detail::field_message(
          origin, name_node, name_field, '"' + s.format + '"',
          "a known format" + lpemu::detail::closest_names_hint(s.format, quantizers.names())));
    }
    if (v.is_table()) scaling(r.sub(key), s);
    return s;
  }

  // The per-tensor scaling keys `scaling` and `amax_history` of a role table into `s`.
  void scaling(const TableReader& t, QuantSpec& s) const {
    s.scaling = t.choice("scaling", Scaling::none, kScalingNames);
    if (const auto h = t.opt_integer("amax_history", 1, 1024)) {
      if (s.scaling != Scaling::delayed) t.fail("amax_history", "absent unless scaling = \"delayed\"");
      s.amax_history = static_cast<int>(*h);
    }
    // Transformer Engine's DelayedScaling margin and amax_compute_algo (transformer_engine/common/
    // recipe/delayed_scaling.cu): delayed scaling only.
    if (const auto m = t.opt_integer("margin", 0, 32)) {
      if (s.scaling != Scaling::delayed) t.fail("margin", "absent unless scaling = \"delayed\"");
      s.margin = static_cast<int>(*m);
    }
    if (const auto a = t.opt_choice("amax_compute_algo", kAmaxAlgoNames)) {
      if (s.scaling != Scaling::delayed) t.fail("amax_compute_algo", "absent unless scaling = \"delayed\"");
      s.amax_algo = *a;
    }
    if (s.scaling == Scaling::none) return;
    QuantSpec plain = s;
    plain.scaling = Scaling::none;
    if (quantizers.make(plain)->block_format() != nullptr) {
      t.fail("scaling", '"' + std::string(to_string(s.scaling)) + '"',
             "\"none\" for block format '" + s.format + "', which has its own scales");
    }
  }

  // The entry `key` of table `r`: `gemm = "D"` (or "none" = eigen), or `{ datapath = "D", convert = true }`.
  GemmChoice gemm(const TableReader& r, std::string_view key) const {
    const toml::node& v = *r.node(key);
    GemmChoice g;
    g.origin = where(origin, &v);
    const toml::node* name_node = &v;
    std::string name_field = r.field(key);
    if (v.is_table()) {
      const TableReader t = r.sub(key);
      t.only({"datapath", "convert"});
      g.convert = t.boolean("convert", false);
      name_node = t.node("datapath");
      name_field = t.field("datapath");
      if (name_node == nullptr || !name_node->is_string()) t.fail("datapath", "a GEMM datapath name");
    } else if (!v.is_string()) {
      r.fail(key, "a GEMM datapath name, \"none\", or { datapath = ..., convert = true }");
    }
    const std::string name = *name_node->value<std::string>();
    g.datapath = datapath::names_float_gemm(name) ? std::string(datapath::kFloatGemm) : name;
    if (!gemms.knows(g.datapath)) {
      throw UnknownNameError(io::detail::field_message(
          origin, name_node, name_field, '"' + name + '"',
          "a known GEMM datapath" + lpemu::detail::closest_names_hint(name, gemms.names())));
    }
    return g;
  }

  // Reads the role entries of table `r` into `out` and its GEMM keys into `g`, skipping `skip` keys.
  void entries(const TableReader& r, std::vector<PrecisionPlan::Entry>& out,
               std::initializer_list<std::string_view> skip, const GemmKeys& g) const {
    if (r.table() == nullptr) return;
    for (const auto& [k, v] : *r.table()) {
      const std::string key(k.str());
      if (std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
      if (key == "gemm") {
        *g.gemm = gemm(r, key);
        continue;
      }
      if (key == "dgrad_gemm") {
        *g.dgrad_gemm = gemm(r, key);
        continue;
      }
      if (key == "wgrad_gemm") {
        *g.wgrad_gemm = gemm(r, key);
        continue;
      }
      if (key == "attention_gemm") {
        *g.attention_gemm = gemm(r, key);
        if ((*g.attention_gemm)->convert) {
          r.sub(key).fail(
              "convert",
              "false: attention's operands enter as their role formats (q, k, v, kv_cache, probs); "
              "quantise them instead");
        }
        continue;
      }
      Role role{};
      if (!parse_role(key, role)) {
        std::vector<std::string> known = role_names();
        known.emplace_back("gemm");
        known.emplace_back("attention_gemm");
        known.emplace_back("dgrad_gemm");
        known.emplace_back("wgrad_gemm");
        r.fail(key, "a known role (" + lpemu::detail::join_names(known) + ")" +
                        lpemu::detail::closest_names_hint(key, known));
      }
      out.push_back({role, spec(r, key)});
    }
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

GemmChoice PrecisionPlan::resolve_gemm_site(int layer, LayerKind kind, std::string_view site, int n_layers,
                                            GemmPass pass) const {
  if (pass == GemmPass::forward || site == "qk" || site == "pv")
    return resolve_gemm_site(layer, kind, site, n_layers);
  resolve_gemm_site(layer, kind, site, n_layers);  // checks the site name
  std::optional<GemmChoice> PrecisionPlan::*top =
      pass == GemmPass::dgrad ? &PrecisionPlan::dgrad_gemm : &PrecisionPlan::wgrad_gemm;
  std::optional<GemmChoice> Override::*key =
      pass == GemmPass::dgrad ? &Override::dgrad_gemm : &Override::wgrad_gemm;
  GemmChoice out = (this->*top).value_or(GemmChoice{});
  for (const auto& o : overrides) {
    if ((o.*key) && override_applies(o, layer, kind, n_layers)) out = *(o.*key);
  }
  return out;
}

bool PrecisionPlan::is_reference() const {
  auto identity_gemm = [](const std::optional<GemmChoice>& g) {
    return !g || datapath::names_float_gemm(g->datapath);
  };
  if (wgrad_hadamard != 0 || loss_scale.kind != LossScale::Kind::none) return false;
  for (const auto& e : roles) {
    if (e.spec) return false;
  }
  if (!identity_gemm(gemm) || !identity_gemm(attention_gemm) || !identity_gemm(dgrad_gemm) ||
      !identity_gemm(wgrad_gemm))
    return false;
  for (const auto& o : overrides) {
    if (!identity_gemm(o.gemm) || !identity_gemm(o.attention_gemm) || !identity_gemm(o.dgrad_gemm) ||
        !identity_gemm(o.wgrad_gemm))
      return false;
    for (const auto& e : o.entries) {
      if (e.spec) return false;
    }
  }
  return true;
}

constexpr lpemu::detail::EnumName<LossScale::Kind> kLossScaleKinds[] = {
    {"none", LossScale::Kind::none},
    {"static", LossScale::Kind::fixed},
    {"dynamic", LossScale::Kind::dynamic}};

// A plan's [loss_scale] table: kind "static" or "dynamic" and torch.amp.GradScaler's parameters.
LossScale read_loss_scale(const TableReader& t) {
  LossScale s;
  t.only({"kind", "init_scale", "growth_factor", "backoff_factor", "growth_interval"});
  const auto kind = t.opt_choice("kind", kLossScaleKinds);
  if (!kind) t.fail("kind", "\"static\" or \"dynamic\"");
  s.kind = *kind;
  const double huge = std::numeric_limits<double>::max();
  s.init_scale = t.number("init_scale", s.init_scale, 0x1p-126, huge, "a positive scale");
  s.growth_factor = t.number("growth_factor", s.growth_factor, 1.0, huge, "a factor >= 1");
  s.backoff_factor = t.number("backoff_factor", s.backoff_factor, 0x1p-126, 1.0, "a factor in (0, 1]");
  s.growth_interval =
      static_cast<int>(t.integer("growth_interval", s.growth_interval, 1, 1 << 30, "a step count >= 1"));
  return s;
}

PrecisionPlan parse_plan_toml(std::string_view text, std::string_view origin,
                              const QuantizerFactory& quantizers, const GemmFactory& gemms) {
  const toml::table doc = io::detail::parse(text, origin);
  const TableReader top(doc, origin);
  top.only(
      {"name", "description", "compute", "wgrad_hadamard", "loss_scale", "defaults", "roles", "override"});
  PrecisionPlan plan;
  plan.origin = std::string(origin);
  plan.name = top.str("name", std::filesystem::path(std::string(origin)).stem().string());
  plan.description = top.str("description");
  plan.compute = top.choice("compute", Compute::fp32, kComputeNames);
  constexpr std::string_view kHadamard = "0 (none) or a power of two in 2..256 (the transform's block size)";
  const auto h = top.integer("wgrad_hadamard", 0, 0, 256, kHadamard);
  if (h == 1 || (h & (h - 1)) != 0) top.fail("wgrad_hadamard", std::to_string(h), kHadamard);
  plan.wgrad_hadamard = static_cast<int>(h);
  if (top.has("loss_scale")) plan.loss_scale = read_loss_scale(top.sub("loss_scale"));
  Parser p{origin, quantizers, gemms, {}};
  Parser::read_options(top.sub("defaults"), p.defaults, false);
  p.entries(top.sub("roles"), plan.roles, {},
            {&plan.gemm, &plan.attention_gemm, &plan.dgrad_gemm, &plan.wgrad_gemm});
  for (const TableReader& t : top.tables("override")) {
    PrecisionPlan::Override o;
    o.origin = where(origin, t.table());
    if (const toml::node* l = t.node("layers")) {
      const auto add = [&](const toml::node& n) {
        if (n.is_integer()) {
          o.layers.push_back(static_cast<int>(*n.value<std::int64_t>()));
        } else if (n.is_string() &&
                   (*n.value<std::string>() == "first" || *n.value<std::string>() == "last")) {
          o.layers.push_back(parse_layer(*n.value<std::string>()));
        } else {
          t.fail_at(n, "layers", "layer indices (negative count from the end), \"first\" or \"last\"");
        }
      };
      if (l->is_array()) {
        for (const auto& n : *l->as_array()) add(n);
      } else {
        add(*l);
      }
    }
    if (const auto kind = t.opt_str("kind")) {
      LayerKind lk{};
      if (!parse_layer_kind(*kind, lk)) t.fail("kind", "\"attention\", \"mlp\" or \"head\"");
      o.kind = lk;
    }
    p.entries(t, o.entries, {"layers", "kind"}, {&o.gemm, &o.attention_gemm, &o.dgrad_gemm, &o.wgrad_gemm});
    plan.overrides.push_back(std::move(o));
  }
  return plan;
}

std::string_view to_string(Compute c) { return lpemu::detail::enum_name(kComputeNames, c); }

bool operator==(const PrecisionPlan::Override& a, const PrecisionPlan::Override& b) {
  return a.layers == b.layers && a.kind == b.kind && sorted(a.entries) == sorted(b.entries) &&
         a.gemm == b.gemm && a.attention_gemm == b.attention_gemm && a.dgrad_gemm == b.dgrad_gemm &&
         a.wgrad_gemm == b.wgrad_gemm;
}

bool operator==(const PrecisionPlan& a, const PrecisionPlan& b) {
  return a.name == b.name && a.description == b.description && a.compute == b.compute &&
         a.wgrad_hadamard == b.wgrad_hadamard && a.loss_scale == b.loss_scale &&
         sorted(a.roles) == sorted(b.roles) && a.gemm == b.gemm && a.attention_gemm == b.attention_gemm &&
         a.dgrad_gemm == b.dgrad_gemm && a.wgrad_gemm == b.wgrad_gemm && a.overrides == b.overrides;
}

std::string to_toml(const PrecisionPlan& p, std::string_view table_prefix) {
  io::detail::TomlWriter w;
  const std::string prefix(table_prefix);
  w.str("name", p.name).str_if("description", p.description).str("compute", to_string(p.compute));
  if (p.wgrad_hadamard != 0) w.integer("wgrad_hadamard", p.wgrad_hadamard);
  if (p.loss_scale.kind != LossScale::Kind::none) {
    const LossScale& l = p.loss_scale;
    w.table(prefix + "loss_scale")
        .str("kind", lpemu::detail::enum_name(kLossScaleKinds, l.kind))
        .number("init_scale", l.init_scale);
    if (l.kind == LossScale::Kind::dynamic) {
      w.number("growth_factor", l.growth_factor)
          .number("backoff_factor", l.backoff_factor)
          .integer("growth_interval", l.growth_interval);
    }
  }
  if (!p.roles.empty() || p.gemm || p.attention_gemm || p.dgrad_gemm || p.wgrad_gemm) {
    w.table(prefix + "roles");
    write_entries(w, p.roles, p.gemm, p.attention_gemm, p.dgrad_gemm, p.wgrad_gemm);
  }
  for (const auto& o : p.overrides) {
    w.array_table(prefix + "override");
    if (!o.layers.empty()) w.integers("layers", o.layers);
    if (o.kind) w.str("kind", to_string(*o.kind));
    write_entries(w, o.entries, o.gemm, o.attention_gemm, o.dgrad_gemm, o.wgrad_gemm);
  }
  return w.text();
}

int parse_layer(std::string_view text) {
  if (text == "first") return 0;
  if (text == "last") return -1;
  int v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc() && ptr == text.data() + text.size() && !text.empty()) return v;
  throw SpecError("layer '" + std::string(text) +
                  "': expected a layer index (negative counts from the end), \"first\" or \"last\"");
}

PrecisionPlan with_role_format(PrecisionPlan p, Role role, std::string format,
                               const format::ConvertOptions& options, std::string origin) {
  const auto drop = [&](std::vector<PrecisionPlan::Entry>& es) {
    es.erase(std::remove_if(es.begin(), es.end(), [&](const auto& e) { return e.role == role; }), es.end());
  };
  drop(p.roles);
  for (auto& o : p.overrides) drop(o.entries);
  std::optional<QuantSpec> spec;
  if (format != "none") {
    spec.emplace();
    spec->format = std::move(format);
    spec->options = options;
    spec->origin = std::move(origin);
  }
  p.roles.push_back({role, std::move(spec)});
  return p;
}

PrecisionPlan with_gemm(PrecisionPlan p, std::string datapath, std::string origin) {
  p.gemm = GemmChoice{std::move(datapath), false, std::move(origin)};
  for (auto& o : p.overrides) o.gemm.reset();
  return p;
}

PrecisionPlan with_block_gemm(PrecisionPlan p, std::string datapath) {
  PrecisionPlan::Override o;
  o.gemm = GemmChoice{std::move(datapath), false, {}};
  p.overrides.push_back(std::move(o));
  return p;
}

PrecisionPlan with_layers(PrecisionPlan p, std::vector<int> layers, const std::vector<Role>& roles,
                          const std::string& format, std::optional<std::string> gemm) {
  PrecisionPlan::Override o;
  o.layers = std::move(layers);
  for (const Role r : roles) {
    std::optional<QuantSpec> spec;
    if (format != "none") {
      spec.emplace();
      spec->format = format;
    }
    o.entries.erase(
        std::remove_if(o.entries.begin(), o.entries.end(), [&](const auto& e) { return e.role == r; }),
        o.entries.end());
    o.entries.push_back({r, std::move(spec)});
  }
  if (gemm) o.gemm = GemmChoice{std::move(*gemm), false, {}};
  p.overrides.push_back(std::move(o));
  return p;
}

std::string named_plan_toml(std::string_view plan_toml, std::string_view origin, const std::string& name) {
  toml::table t = io::detail::parse(plan_toml, origin);
  t.insert_or_assign("name", name);
  std::ostringstream s;
  s << t;
  return s.str();
}

PrecisionPlan without_gemms(PrecisionPlan p) {
  p.gemm.reset();
  p.attention_gemm.reset();
  p.dgrad_gemm.reset();
  p.wgrad_gemm.reset();
  for (auto& o : p.overrides) {
    o.gemm.reset();
    o.attention_gemm.reset();
    o.dgrad_gemm.reset();
    o.wgrad_gemm.reset();
  }
  return p;
}

PrecisionPlan only_role(PrecisionPlan p, Role role) {
  p.gemm.reset();
  const auto keep = [&](std::vector<PrecisionPlan::Entry>& es) {
    es.erase(std::remove_if(es.begin(), es.end(), [&](const auto& e) { return e.role != role; }), es.end());
  };
  keep(p.roles);
  for (auto& o : p.overrides) {
    keep(o.entries);
    o.gemm.reset();
  }
  return p;
}

std::optional<PrecisionPlan> only_role_at(const PrecisionPlan& plan, Role role, int layer, int n_layers) {
  // The LM head quantises only its own roles; blocks never use them.
  const bool head_role = role == Role::lm_head || role == Role::lm_head_input || role == Role::logits;
  if (head_role != (layer < 0)) return std::nullopt;
  PrecisionPlan p;
  p.name = plan.name;
  p.compute = plan.compute;
  p.origin = plan.origin;
  const auto kinds = layer < 0 ? std::vector<LayerKind>{LayerKind::head}
                               : std::vector<LayerKind>{LayerKind::attention, LayerKind::mlp};
  for (const auto kind : kinds) {
    const auto spec = plan.resolve(role, layer, kind, n_layers);
    if (!spec) continue;
    PrecisionPlan::Override o;
    if (layer >= 0) o.layers = {layer};
    o.kind = kind;
    o.entries.push_back({role, spec});
    p.overrides.push_back(std::move(o));
  }
  if (p.overrides.empty()) return std::nullopt;
  return p;
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
