#include "lpemu/datapath/datapath.hpp"
#include "io/toml_util.hpp"

#include <set>

#include "io/toml.hpp"

#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"

namespace lpemu::datapath {
namespace {

using io::detail::fail;
using io::detail::show;
using io::detail::where;

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

/// Reads the keys of one table, with the table's dotted name for messages.
struct Reader {
  const toml::table* t;
  std::string prefix;  // "" or "accumulator."
  std::string_view origin;
  const toml::node* parent;

  const toml::node* node(std::string_view key) const { return t == nullptr ? nullptr : t->get(key); }
  std::string field(std::string_view key) const { return prefix + std::string(key); }

  void only(const std::set<std::string, std::less<>>& keys) const {
    if (t == nullptr) return;
    for (const auto& [k, v] : *t) {
      if (keys.find(k.str()) == keys.end()) {
        std::vector<std::string> list(keys.begin(), keys.end());
        fail(origin, &v, field(k.str()), show(v), "a known key (" + join(list) + ")");
      }
    }
  }

  std::optional<std::string> str(std::string_view key) const {
    const toml::node* n = node(key);
    if (n == nullptr) return std::nullopt;
    if (!n->is_string()) fail(origin, n, field(key), show(*n), "a string");
    return *n->value<std::string>();
  }

  std::string str_req(std::string_view key) const {
    auto s = str(key);
    if (!s)
      fail(origin, t != nullptr ? static_cast<const toml::node*>(t) : parent, field(key), "(missing)",
           "a string");
    return *s;
  }

  std::optional<int> integer(std::string_view key, long lo, long hi) const {
    const toml::node* n = node(key);
    if (n == nullptr) return std::nullopt;
    const std::string what = "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
    if (!n->is_integer()) fail(origin, n, field(key), show(*n), what);
    const auto v = *n->value<std::int64_t>();
    if (v < lo || v > hi) fail(origin, n, field(key), std::to_string(v), what);
    return static_cast<int>(v);
  }

  std::optional<std::uint64_t> u64(std::string_view key) const {
    const toml::node* n = node(key);
    if (n == nullptr) return std::nullopt;
    if (!n->is_integer() || *n->value<std::int64_t>() < 0) {
      fail(origin, n, field(key), show(*n), "a non-negative integer");
    }
    return static_cast<std::uint64_t>(*n->value<std::int64_t>());
  }

  bool boolean(std::string_view key, bool def) const {
    const toml::node* n = node(key);
    if (n == nullptr) return def;
    if (!n->is_boolean()) fail(origin, n, field(key), show(*n), "true or false");
    return *n->value<bool>();
  }

  template <typename E, std::size_t N>
  E choice(std::string_view key, E def, const lpemu::detail::EnumName<E> (&table)[N]) const {
    const auto s = str(key);
    if (!s) return def;
    if (const auto v = lpemu::detail::enum_value(table, *s)) return *v;
    fail(origin, node(key), field(key), '"' + *s + '"',
         "one of " + join(lpemu::detail::enum_spellings(table, "\"")));
  }

  // A rounding mode by the format layer's names.
  format::RoundingMode rounding(std::string_view key, format::RoundingMode def) const {
    const auto s = str(key);
    if (!s) return def;
    std::vector<std::string> names;
    for (const format::RoundingMode m : format::kAllRoundingModes) {
      if (format::to_string(m) == *s) return m;
      names.push_back('"' + std::string(format::to_string(m)) + '"');
    }
    fail(origin, node(key), field(key), '"' + *s + '"', "one of " + join(names));
  }

  const format::Format& format_named(std::string_view key, const std::string& name,
                                     const format::Registry& formats) const {
    if (const format::Format* f = formats.find(name)) return *f;
    fail(origin, node(key), field(key), '"' + name + '"',
         "a known element format (see `lpemu formats list`)" +
             lpemu::detail::closest_names_hint(name, formats.names()));
  }
};

Reader sub(const toml::table& root, std::string_view key, std::string_view origin) {
  const toml::node* n = root.get(key);
  if (n != nullptr && !n->is_table()) fail(origin, n, key, show(*n), "a table [" + std::string(key) + "]");
  return Reader{n != nullptr ? n->as_table() : nullptr, std::string(key) + ".", origin, &root};
}

using lpemu::detail::EnumName;

constexpr EnumName<Alignment> kAlignmentNames[] = {{"exact", Alignment::exact},
                                                   {"truncate", Alignment::truncate},
                                                   {"nearest_even", Alignment::nearest_even},
                                                   {"round_down", Alignment::round_down}};
constexpr EnumName<Order> kOrderNames[] = {
    {"sequential", Order::sequential}, {"pairwise", Order::pairwise}, {"split_k", Order::split_k}};
constexpr EnumName<ScaleApplication> kScaleApplicationNames[] = {{"none", ScaleApplication::none},
                                                                 {"product", ScaleApplication::product},
                                                                 {"group", ScaleApplication::group}};
constexpr EnumName<Addend> kAddendNames[] = {{"fused", Addend::fused}, {"late", Addend::late}};
constexpr EnumName<OverflowRule> kOverflowRuleNames[] = {
    {"infinity", OverflowRule::infinity},
    {"native", OverflowRule::infinity},  // the spelling of datapath files written before "infinity"
    {"ieee", OverflowRule::ieee},
    {"saturate", OverflowRule::saturate}};

ResultRounding read_rounding(const Reader& r, std::string_view prefix, format::RoundingMode def) {
  ResultRounding rr;
  const std::string p(prefix);
  rr.mode = r.rounding(p + "rounding", def);
  rr.sr_bits = r.integer(p + "sr_bits", 1, 32).value_or(32);
  rr.seed = r.u64(p + "seed").value_or(0);
  return rr;
}

void check_accumulator_like(const Reader& r, std::string_view key, const format::Format& f) {
  if (f.kind == format::Kind::floating && (!f.is_signed || !f.has_zero)) {
    fail(r.origin, r.node(key), r.field(key), '"' + f.name + '"',
         "a signed floating-point format with a zero, or an integer format");
  }
}

}  // namespace

std::string_view to_string(Alignment a) { return lpemu::detail::enum_name(kAlignmentNames, a); }

std::string_view to_string(Order o) { return lpemu::detail::enum_name(kOrderNames, o); }

std::string Datapath::summary() const {
  std::string s = a.name + " x " + b.name + " -> " + output().name +
                  ", n=" + (fused_terms == 0 ? std::string("K") : std::to_string(fused_terms));
  if (alignment == Alignment::exact) {
    s += ", exact alignment";
  } else {
    s += ", F=" + std::to_string(fraction_bits) + " (" + std::string(to_string(alignment)) + ")";
  }
  s += ", " + std::string(format::to_string(accumulator_rounding.mode)) + " to " + accumulator.name;
  if (accumulator.kind == format::Kind::floating && accumulator_fraction_bits != accumulator.mantissa_bits) {
    s += " (" + std::to_string(accumulator_fraction_bits) + " fraction bits)";
  }
  if (promote_every > 0)
    s += ", promoted to " + promotion_format->name + " every " + std::to_string(promote_every);
  return s;
}

Datapath parse_datapath_toml(std::string_view text, std::string_view origin,
                             const format::Registry& formats) {
  const toml::table root = io::detail::parse(text, origin);
  const Reader top{&root, "", origin, nullptr};
  top.only({"name", "description", "source", "open", "inputs", "products", "block", "alignment",
            "accumulator", "promotion", "order"});
  Datapath d;
  d.name = top.str_req("name");
  if (d.name.empty()) fail(origin, top.node("name"), "name", "\"\"", "a non-empty name");
  d.description = top.str("description").value_or("");
  d.source = top.str_req("source");
  if (const toml::node* o = root.get("open")) {
    const toml::array* arr = o->as_array();
    if (arr == nullptr) fail(origin, o, "open", show(*o), "an array of strings");
    for (const toml::node& e : *arr) {
      if (!e.is_string()) fail(origin, &e, "open", show(e), "an array of strings");
      d.open.push_back(*e.value<std::string>());
    }
  }

  const Reader in = sub(root, "inputs", origin);
  in.only({"a", "b", "flush_subnormals", "scale_application", "scale_block", "group_size", "scale"});
  d.a = in.format_named("a", in.str_req("a"), formats);
  d.b = in.format_named("b", in.str_req("b"), formats);
  d.flush_subnormal_inputs = in.boolean("flush_subnormals", false);
  d.scale_application = in.choice("scale_application", ScaleApplication::none, kScaleApplicationNames);
  d.scale_block = in.integer("scale_block", 1, 1 << 20).value_or(0);
  d.group_size = in.integer("group_size", 1, 1 << 20).value_or(d.scale_block);
  if (d.scale_application != ScaleApplication::none && d.scale_block == 0) {
    fail(origin, in.node("scale_application"), "inputs.scale_block", "(missing)",
         "the number of elements per block scale when scale_application is not \"none\"");
  }
  if (d.scale_application != ScaleApplication::none) {
    // OCP MX v1.0 sec. 5.2: E8M0 shared scales; NVFP4 uses FP8 E4M3 block scales.
    d.scale = in.format_named("scale", in.str("scale").value_or("e8m0"), formats);
  } else if (in.node("scale") != nullptr) {
    fail(origin, in.node("scale"), "inputs.scale", show(*in.node("scale")),
         "no scale when scale_application is \"none\"");
  }

  const Reader pr = sub(root, "products", origin);
  pr.only({"format", "rounding"});
  if (auto pf = pr.str("format"); pf && *pf != "exact") {
    d.product_format = pr.format_named("format", *pf, formats);
    if (d.product_format->kind != format::Kind::floating) {
      fail(origin, pr.node("format"), "products.format", '"' + *pf + '"',
           "\"exact\" or a floating-point format");
    }
    d.product_rounding = pr.rounding("rounding", format::RoundingMode::nearest_even);
    if (d.product_rounding == format::RoundingMode::stochastic) {
      fail(origin, pr.node("rounding"), "products.rounding", "\"stochastic\"",
           "a deterministic rounding mode");
    }
  }

  const Reader bl = sub(root, "block", origin);
  bl.only({"fused_terms", "addend", "addend_emin", "late_rounding", "late_sr_bits", "late_seed",
           "normalisation"});
  d.fused_terms = bl.integer("fused_terms", 0, 1 << 20).value_or(1);
  d.addend = bl.choice("addend", Addend::fused, kAddendNames);
  d.late_rounding = read_rounding(bl, "late_", format::RoundingMode::nearest_even);
  if (const auto norm = bl.str("normalisation"); norm && *norm != "late") {
    fail(origin, bl.node("normalisation"), "block.normalisation", '"' + *norm + '"',
         "\"late\" (one normalisation per block; use fused_terms = 1 for a normalising FMA chain)");
  }

  const Reader al = sub(root, "alignment", origin);
  al.only({"mode", "fraction_bits", "extra_bits", "exponent_floor", "sticky"});
  d.alignment = al.choice("mode", Alignment::exact, kAlignmentNames);
  d.sticky = al.boolean("sticky", false);
  if (auto f = al.integer("exponent_floor", -100000, 100000)) d.exponent_floor = *f;

  const Reader ac = sub(root, "accumulator", origin);
  ac.only({"format", "fraction_bits", "rounding", "sr_bits", "seed", "overflow", "flush_subnormals"});
  d.accumulator = ac.format_named("format", ac.str_req("format"), formats);
  check_accumulator_like(ac, "format", d.accumulator);
  const int mb = d.accumulator.mantissa_bits;
  d.accumulator_fraction_bits = ac.integer("fraction_bits", 0, mb).value_or(mb);
  d.accumulator_rounding = read_rounding(ac, "", format::RoundingMode::nearest_even);
  d.overflow = ac.choice("overflow", OverflowRule::infinity, kOverflowRuleNames);
  d.flush_subnormal_outputs = ac.boolean("flush_subnormals", false);
  d.addend_emin = bl.integer("addend_emin", -100000, 100000)
                      .value_or(d.accumulator.kind == format::Kind::floating ? d.accumulator.emin : -100000);

  // Alignment width: F directly, or extra bits relative to the accumulator's fraction (F = 23 + neab).
  const auto fb = al.integer("fraction_bits", -60, 100);
  const auto xb = al.integer("extra_bits", -60, 60);
  if (fb && xb) {
    fail(origin, al.node("extra_bits"), "alignment.extra_bits", std::to_string(*xb),
         "either alignment.fraction_bits or alignment.extra_bits, not both");
  }
  if (d.alignment != Alignment::exact) {
    if (!fb && !xb) {
      fail(origin, al.node("mode"), "alignment.fraction_bits", "(missing)",
           "fraction_bits (F) or extra_bits when alignment.mode drops bits");
    }
    d.fraction_bits = fb ? *fb : mb + *xb;
    if (d.fraction_bits < 0 || d.fraction_bits > 100) {
      fail(origin, al.node(fb ? "fraction_bits" : "extra_bits"),
           fb ? "alignment.fraction_bits" : "alignment.extra_bits", std::to_string(fb ? *fb : *xb),
           "an alignment width F in 0..100 bits");
    }
  }

  const Reader pm = sub(root, "promotion", origin);
  pm.only({"every", "format", "rounding", "sr_bits", "seed"});
  d.promote_every = pm.integer("every", 0, 1 << 24).value_or(0);
  if (d.promote_every > 0) {
    d.promotion_format = pm.format_named("format", pm.str_req("format"), formats);
    check_accumulator_like(pm, "format", *d.promotion_format);
    d.promotion_rounding = read_rounding(pm, "", format::RoundingMode::nearest_even);
  }

  const Reader od = sub(root, "order", origin);
  od.only({"kind", "chunks"});
  d.order = od.choice("kind", Order::sequential, kOrderNames);
  d.split_chunks = od.integer("chunks", 1, 1 << 20).value_or(1);
  if (d.fused_terms > 64 && d.alignment != Alignment::exact) {
    fail(origin, bl.node("fused_terms"), "block.fused_terms", std::to_string(d.fused_terms),
         "1..64 terms per fused block when alignment drops bits (0 = all of K needs mode = \"exact\")");
  }
  if (d.fused_terms == 0 && d.alignment != Alignment::exact) {
    fail(origin, bl.node("fused_terms"), "block.fused_terms", "0",
         "1..64 when alignment drops bits (0 = all of K needs alignment.mode = \"exact\")");
  }
  return d;
}

const DatapathRegistry& DatapathRegistry::builtin() {
  static const DatapathRegistry kBuiltin = [] {
    DatapathRegistry r;
    lpemu::detail::for_each_builtin_spec("datapath", [&](std::string_view text, const std::string& origin) {
      r.add(parse_datapath_toml(text, origin, format::Registry::builtin()), origin);
    });
    return r;
  }();
  return kBuiltin;
}

DatapathRegistry DatapathRegistry::with_user_paths(const std::vector<std::filesystem::path>& dirs,
                                                   const format::Registry& formats) {
  DatapathRegistry r = builtin();
  // Unlike the format registries, a directory that does not exist is skipped here.
  for (const auto& dir : lpemu::detail::user_spec_dirs(dirs)) {
    for (const auto& f : lpemu::detail::toml_files_in(dir / "datapath")) {
      r.add(parse_datapath_toml(lpemu::detail::read_spec_file(f, "datapath"), f.string(), formats),
            f.string());
    }
  }
  return r;
}

void DatapathRegistry::add(Datapath d, std::string origin) {
  // Plans name GEMMs by datapath name or by one of the engine's own fp32 GEMMs: a datapath named
  // like those would shadow it (or be shadowed), depending on lookup order.
  for (const char* reserved : {"eigen", "fp32", "native", "none"}) {
    if (d.name == reserved) {
      throw SpecError(
          origin + ": datapath name '" + d.name +
          "' is reserved for the engine's own GEMM (eigen, fp32, native, none); expected another name");
    }
  }
  items_.add(std::move(d), std::move(origin));
}

const Datapath* DatapathRegistry::find(std::string_view name) const { return items_.find(name); }

const Datapath& DatapathRegistry::get(std::string_view name) const { return items_.get(name); }

std::vector<std::string> DatapathRegistry::names() const { return items_.names(); }

const std::string& DatapathRegistry::origin(std::string_view name) const { return items_.origin(name); }

}  // namespace lpemu::datapath
