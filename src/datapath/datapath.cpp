#include "lpemu/datapath/datapath.hpp"
#include "io/toml_util.hpp"

#include <cstdint>
#include <limits>

#include "format/enum_names.hpp"
#include "io/toml.hpp"

#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"

namespace lpemu::datapath {
namespace {

using io::detail::TableReader;

const format::Format& format_named(const TableReader& r, std::string_view key, const std::string& name,
                                   const format::Registry& formats) {
  if (const format::Format* f = formats.find(name)) return *f;
  r.fail(key, '"' + name + '"',
         "a known element format (see `lpemu formats list`)" +
             lpemu::detail::closest_names_hint(name, formats.names()));
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

ResultRounding read_rounding(const TableReader& r, std::string_view prefix, format::RoundingMode def) {
  ResultRounding rr;
  const std::string p(prefix);
  rr.mode = r.choice(p + "rounding", def, format::detail::kRoundingNames);
  rr.sr_bits = static_cast<int>(r.integer(p + "sr_bits", 32, 1, 32));
  rr.seed = static_cast<std::uint64_t>(
      r.integer(p + "seed", 0, 0, std::numeric_limits<std::int64_t>::max(), "a non-negative integer"));
  return rr;
}

void check_accumulator_like(const TableReader& r, std::string_view key, const format::Format& f) {
  if (f.kind == format::Kind::floating && (!f.is_signed || !f.has_zero)) {
    r.fail(key, '"' + f.name + '"', "a signed floating-point format with a zero, or an integer format");
  }
}

}  // namespace

std::string_view to_string(Alignment a) { return lpemu::detail::enum_name(kAlignmentNames, a); }

std::string_view to_string(Order o) { return lpemu::detail::enum_name(kOrderNames, o); }

std::string_view to_string(Addend a) { return lpemu::detail::enum_name(kAddendNames, a); }

std::string_view to_string(ScaleApplication s) { return lpemu::detail::enum_name(kScaleApplicationNames, s); }

std::string_view to_string(OverflowRule o) { return lpemu::detail::enum_name(kOverflowRuleNames, o); }

namespace {

void write_rounding(io::detail::TomlWriter& w, std::string_view prefix, const ResultRounding& r) {
  const std::string p(prefix);
  w.str(p + "rounding", format::to_string(r.mode)).integer(p + "sr_bits", r.sr_bits);
  w.integer(p + "seed", static_cast<long long>(r.seed));
}

int default_addend_emin(const format::Format& accumulator) {
  return accumulator.kind == format::Kind::floating ? accumulator.emin : -100000;
}

[[noreturn]] void bad(const Datapath& d, std::string_view field, const std::string& value,
                      std::string_view expected) {
  throw SpecError("datapath '" + d.name + "': field '" + std::string(field) + "' = " + value + ": expected " +
                  std::string(expected));
}

void check_accumulator_like(const Datapath& d, std::string_view field, const format::Format& f) {
  if (f.kind == format::Kind::floating && (!f.is_signed || !f.has_zero))
    bad(d, field, '"' + f.name + '"', "a signed floating-point format with a zero, or an integer format");
}

}  // namespace

std::string to_toml(const Datapath& d) {
  io::detail::TomlWriter w;
  w.str("name", d.name).str_if("description", d.description).str("source", d.source);
  w.strings_if("open", d.open);
  w.table("inputs")
      .str("a", d.a.name)
      .str("b", d.b.name)
      .boolean("flush_subnormals", d.flush_subnormal_inputs);
  w.str("scale_application", to_string(d.scale_application));
  if (d.scale_block != 0) w.integer("scale_block", d.scale_block);
  if (d.group_size != d.scale_block) w.integer("group_size", d.group_size);
  if (d.scale) w.str("scale", d.scale->name);
  w.table("products").str("format", d.product_format ? d.product_format->name : std::string("exact"));
  if (d.product_format) w.str("rounding", format::to_string(d.product_rounding));
  w.table("block").integer("fused_terms", d.fused_terms).str("addend", to_string(d.addend));
  w.integer("addend_emin", d.addend_emin);
  write_rounding(w, "late_", d.late_rounding);
  w.table("alignment").str("mode", to_string(d.alignment));
  if (d.alignment != Alignment::exact) w.integer("fraction_bits", d.fraction_bits);
  if (d.exponent_floor) w.integer("exponent_floor", *d.exponent_floor);
  w.boolean("sticky", d.sticky);
  w.table("accumulator")
      .str("format", d.accumulator.name)
      .integer("fraction_bits", d.accumulator_fraction_bits);
  write_rounding(w, "", d.accumulator_rounding);
  w.str("overflow", to_string(d.overflow)).boolean("flush_subnormals", d.flush_subnormal_outputs);
  if (d.promote_every > 0) {
    w.table("promotion").integer("every", d.promote_every);
    if (d.promotion_format) w.str("format", d.promotion_format->name);
    write_rounding(w, "", d.promotion_rounding);
  }
  w.table("order").str("kind", to_string(d.order)).integer("chunks", d.split_chunks);
  return w.text();
}

void validate(const Datapath& d) {
  check_accumulator_like(d, "accumulator.format", d.accumulator);
  if (d.promotion_format) check_accumulator_like(d, "promotion.format", *d.promotion_format);
  if (d.promote_every > 0 && !d.promotion_format) bad(d, "promotion.format", "(missing)", "a format name");
  const int mb = d.accumulator.mantissa_bits;
  if (d.accumulator_fraction_bits < 0 || d.accumulator_fraction_bits > mb)
    bad(d, "accumulator.fraction_bits", std::to_string(d.accumulator_fraction_bits),
        "an integer in 0.." + std::to_string(mb));
  if (d.alignment != Alignment::exact && (d.fraction_bits < 0 || d.fraction_bits > 100))
    bad(d, "alignment.fraction_bits", std::to_string(d.fraction_bits), "an alignment width F in 0..100 bits");
  if (d.fused_terms > 64 && d.alignment != Alignment::exact) {
    bad(d, "block.fused_terms", std::to_string(d.fused_terms),
        "1..64 terms per fused block when alignment drops bits (0 = all of K needs mode = \"exact\")");
  }
  if (d.fused_terms == 0 && d.alignment != Alignment::exact) {
    bad(d, "block.fused_terms", "0",
        "1..64 when alignment drops bits (0 = all of K needs alignment.mode = \"exact\")");
  }
}

Datapath with_name(Datapath d, std::string name, std::string description) {
  if (name.empty()) bad(d, "name", "\"\"", "a non-empty name");
  d.name = std::move(name);
  d.description = std::move(description);
  return d;
}

Datapath with_inputs(Datapath d, const format::Format& a, const format::Format& b) {
  d.a = a;
  d.b = b;
  return d;
}

Datapath with_fused_terms(Datapath d, int n) {
  d.fused_terms = n;
  validate(d);
  return d;
}

Datapath with_alignment_bits(Datapath d, int fraction_bits) {
  if (d.alignment == Alignment::exact) d.alignment = Alignment::truncate;
  d.fraction_bits = fraction_bits;
  validate(d);
  return d;
}

Datapath with_accumulator(Datapath d, const format::Format& accumulator) {
  if (d.addend_emin == default_addend_emin(d.accumulator)) d.addend_emin = default_addend_emin(accumulator);
  d.accumulator = accumulator;
  d.accumulator_fraction_bits = accumulator.mantissa_bits;
  d.exponent_floor.reset();
  validate(d);
  return d;
}

Datapath with_promotion(Datapath d, int every, const format::Format& format, ResultRounding rounding) {
  if (every == 0) return without_promotion(std::move(d));
  d.promote_every = every;
  d.promotion_format = format;
  d.promotion_rounding = rounding;
  validate(d);
  return d;
}

Datapath without_promotion(Datapath d) {
  d.promote_every = 0;
  d.promotion_format.reset();
  d.promotion_rounding = ResultRounding{};
  return d;
}

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
  const TableReader top(root, origin);
  top.only({"name", "description", "source", "open", "inputs", "products", "block", "alignment",
            "accumulator", "promotion", "order"});
  Datapath d;
  d.name = top.required_str("name");
  if (d.name.empty()) top.fail("name", "a non-empty name");
  d.description = top.str("description");
  d.source = top.required_str("source");
  d.open = top.strings("open");

  const TableReader in = top.sub("inputs");
  in.only({"a", "b", "flush_subnormals", "scale_application", "scale_block", "group_size", "scale"});
  d.a = format_named(in, "a", in.required_str("a"), formats);
  d.b = format_named(in, "b", in.required_str("b"), formats);
  d.flush_subnormal_inputs = in.boolean("flush_subnormals", false);
  d.scale_application = in.choice("scale_application", ScaleApplication::none, kScaleApplicationNames);
  d.scale_block = static_cast<int>(in.integer("scale_block", 0, 1, 1 << 20));
  d.group_size = static_cast<int>(in.integer("group_size", d.scale_block, 1, 1 << 20));
  if (d.scale_application != ScaleApplication::none && d.scale_block == 0) {
    throw SpecError(io::detail::field_message(
        origin, in.node("scale_application"), in.field("scale_block"), "(missing)",
        "the number of elements per block scale when scale_application is not \"none\""));
  }
  if (d.scale_application != ScaleApplication::none) {
    // OCP MX v1.0 sec. 5.2: E8M0 shared scales; NVFP4 uses FP8 E4M3 block scales.
    d.scale = format_named(in, "scale", in.str("scale", "e8m0"), formats);
  } else if (in.has("scale")) {
    in.fail("scale", "no scale when scale_application is \"none\"");
  }

  const TableReader pr = top.sub("products");
  pr.only({"format", "rounding"});
  if (auto pf = pr.opt_str("format"); pf && *pf != "exact") {
    d.product_format = format_named(pr, "format", *pf, formats);
    if (d.product_format->kind != format::Kind::floating)
      pr.fail("format", "\"exact\" or a floating-point format");
    d.product_rounding =
        pr.choice("rounding", format::RoundingMode::nearest_even, format::detail::kRoundingNames);
    if (d.product_rounding == format::RoundingMode::stochastic)
      pr.fail("rounding", "a deterministic rounding mode");
  }

  const TableReader bl = top.sub("block");
  bl.only({"fused_terms", "addend", "addend_emin", "late_rounding", "late_sr_bits", "late_seed",
           "normalisation"});
  d.fused_terms = static_cast<int>(bl.integer("fused_terms", 1, 0, 1 << 20));
  d.addend = bl.choice("addend", Addend::fused, kAddendNames);
  d.late_rounding = read_rounding(bl, "late_", format::RoundingMode::nearest_even);
  if (const auto norm = bl.opt_str("normalisation"); norm && *norm != "late") {
    bl.fail("normalisation",
            "\"late\" (one normalisation per block; use fused_terms = 1 for a normalising FMA chain)");
  }

  const TableReader al = top.sub("alignment");
  al.only({"mode", "fraction_bits", "extra_bits", "exponent_floor", "sticky"});
  d.alignment = al.choice("mode", Alignment::exact, kAlignmentNames);
  d.sticky = al.boolean("sticky", false);
  if (auto f = al.opt_integer("exponent_floor", -100000, 100000)) d.exponent_floor = static_cast<int>(*f);

  const TableReader ac = top.sub("accumulator");
  ac.only({"format", "fraction_bits", "rounding", "sr_bits", "seed", "overflow", "flush_subnormals"});
  d.accumulator = format_named(ac, "format", ac.required_str("format"), formats);
  check_accumulator_like(ac, "format", d.accumulator);
  const int mb = d.accumulator.mantissa_bits;
  d.accumulator_fraction_bits = static_cast<int>(ac.integer("fraction_bits", mb, 0, mb));
  d.accumulator_rounding = read_rounding(ac, "", format::RoundingMode::nearest_even);
  d.overflow = ac.choice("overflow", OverflowRule::infinity, kOverflowRuleNames);
  d.flush_subnormal_outputs = ac.boolean("flush_subnormals", false);
  d.addend_emin = static_cast<int>(
      bl.integer("addend_emin", d.accumulator.kind == format::Kind::floating ? d.accumulator.emin : -100000,
                 -100000, 100000));

  // Alignment width: F directly, or extra bits relative to the accumulator's fraction (F = 23 + neab).
  const auto fb = al.opt_integer("fraction_bits", -60, 100);
  const auto xb = al.opt_integer("extra_bits", -60, 60);
  if (fb && xb) al.fail("extra_bits", "either alignment.fraction_bits or alignment.extra_bits, not both");
  if (d.alignment != Alignment::exact) {
    if (!fb && !xb) {
      throw SpecError(
          io::detail::field_message(origin, al.node("mode"), al.field("fraction_bits"), "(missing)",
                                    "fraction_bits (F) or extra_bits when alignment.mode drops bits"));
    }
    d.fraction_bits = static_cast<int>(fb ? *fb : mb + *xb);
    if (d.fraction_bits < 0 || d.fraction_bits > 100)
      al.fail(fb ? "fraction_bits" : "extra_bits", "an alignment width F in 0..100 bits");
  }

  const TableReader pm = top.sub("promotion");
  pm.only({"every", "format", "rounding", "sr_bits", "seed"});
  d.promote_every = static_cast<int>(pm.integer("every", 0, 0, 1 << 24));
  if (d.promote_every > 0) {
    d.promotion_format = format_named(pm, "format", pm.required_str("format"), formats);
    check_accumulator_like(pm, "format", *d.promotion_format);
    d.promotion_rounding = read_rounding(pm, "", format::RoundingMode::nearest_even);
  }

  const TableReader od = top.sub("order");
  od.only({"kind", "chunks"});
  d.order = od.choice("kind", Order::sequential, kOrderNames);
  d.split_chunks = static_cast<int>(od.integer("chunks", 1, 1, 1 << 20));
  if (d.fused_terms > 64 && d.alignment != Alignment::exact) {
    bl.fail("fused_terms",
            "1..64 terms per fused block when alignment drops bits (0 = all of K needs mode = \"exact\")");
  }
  if (d.fused_terms == 0 && d.alignment != Alignment::exact) {
    bl.fail("fused_terms", "1..64 when alignment drops bits (0 = all of K needs alignment.mode = \"exact\")");
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
  if (names_float_gemm(d.name)) {
    throw SpecError(
        origin + ": datapath name '" + d.name +
        "' is reserved for the engine's own GEMM (eigen, fp32, native, none); expected another name");
  }
  items_.add(std::move(d), std::move(origin));
}

const Datapath* DatapathRegistry::find(std::string_view name) const { return items_.find(name); }

const Datapath& DatapathRegistry::get(std::string_view name) const { return items_.get(name); }

std::vector<std::string> DatapathRegistry::names() const { return items_.names(); }

const std::string& DatapathRegistry::origin(std::string_view name) const { return items_.origin(name); }

}  // namespace lpemu::datapath
