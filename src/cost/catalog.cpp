#include "lpemu/cost/catalog.hpp"

#include <algorithm>
#include <cmath>

#include "cost/embedded_data.hpp"
#include "io/toml.hpp"

#include "io/toml_util.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/detail/named_registry.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"

namespace lpemu::cost {
namespace {

using io::detail::TableReader;

bool is_path(std::string_view name) { return name.size() > 5 && name.substr(name.size() - 5) == ".toml"; }

template <typename Map>
std::vector<std::string> keys(const Map& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(k);
  return out;
}

// The text behind a catalog origin ("builtin:data/<path>" or a file path).
std::string origin_text(const std::string& origin) {
  constexpr std::string_view kBuiltin = "builtin:data/";
  if (origin.rfind(kBuiltin, 0) == 0) {
    for (const auto& f : detail::embedded_cost_data()) {
      if (std::string_view(f.path) == std::string_view(origin).substr(kBuiltin.size()))
        return std::string(f.text);
    }
    return {};
  }
  return lpemu::detail::read_spec_file(origin, "cost-model");
}

// A second definition of a hardware target or model shape name: refused, naming both files.
[[noreturn]] void name_taken(std::string_view what, const std::string& name, const std::string& origin,
                             const std::string& previous) {
  throw SpecError(origin + ": name = \"" + name + "\": the " + std::string(what) + " '" + name +
                  "' is already defined by " + previous +
                  "; expected a name of its own (to change a built-in one, copy its file under a new name)");
}

[[noreturn]] void unknown(std::string_view what, std::string_view name,
                          const std::vector<std::string>& known) {
  throw UnknownNameError("unknown " + std::string(what) + " '" + std::string(name) + "'" +
                         lpemu::detail::closest_names_hint(name, known));
}

std::string name_of(std::string_view text, std::string_view origin) {
  const toml::table t = io::detail::parse(text, origin);
  return TableReader(t, origin).required_str("name");
}

// The rate classes as the keys a [rates] table may have.
std::vector<std::string_view> rate_class_keys() { return {rate_classes().begin(), rate_classes().end()}; }

Rate read_rate(const TableReader& r) {
  r.only({"tflops", "source", "macs_per_clock_per_unit", "macs_source", "unverified", "note", "datapath",
          "achieved_tflops", "achieved_source", "attention_forward_tflops", "attention_backward_tflops",
          "attention_source"});
  Rate rate;
  rate.tflops = r.required_number("tflops", 1e-6, 1e9, "a positive number of dense TFLOP/s");
  rate.source = r.required_str("source");
  rate.macs_per_clock_per_unit =
      r.number("macs_per_clock_per_unit", 0, 1, 1e9, "a positive number of MACs per clock per unit");
  if (rate.macs_per_clock_per_unit > 0) rate.macs_source = r.required_str("macs_source");
  rate.unverified = r.boolean("unverified", false);
  rate.note = r.str("note");
  rate.datapath = r.str("datapath");
  rate.achieved_tflops = r.number("achieved_tflops", 0, 1e-6, rate.tflops,
                                  "a measured TFLOP/s above 0 and at most the class's tflops");
  if (rate.achieved_tflops > 0) rate.achieved_source = r.required_str("achieved_source");
  constexpr std::string_view kAttention =
      "a measured attention TFLOP/s above 0 and at most the class's tflops";
  rate.attention_forward_tflops = r.number("attention_forward_tflops", 0, 1e-6, rate.tflops, kAttention);
  rate.attention_backward_tflops = r.number("attention_backward_tflops", 0, 1e-6, rate.tflops, kAttention);
  if (rate.attention_forward_tflops > 0 || rate.attention_backward_tflops > 0)
    rate.attention_source = r.required_str("attention_source");
  return rate;
}

}  // namespace

ModelShape parse_shape_toml(std::string_view text, std::string_view origin) {
  const toml::table t = io::detail::parse(text, origin);
  const TableReader r(t, origin);
  r.only({"name", "source", "dim", "n_layers", "n_heads", "n_kv_heads", "hidden_dim", "vocab_size",
          "tied_embeddings", "mlp", "description", "experts", "top_k"});
  ModelShape s;
  s.origin = std::string(origin);
  s.name = r.required_str("name");
  s.source = r.required_str("source");
  constexpr long long kMax = 1LL << 40;
  s.dim = r.required_integer("dim", 1, kMax, "a positive integer");
  s.n_layers = r.required_integer("n_layers", 1, kMax, "a positive integer");
  s.n_heads = r.required_integer("n_heads", 1, kMax, "a positive integer");
  s.n_kv_heads = r.required_integer("n_kv_heads", 1, kMax, "a positive integer");
  s.hidden_dim = r.required_integer("hidden_dim", 1, kMax, "a positive integer");
  s.vocab_size = r.required_integer("vocab_size", 1, kMax, "a positive integer");
  s.tied_embeddings = r.boolean("tied_embeddings", false);
  const std::string mlp = r.str("mlp", "gated");
  if (mlp != "gated" && mlp != "dense") r.fail("mlp", "\"gated\" or \"dense\"");
  s.gated_mlp = mlp == "gated";
  s.experts = r.integer("experts", 0, 0, 1LL << 20, "an integer >= 0 (0: a dense MLP)");
  if (s.experts == 1) r.fail("experts", "0 (dense) or at least 2 experts");
  const std::string top_k = "an integer from 1 to experts = " + std::to_string(s.experts);
  s.top_k =
      s.experts > 0 ? r.required_integer("top_k", 1, s.experts, top_k) : r.integer("top_k", 0, 1, 1, top_k);
  if (s.experts == 0 && r.has("top_k")) r.fail("top_k", "no top_k without experts");
  if (s.dim % s.n_heads != 0) r.fail("n_heads", "a divisor of dim = " + std::to_string(s.dim));
  if (s.n_heads % s.n_kv_heads != 0)
    r.fail("n_kv_heads", "a divisor of n_heads = " + std::to_string(s.n_heads));
  return s;
}

std::string to_toml(const ModelShape& s) {
  io::detail::TomlWriter w;
  w.str("name", s.name).str("source", s.source);
  w.integer("dim", s.dim).integer("n_layers", s.n_layers).integer("n_heads", s.n_heads);
  w.integer("n_kv_heads", s.n_kv_heads)
      .integer("hidden_dim", s.hidden_dim)
      .integer("vocab_size", s.vocab_size);
  w.boolean("tied_embeddings", s.tied_embeddings).str("mlp", s.gated_mlp ? "gated" : "dense");
  if (s.experts > 0) w.integer("experts", s.experts).integer("top_k", s.top_k);
  return w.text();
}

std::string to_toml(const Target& t) {
  io::detail::TomlWriter w;
  w.str("name", t.name).str("display_name", t.display_name).str_if("vendor", t.vendor);
  w.str("kind", t.kind).str("source", t.source);
  if (t.kind == "proposed") {
    if (!t.derive) throw SpecError("target '" + t.name + "': a proposed target without its [derive] recipe");
    const TargetDerivation& d = *t.derive;
    w.table("derive").str("base", d.base).str("budget_class", d.budget_class);
    w.str("budget_format", d.budget_format).str("datapath", d.datapath);
    for (const auto& [cls, f] : d.rate_formats)
      w.table("derive.rates." + io::detail::TomlWriter::key(cls)).str("format", f);
    return w.text();
  }
  w.table("memory").number("bandwidth_gb_s", t.bandwidth_gb_s).str("bandwidth_source", t.bandwidth_source);
  w.number("capacity_gb", t.capacity_gb).str("capacity_source", t.capacity_source);
  if (t.achieved_bandwidth_gb_s > 0) {
    w.number("achieved_gb_s", t.achieved_bandwidth_gb_s).str("achieved_source", t.achieved_bandwidth_source);
  }
  w.table("compute");
  if (t.units > 0)
    w.integer("units", t.units).str("unit_name", t.unit_name).str("units_source", t.units_source);
  if (t.clock_mhz > 0) w.number("clock_mhz", t.clock_mhz).str("clock_source", t.clock_source);
  if (t.compute_unverified) w.boolean("unverified", true);
  w.str_if("note", t.compute_note);
  for (const auto& [cls, r] : t.rates) {
    w.table("rates." + io::detail::TomlWriter::key(cls)).number("tflops", r.tflops).str("source", r.source);
    if (r.macs_per_clock_per_unit > 0)
      w.number("macs_per_clock_per_unit", r.macs_per_clock_per_unit).str("macs_source", r.macs_source);
    if (r.unverified) w.boolean("unverified", true);
    w.str_if("note", r.note).str_if("datapath", r.datapath);
    if (r.achieved_tflops > 0)
      w.number("achieved_tflops", r.achieved_tflops).str("achieved_source", r.achieved_source);
    if (r.attention_forward_tflops > 0) w.number("attention_forward_tflops", r.attention_forward_tflops);
    if (r.attention_backward_tflops > 0) w.number("attention_backward_tflops", r.attention_backward_tflops);
    w.str_if("attention_source", r.attention_source);
  }
  return w.text();
}

Catalog::Catalog(const format::Registry& formats, const std::vector<std::filesystem::path>& dirs,
                 const block::BlockRegistry* blocks, const datapath::DatapathRegistry* datapaths)
    : formats_(formats),
      blocks_(blocks),
      datapath_records_(datapaths),
      user_dirs_(lpemu::detail::user_spec_dirs(dirs)) {
  for (const auto& f : detail::embedded_cost_data()) {
    const std::string_view path = f.path;
    add_text(path.substr(0, path.find('/')), f.text, "builtin:data/" + std::string(path));
  }
  // The user directories of every record kind: LPEMU_FORMATS_PATH, then `dirs`.
  for (const auto& dir : user_dirs_) {
    if (!std::filesystem::is_directory(dir))
      throw IoError(dir.string() + ": cost data directory does not exist");
    for (const char* kind : {"hardware", "shapes"}) {
      for (const auto& file : lpemu::detail::toml_files_in(dir / kind))
        add_text(kind, lpemu::detail::read_spec_file(file, "cost-model"), file.string());
    }
  }
}

void Catalog::add_text(std::string_view kind, const std::string& text, const std::string& origin) {
  // Names are unique: a user file never silently replaces a built-in (or another user file).
  if (kind == "hardware") {
    const std::string name = name_of(text, origin);
    if (const auto it = raw_targets_.find(name); it != raw_targets_.end())
      name_taken("hardware target", name, origin, it->second.origin);
    raw_targets_[name] = Pending{text, origin};
  } else if (kind == "shapes") {
    ModelShape s = parse_shape_toml(text, origin);
    if (const auto it = shapes_.find(s.name); it != shapes_.end())
      name_taken("model shape", s.name, origin, it->second.origin);
    shapes_[s.name] = std::move(s);
  }
}

const Target& Catalog::target(std::string_view name) {
  if (is_path(name)) {
    Target t =
        parse_target_toml(lpemu::detail::read_spec_file(std::filesystem::path(name), "cost-model"), name);
    const std::string key = t.name;
    // The same file as a built-in (e.g. --target data/hardware/h100_sxm.toml) is that target.
    if (const auto it = raw_targets_.find(key);
        it != raw_targets_.end() &&
        it->second.text != lpemu::detail::read_spec_file(std::filesystem::path(name), "cost-model")) {
      name_taken("hardware target", key, std::string(name), it->second.origin);
    }
    targets_[key] = std::move(t);
    return targets_[key];
  }
  if (auto it = targets_.find(name); it != targets_.end()) return it->second;
  const auto raw = raw_targets_.find(name);
  if (raw == raw_targets_.end()) unknown("target", name, keys(raw_targets_));
  if (std::find(resolving_.begin(), resolving_.end(), std::string(name)) != resolving_.end()) {
    throw SpecError(raw->second.origin + ": target '" + std::string(name) + "' derives from itself");
  }
  resolving_.emplace_back(name);
  Target t;
  try {
    t = parse_target_toml(raw->second.text, raw->second.origin);
  } catch (...) {
    resolving_.pop_back();
    throw;
  }
  resolving_.pop_back();
  return targets_[std::string(name)] = std::move(t);
}

const ModelShape& Catalog::shape(std::string_view name) {
  if (is_path(name)) {
    ModelShape s =
        parse_shape_toml(lpemu::detail::read_spec_file(std::filesystem::path(name), "cost-model"), name);
    const std::string key = s.name;
    if (const auto it = shapes_.find(key);
        it != shapes_.end() && origin_text(it->second.origin) != origin_text(std::string(name))) {
      name_taken("model shape", key, std::string(name), it->second.origin);
    }
    return shapes_[key] = std::move(s);
  }
  const auto it = shapes_.find(name);
  if (it == shapes_.end()) unknown("model shape", name, keys(shapes_));
  return it->second;
}

const MacDatapath& Catalog::datapath(std::string_view name) {
  if (is_path(name)) {
    const datapath::Datapath d = datapath::parse_datapath_toml(
        lpemu::detail::read_spec_file(std::filesystem::path(name), "datapath"), name, formats_);
    const std::string key = d.name;
    return datapaths_[key] = mac_datapath(d);
  }
  if (auto it = datapaths_.find(name); it != datapaths_.end()) return it->second;
  const datapath::DatapathRegistry& reg =
      datapath_records_ != nullptr ? *datapath_records_ : datapath::DatapathRegistry::builtin();
  return datapaths_[std::string(name)] = mac_datapath(reg.get(name));  // get() names the closest on a miss
}

void Catalog::add_datapath(const datapath::Datapath& d) { datapaths_[d.name] = mac_datapath(d); }

std::vector<std::string> Catalog::target_names() const { return keys(raw_targets_); }
std::vector<std::string> Catalog::shape_names() const { return keys(shapes_); }
std::vector<std::string> Catalog::datapath_names() const {
  const datapath::DatapathRegistry& reg =
      datapath_records_ != nullptr ? *datapath_records_ : datapath::DatapathRegistry::builtin();
  std::vector<std::string> names = reg.names();
  for (const auto& [k, v] : datapaths_) {
    if (std::find(names.begin(), names.end(), k) == names.end()) names.push_back(k);
  }
  std::sort(names.begin(), names.end());
  return names;
}

IsoArea iso_area_peak(const Target& target, std::string_view budget_class, const CostFormat& budget_format,
                      const CostFormat& candidate, const MacDatapath& dp) {
  const Rate* budget = target.find_rate(budget_class);
  if (budget == nullptr || budget->macs_per_clock_per_unit == 0 || target.units == 0 ||
      target.clock_mhz == 0) {
    throw SpecError("target '" + target.name +
                    "' does not publish units, clock and MACs/clock for rate class '" +
                    std::string(budget_class) + "'");
  }
  IsoArea r;
  r.budget = mac_cost(budget_format, budget_format, dp);
  r.candidate = mac_cost(candidate, candidate, dp);
  r.budget_macs_per_clock_per_unit = budget->macs_per_clock_per_unit;
  r.macs_per_clock_per_unit =
      iso_area_count(r.candidate, r.budget, static_cast<long long>(budget->macs_per_clock_per_unit));
  r.tflops =
      target.units * static_cast<double>(r.macs_per_clock_per_unit) * 2.0 * target.clock_mhz * 1e6 / 1e12;
  return r;
}

Target Catalog::parse_target_toml(std::string_view text, std::string_view origin) {
  const toml::table t = io::detail::parse(text, origin);
  const TableReader r(t, origin);
  r.only({"name", "display_name", "vendor", "kind", "source", "memory", "compute", "rates", "derive"});
  Target g;
  g.origin = std::string(origin);
  g.name = r.required_str("name");
  g.display_name = r.str("display_name", g.name);
  g.vendor = r.str("vendor");
  g.kind = r.required_str("kind");
  if (g.kind != "product" && g.kind != "proposed") r.fail("kind", "\"product\" or \"proposed\"");
  g.source = r.required_str("source");

  if (g.kind == "proposed") {
    const TableReader dr = r.required_sub("derive");
    dr.only({"base", "budget_class", "budget_format", "datapath", "rates"});
    const std::string base_name = dr.required_str("base");
    if (raw_targets_.find(base_name) == raw_targets_.end()) {
      dr.fail("base", "the name of a known target" +
                          lpemu::detail::closest_names_hint(base_name, keys(raw_targets_)));
    }
    const Target& base = target(base_name);
    const std::string budget_class = dr.required_str("budget_class");
    const Rate* budget = base.find_rate(budget_class);
    if (budget == nullptr || budget->macs_per_clock_per_unit == 0 || base.units == 0 || base.clock_mhz == 0) {
      dr.fail("budget_class",
              "a rate class of '" + base_name + "' with units, clock and MACs/clock published");
    }
    TargetDerivation derive;
    derive.base = base_name;
    derive.budget_class = budget_class;
    derive.budget_format = dr.required_str("budget_format");
    derive.datapath = dr.required_str("datapath");
    const CostFormat budget_fmt = format(derive.budget_format);
    const MacDatapath& dp = datapath(derive.datapath);
    const MacCost budget_mac = mac_cost(budget_fmt, budget_fmt, dp);
    const Target copy = base;  // `base` may move when targets_ grows
    g.bandwidth_gb_s = copy.bandwidth_gb_s;
    g.bandwidth_source = "from " + base_name + ": " + copy.bandwidth_source;
    g.achieved_bandwidth_gb_s = copy.achieved_bandwidth_gb_s;
    g.achieved_bandwidth_source = copy.achieved_bandwidth_source;
    g.capacity_gb = copy.capacity_gb;
    g.capacity_source = "from " + base_name + ": " + copy.capacity_source;
    g.units = copy.units;
    g.unit_name = copy.unit_name;
    g.units_source = "from " + base_name + ": " + copy.units_source;
    g.clock_mhz = copy.clock_mhz;
    g.clock_source = "from " + base_name + ": " + copy.clock_source;
    g.rates = copy.rates;
    const TableReader rates = dr.required_sub("rates");
    rates.only(rate_class_keys(), "a rate class");
    for (const auto& [cls, node] : *rates.table()) {
      const std::string c(cls.str());
      const TableReader rr = rates.required_sub(c);
      rr.only({"format"});
      derive.rate_formats[c] = rr.required_str("format");
      const CostFormat f = format(derive.rate_formats[c]);
      const MacCost m = mac_cost(f, f, dp);
      Rate rate;
      rate.macs_per_clock_per_unit = static_cast<double>(
          iso_area_count(m, budget_mac, static_cast<long long>(budget->macs_per_clock_per_unit)));
      rate.tflops = copy.units * rate.macs_per_clock_per_unit * 2.0 * copy.clock_mhz * 1e6 / 1e12;
      std::ostringstream why;
      why << "MAC model: floor(" << budget->macs_per_clock_per_unit << " x " << budget_mac.total_fa << " FA ("
          << budget_fmt.name << ") / " << m.total_fa << " FA (" << f.name << ")) on datapath " << dp.name;
      rate.source = "derived (not a datasheet figure)";
      rate.macs_source = why.str();
      rate.derived_from = why.str();
      g.rates[c] = rate;
    }
    g.derive = std::move(derive);
    return g;
  }

  const TableReader mr = r.required_sub("memory");
  mr.only({"bandwidth_gb_s", "bandwidth_source", "capacity_gb", "capacity_source", "unverified", "note",
           "achieved_gb_s", "achieved_source"});
  g.bandwidth_gb_s = mr.required_number("bandwidth_gb_s", 1e-3, 1e9, "a positive bandwidth in GB/s");
  g.bandwidth_source = mr.required_str("bandwidth_source");
  g.achieved_bandwidth_gb_s = mr.number("achieved_gb_s", 0, 1e-6, g.bandwidth_gb_s,
                                        "a measured bandwidth above 0 and at most bandwidth_gb_s");
  if (g.achieved_bandwidth_gb_s > 0) g.achieved_bandwidth_source = mr.required_str("achieved_source");
  g.capacity_gb = mr.required_number("capacity_gb", 1e-6, 1e9, "a positive capacity in GB");
  g.capacity_source = mr.required_str("capacity_source");

  const TableReader cr = r.sub("compute");
  cr.only({"units", "unit_name", "units_source", "clock_mhz", "clock_source", "unverified", "note"});
  g.units = static_cast<int>(cr.integer("units", 0, 1, 1 << 30, "a positive integer"));
  if (g.units > 0) {
    g.unit_name = cr.required_str("unit_name");
    g.units_source = cr.required_str("units_source");
  }
  g.clock_mhz = cr.number("clock_mhz", 0, 1, 1e6, "a clock in MHz (1..1e6)");
  if (g.clock_mhz > 0) g.clock_source = cr.required_str("clock_source");
  g.compute_unverified = cr.boolean("unverified", false);
  g.compute_note = cr.str("note");

  const TableReader rates = r.required_sub("rates");
  rates.only(rate_class_keys(), "a rate class");
  for (const auto& [cls, node] : *rates.table()) {
    const std::string c(cls.str());
    g.rates[c] = read_rate(rates.required_sub(c));
  }
  if (g.rates.empty()) r.fail("rates", "an empty table", "at least one rate class");
  return g;
}

}  // namespace lpemu::cost
