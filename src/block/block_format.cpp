#include "lpemu/block/block_format.hpp"
#include "io/toml_util.hpp"

#include <cmath>
#include <set>

#include "io/toml.hpp"

#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"

namespace lpemu::block {
namespace {

using io::detail::fail;
using io::detail::show;
using io::detail::where;

const std::set<std::string, std::less<>> kKeys = {
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

// The value `text` names in `table`; throws SpecError "field '<field>' = "<text>": expected one of ...".
template <class E, std::size_t N>
E parse_choice(std::string_view text, const EnumName<E> (&table)[N], std::string_view field) {
  if (const auto v = lpemu::detail::enum_value(table, text)) return *v;
  throw SpecError("field '" + std::string(field) + "' = \"" + std::string(text) + "\": expected one of " +
                  lpemu::detail::join_names(lpemu::detail::enum_spellings(table, "\"")));
}

}  // namespace

Granularity parse_granularity(std::string_view text) {
  return parse_choice(text, kGranularityNames, "granularity");
}

ScaleRule parse_scale_rule(std::string_view text) {
  return parse_choice(text, kScaleRuleNames, "scale_rule");
}

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
  for (const auto& [key, value] : t) {
    if (kKeys.find(key.str()) == kKeys.end()) {
      std::string list;
      for (const auto& k : kKeys) {
        if (!list.empty()) list += ", ";
        list += k;
      }
      fail(origin, &value, key.str(), show(value), "a known block-format key (" + list + ")");
    }
  }
  auto str = [&](std::string_view key, bool required, std::string def = {}) {
    const toml::node* n = t.get(key);
    if (n == nullptr) {
      if (required) fail(origin, &t, key, "(missing)", "a string");
      return def;
    }
    if (!n->is_string()) fail(origin, n, key, show(*n), "a string");
    return *n->value<std::string>();
  };
  auto integer = [&](std::string_view key, int def, long lo, long hi, std::string_view what) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return def;
    if (!n->is_integer()) fail(origin, n, key, show(*n), what);
    const auto v = *n->value<std::int64_t>();
    if (v < lo || v > hi) fail(origin, n, key, std::to_string(v), what);
    return static_cast<int>(v);
  };
  // An enumerated string field: errors keep file:line and list the choices.
  auto choice = [&](std::string_view key, std::string def, auto parse) {
    const std::string v = str(key, false, def);
    try {
      return parse(v);
    } catch (const SpecError& e) {
      throw SpecError(where(origin, t.get(key)) + ": " + e.what());
    }
  };
  auto element_format = [&](std::string_view key, const std::string& nm) -> format::Format {
    try {
      return elements.get(nm);
    } catch (const UnknownNameError& e) {
      throw UnknownNameError(where(origin, t.get(key)) + ": field '" + std::string(key) + "': " + e.what());
    }
  };

  BlockFormat f;
  f.name = str("name", true);
  if (f.name.empty()) fail(origin, t.get("name"), "name", "\"\"", "a non-empty name");
  f.source = str("source", false);
  f.description = str("description", false);
  if (const toml::node* a = t.get("aliases")) {
    const toml::array* arr = a->as_array();
    if (arr == nullptr) fail(origin, a, "aliases", show(*a), "an array of strings");
    for (const toml::node& e : *arr) {
      if (!e.is_string()) fail(origin, &e, "aliases", show(e), "an array of strings");
      f.aliases.push_back(*e.value<std::string>());
    }
  }
  f.element = element_format("element", str("element", true));
  f.scale_name = str("scale", true);
  if (f.scale_name == "pow2") {
    f.scale_is_pow2 = true;
  } else {
    f.scale = element_format("scale", f.scale_name);
    if (f.scale.kind != format::Kind::floating) {
      fail(origin, t.get("scale"), "scale", '"' + f.scale_name + '"',
           "\"pow2\" or a floating-point format such as \"e8m0\", \"fp8_e4m3\", \"fp32\"");
    }
  }
  f.granularity = choice("granularity", "block", parse_granularity);
  f.block_size = integer("block_size", 32, 1, 4096, "an integer in 1..4096");
  f.axis = integer("axis", -1, -64, 63, "an axis in -64..63 (negative counts from the end)");
  if (const toml::node* n = t.get("tile")) {
    const toml::array* arr = n->as_array();
    if (arr == nullptr || arr->size() != 2 || !(*arr)[0].is_integer() || !(*arr)[1].is_integer()) {
      fail(origin, n, "tile", show(*n), "two integers [rows, cols], each 1..4096");
    }
    const auto r = *(*arr)[0].value<std::int64_t>();
    const auto c = *(*arr)[1].value<std::int64_t>();
    if (r < 1 || r > 4096 || c < 1 || c > 4096)
      fail(origin, n, "tile", show(*n), "two integers [rows, cols], each 1..4096");
    f.tile_rows = static_cast<int>(r);
    f.tile_cols = static_cast<int>(c);
  }
  if (f.granularity == Granularity::tile && f.tile_rows == 0) {
    fail(origin, &t, "tile", "(missing)", "[rows, cols] with granularity = \"tile\"");
  }
  f.rule = choice("scale_rule", "ocp", parse_scale_rule);
  f.search_radius = integer("search_radius", 1, 1, 8, "an integer in 1..8");
  f.scale_rounding = choice("scale_rounding", "nearest_even", format::parse_rounding);
  f.element_options.rounding = choice("rounding", "nearest_even", format::parse_rounding);
  f.element_options.sr_bits = integer("sr_bits", 32, 1, 32, "an integer in 1..32");
  f.element_options.overflow = format::Overflow::saturate;
  f.nonfinite = choice("nonfinite", "nan_block",
                       [](std::string_view v) { return parse_choice(v, kNonFiniteNames, "nonfinite"); });
  f.scale_overflow = choice("scale_overflow", "nan", [](std::string_view v) {
    return parse_choice(v, kScaleOverflowNames, "scale_overflow");
  });
  f.subnormal_inputs = choice("subnormal_inputs", "keep", [](std::string_view v) {
    return parse_choice(v, kSubnormalInputsNames, "subnormal_inputs");
  });
  f.signed_zero = choice("signed_zero", "keep",
                         [](std::string_view v) { return parse_choice(v, kSignedZeroNames, "signed_zero"); });
  f.tensor_scale = choice("tensor_scale", "none", [](std::string_view v) {
    return parse_choice(v, kTensorScaleNames, "tensor_scale");
  });
  try {
    f.validate();
  } catch (const SpecError& e) {
    throw SpecError(where(origin, &t) + ": " + e.what());
  }
  return f;
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
