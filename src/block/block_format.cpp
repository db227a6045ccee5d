#include "lpemu/block/block_format.hpp"
#include "io/toml_util.hpp"

#include <cmath>
#include <vector>

#include "format/enum_names.hpp"
#include "io/toml.hpp"

#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"

namespace lpemu::block {
namespace {

using io::detail::TableReader;

const std::vector<std::string_view> kKeys = {
    "name",       "aliases",        "source",           "description", "element",
    "scale",      "granularity",    "block_size",       "axis",        "tile",
    "scale_rule", "search_radius",  "scale_rounding",   "rounding",    "sr_bits",
    "nonfinite",  "scale_overflow", "subnormal_inputs", "signed_zero", "tensor_scale"};

using lpemu::detail::EnumName;

constexpr EnumName<Granularity> kGranularityNames[] = {{"block", Granularity::block},
                                                       {"tile", Granularity::tile},
                                                       {"per_tensor", Granularity::per_tensor},
                                                       {"per_row", Granularity::per_row},
                                                       {"per_column", Granularity::per_column}};
constexpr EnumName<ScaleRule> kScaleRuleNames[] = {{"ocp", ScaleRule::ocp},
                                                   {"ceil", ScaleRule::ceil},
                                                   {"rceil", ScaleRule::ceil},
                                                   {"even", ScaleRule::even},
                                                   {"amax_over_max", ScaleRule::amax_over_max},
                                                   {"search", ScaleRule::search}};
constexpr EnumName<NonFinite> kNonFiniteNames[] = {{"nan_block", NonFinite::nan_block},
                                                   {"ignore", NonFinite::ignore}};
constexpr EnumName<ScaleOverflow> kScaleOverflowNames[] = {{"nan", ScaleOverflow::nan},
                                                           {"clamp", ScaleOverflow::clamp}};
constexpr EnumName<SubnormalInputs> kSubnormalInputsNames[] = {{"keep", SubnormalInputs::keep},
                                                               {"flush", SubnormalInputs::flush},
                                                               {"flush_block", SubnormalInputs::flush_block}};
constexpr EnumName<SignedZero> kSignedZeroNames[] = {{"keep", SignedZero::keep},
                                                     {"positive", SignedZero::positive}};
constexpr EnumName<TensorScale> kTensorScaleNames[] = {{"none", TensorScale::none},
                                                       {"fp32", TensorScale::fp32}};

// The value `text` names in `table` (a name given outside a spec file, e.g. on the command line);
// throws SpecError "field '<field>' = "<text>": expected one of ...".
template <class E, std::size_t N>
E value_named(std::string_view text, const EnumName<E> (&table)[N], std::string_view field) {
  if (const auto v = lpemu::detail::enum_value(table, text)) return *v;
  throw SpecError("field '" + std::string(field) + "' = \"" + std::string(text) + "\": expected one of " +
                  lpemu::detail::join_names(lpemu::detail::enum_spellings(table, "\"")));
}

}  // namespace

Granularity parse_granularity(std::string_view text) {
  return value_named(text, kGranularityNames, "granularity");
}

ScaleRule parse_scale_rule(std::string_view text) { return value_named(text, kScaleRuleNames, "scale_rule"); }

std::string_view to_string(Granularity g) { return lpemu::detail::enum_name(kGranularityNames, g); }
std::string_view to_string(ScaleRule r) { return lpemu::detail::enum_name(kScaleRuleNames, r); }
std::string_view to_string(NonFinite n) { return lpemu::detail::enum_name(kNonFiniteNames, n); }
std::string_view to_string(ScaleOverflow o) { return lpemu::detail::enum_name(kScaleOverflowNames, o); }
std::string_view to_string(SubnormalInputs s) { return lpemu::detail::enum_name(kSubnormalInputsNames, s); }
std::string_view to_string(SignedZero s) { return lpemu::detail::enum_name(kSignedZeroNames, s); }
std::string_view to_string(TensorScale t) { return lpemu::detail::enum_name(kTensorScaleNames, t); }

int BlockFormat::element_emax() const { return std::ilogb(element.max_finite); }

int BlockFormat::scale_min_exponent() const {
  if (scale_is_pow2) return -1074;
  return std::ilogb(scale.min_subnormal);
}

int BlockFormat::scale_max_exponent() const {
  if (scale_is_pow2) return 1023;
  return std::ilogb(scale.max_finite);
}

void BlockFormat::validate() const {
  auto bad = [&](std::string_view field, const std::string& value, std::string_view expected) {
    throw SpecError("block format '" + name + "': field '" + std::string(field) + "' = " + value +
                    ": expected " + std::string(expected));
  };
  if (name.empty()) bad("name", "\"\"", "a non-empty name");
  if (element.max_finite <= 0 || !element.is_signed) {
    bad("element", '"' + element.name + '"', "a signed element format");
  }
  if (!scale_is_pow2) {
    if (scale.kind != format::Kind::floating)
      bad("scale", '"' + scale.name + '"', "a floating-point scale format or \"pow2\"");
  }
  if (granularity == Granularity::block && (block_size < 1 || block_size > 4096)) {
    bad("block_size", std::to_string(block_size), "an integer in 1..4096");
  }
  if (granularity == Granularity::tile &&
      (tile_rows < 1 || tile_rows > 4096 || tile_cols < 1 || tile_cols > 4096)) {
    bad("tile", "[" + std::to_string(tile_rows) + ", " + std::to_string(tile_cols) + "]",
        "two integers in 1..4096, e.g. [16, 16]");
  }
  if (search_radius < 1 || search_radius > 8) bad("search_radius", std::to_string(search_radius), "1..8");
  if (scale_is_pow2 && rule == ScaleRule::amax_over_max) {
    bad("scale_rule", "\"amax_over_max\"",
        "a power-of-two rule (ocp, ceil, even, search) with scale = \"pow2\"");
  }
  if (nonfinite == NonFinite::nan_block && !scale_is_pow2 && !scale.has_nan()) {
    bad("nonfinite", "\"nan_block\"", "\"ignore\" with a scale format that has no NaN");
  }
  if (scale_overflow == ScaleOverflow::nan && !scale_is_pow2 && !scale.has_nan()) {
    bad("scale_overflow", "\"nan\"", "\"clamp\" with a scale format that has no NaN");
  }
  if (tensor_scale != TensorScale::none &&
      (scale_is_pow2 || (rule != ScaleRule::amax_over_max && rule != ScaleRule::search))) {
    bad("tensor_scale", '"' + std::string(to_string(tensor_scale)) + '"',
        "\"none\" unless the scale format is not \"pow2\" and scale_rule is amax_over_max or search");
  }
  format::validate(element_options);
}

BlockFormat parse_block_format_toml(std::string_view text, std::string_view origin,
                                    const format::Registry& elements) {
  const toml::table t = io::detail::parse(text, origin);
  const TableReader r(t, origin);
  r.only(kKeys);
  auto element_format = [&](std::string_view key, const std::string& nm) -> format::Format {
    if (const format::Format* e = elements.find(nm)) return *e;
    throw UnknownNameError(r.message(key, '"' + nm + '"',
                                     "a known element format (see `lpemu formats list`)" +
                                         lpemu::detail::closest_names_hint(nm, elements.names())));
  };

  BlockFormat f;
  f.name = r.required_str("name");
  if (f.name.empty()) r.fail("name", "a non-empty name");
  f.source = r.str("source");
  f.description = r.str("description");
  f.aliases = r.strings("aliases");
  f.element = element_format("element", r.required_str("element"));
  f.scale_name = r.required_str("scale");
  if (f.scale_name == "pow2") {
    f.scale_is_pow2 = true;
  } else {
    f.scale = element_format("scale", f.scale_name);
    if (f.scale.kind != format::Kind::floating) {
      r.fail("scale", "\"pow2\" or a floating-point format such as \"e8m0\", \"fp8_e4m3\", \"fp32\"");
    }
  }
  f.granularity = r.choice("granularity", Granularity::block, kGranularityNames);
  f.block_size = static_cast<int>(r.integer("block_size", 32, 1, 4096));
  f.axis =
      static_cast<int>(r.integer("axis", -1, -64, 63, "an axis in -64..63 (negative counts from the end)"));
  if (r.has("tile")) {
    const auto tile = r.integers("tile", 1, 4096, "two integers [rows, cols], each 1..4096");
    if (tile.size() != 2) r.fail("tile", "two integers [rows, cols], each 1..4096");
    f.tile_rows = tile[0];
    f.tile_cols = tile[1];
  }
  if (f.granularity == Granularity::tile && f.tile_rows == 0) {
    r.fail("tile", "[rows, cols] with granularity = \"tile\"");
  }
  f.rule = r.choice("scale_rule", ScaleRule::ocp, kScaleRuleNames);
  f.search_radius = static_cast<int>(r.integer("search_radius", 1, 1, 8));
  f.scale_rounding =
      r.choice("scale_rounding", format::RoundingMode::nearest_even, format::detail::kRoundingNames);
  f.element_options.rounding =
      r.choice("rounding", format::RoundingMode::nearest_even, format::detail::kRoundingNames);
  f.element_options.sr_bits = static_cast<int>(r.integer("sr_bits", 32, 1, 32));
  f.element_options.overflow = format::Overflow::saturate;
  f.nonfinite = r.choice("nonfinite", NonFinite::nan_block, kNonFiniteNames);
  f.scale_overflow = r.choice("scale_overflow", ScaleOverflow::nan, kScaleOverflowNames);
  f.subnormal_inputs = r.choice("subnormal_inputs", SubnormalInputs::keep, kSubnormalInputsNames);
  f.signed_zero = r.choice("signed_zero", SignedZero::keep, kSignedZeroNames);
  f.tensor_scale = r.choice("tensor_scale", TensorScale::none, kTensorScaleNames);
  try {
    f.validate();
  } catch (const SpecError& e) {
    throw SpecError(io::detail::where(origin, &t) + ": " + e.what());
  }
  return f;
}

std::string to_toml(const BlockFormat& f) {
  io::detail::TomlWriter w;
  w.str("name", f.name);
  w.strings_if("aliases", f.aliases);
  w.str_if("source", f.source);
  w.str_if("description", f.description);
  w.str("element", f.element.name).str("scale", f.scale_name);
  w.str("granularity", to_string(f.granularity));
  w.integer("block_size", f.block_size).integer("axis", f.axis);
  if (f.tile_rows != 0 || f.tile_cols != 0) w.integers("tile", std::vector<int>{f.tile_rows, f.tile_cols});
  w.str("scale_rule", to_string(f.rule)).integer("search_radius", f.search_radius);
  w.str("scale_rounding", format::to_string(f.scale_rounding));
  w.str("rounding", format::to_string(f.element_options.rounding))
      .integer("sr_bits", f.element_options.sr_bits);
  w.str("nonfinite", to_string(f.nonfinite)).str("scale_overflow", to_string(f.scale_overflow));
  w.str("subnormal_inputs", to_string(f.subnormal_inputs)).str("signed_zero", to_string(f.signed_zero));
  w.str("tensor_scale", to_string(f.tensor_scale));
  return w.text();
}

const BlockRegistry& BlockRegistry::builtin() {
  static const BlockRegistry kBuiltin = [] {
    BlockRegistry r;
    const format::Registry& elements = format::Registry::builtin();
    lpemu::detail::for_each_builtin_spec("block", [&](std::string_view text, const std::string& origin) {
      r.add(parse_block_format_toml(text, origin, elements), origin);
    });
    check_no_element_names(r, elements);
    return r;
  }();
  return kBuiltin;
}

BlockRegistry BlockRegistry::with_user_paths(const format::Registry& elements,
                                             const std::vector<std::filesystem::path>& dirs) {
  BlockRegistry r = builtin();
  for (const auto& d : lpemu::detail::user_spec_dirs(dirs)) r.add_directory(d, elements);
  check_no_element_names(r, elements);  // also catches a user element format named like a built-in block
  return r;
}

void check_no_element_names(const BlockRegistry& blocks, const format::Registry& elements) {
  for (const auto& name : blocks.names()) {
    const BlockFormat& b = blocks.get(name);
    std::vector<std::string> keys{b.name};
    keys.insert(keys.end(), b.aliases.begin(), b.aliases.end());
    for (const auto& k : keys) {
      const format::Format* e = elements.find(k);
      if (e == nullptr) continue;
      throw SpecError(
          blocks.origin(name) + ": block format " + (k == b.name ? "name" : "alias") + " '" + k +
          "' is already the element format " +
          (e->name == k ? "'" + k + "'" : "'" + e->name + "' (alias '" + k + "')") + " from " +
          elements.origin(e->name) +
          "; expected a name no element format uses (element and block formats share one namespace)");
    }
  }
}

void BlockRegistry::add(BlockFormat f, std::string origin) { formats_.add(std::move(f), std::move(origin)); }

void BlockRegistry::add_file(const std::filesystem::path& file, const format::Registry& elements) {
  add(parse_block_format_toml(lpemu::detail::read_spec_file(file, "block format"), file.string(), elements),
      file.string());
}

void BlockRegistry::add_directory(const std::filesystem::path& dir, const format::Registry& elements) {
  lpemu::detail::require_spec_dir(dir);
  for (const auto& file : lpemu::detail::toml_files_in(dir / "block")) add_file(file, elements);
}

const BlockFormat* BlockRegistry::find(std::string_view name) const { return formats_.find(name); }

const BlockFormat& BlockRegistry::get(std::string_view name) const { return formats_.get(name); }

std::vector<std::string> BlockRegistry::names() const { return formats_.names(); }

const std::string& BlockRegistry::origin(std::string_view name) const { return formats_.origin(name); }

std::string describe_granularity(const BlockFormat& f) {
  std::string g(to_string(f.granularity));
  if (f.granularity == Granularity::block) g += " " + std::to_string(f.block_size);
  if (f.granularity == Granularity::tile)
    g += " " + std::to_string(f.tile_rows) + "x" + std::to_string(f.tile_cols);
  return g;
}

std::string describe_scale(const BlockFormat& f) {
  std::string s = f.scale_is_pow2 ? "pow2" : f.scale.name;
  if (f.tensor_scale == TensorScale::fp32) s += " + fp32";
  return s;
}

BlockFormat with_overrides(BlockFormat f, const BlockOverrides& o) {
  if (o.block_size) {
    f.granularity = Granularity::block;
    f.block_size = *o.block_size;
  }
  if (o.axis) f.axis = *o.axis;
  if (!o.scale_rule.empty()) f.rule = parse_scale_rule(o.scale_rule);
  const format::ConvertOptions& e = o.element_options;
  if (e.overflow != format::Overflow::saturate) {
    throw SpecError("overflow native: block formats always clamp elements to ±max (use saturate)");
  }
  if (e.flush_subnormal_outputs) throw SpecError("ftz is not supported with block formats");
  f.element_options.rounding = e.rounding;
  f.element_options.seed = e.seed;
  f.element_options.sr_bits = e.sr_bits;
  if (e.flush_subnormal_inputs) f.subnormal_inputs = SubnormalInputs::flush;
  f.validate();
  return f;
}

}  // namespace lpemu::block
