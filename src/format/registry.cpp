#include "lpemu/format/registry.hpp"
#include "io/toml_util.hpp"

#include <algorithm>

#include "format/enum_names.hpp"
#include "io/toml.hpp"

#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::format {
namespace {

using io::detail::TableReader;

const std::vector<std::string_view> kFloatKeys = {"name",          "aliases",       "source", "kind",
                                                  "exponent_bits", "mantissa_bits", "bias",   "specials",
                                                  "subnormals",    "signed",        "zero",   "description"};
const std::vector<std::string_view> kIntKeys = {"name",   "aliases",       "source",    "kind",       "bits",
                                                "signed", "fraction_bits", "symmetric", "description"};

}  // namespace

Format parse_format_toml(std::string_view text, std::string_view origin) {
  const toml::table t = io::detail::parse(text, origin);
  const TableReader r(t, origin);
  Format f;
  f.name = r.required_str("name");
  if (f.name.empty()) r.fail("name", "a non-empty name");
  f.source = r.str("source");
  f.kind = r.choice("kind", Kind::floating, detail::kKindNames);
  r.only(f.kind == Kind::floating ? kFloatKeys : kIntKeys,
         "a known key for kind = \"" + std::string(to_string(f.kind)) + "\"");
  f.aliases = r.strings("aliases");
  f.is_signed = r.boolean("signed", true);
  if (f.kind == Kind::floating) {
    f.exponent_bits = static_cast<int>(r.required_integer("exponent_bits", 1, kMaxExponentBits));
    f.mantissa_bits = static_cast<int>(r.required_integer("mantissa_bits", 0, kMaxMantissaBits));
    const int ieee_bias = (1 << (f.exponent_bits - 1)) - 1;
    f.bias = static_cast<int>(r.integer("bias", ieee_bias, -100000, 100000, "an integer"));
    f.specials = r.choice("specials", Specials::ieee, detail::kSpecialsNames);
    f.subnormals = r.boolean("subnormals", true);
    f.has_zero = r.boolean("zero", true);
  } else {
    f.bits = static_cast<int>(
        r.required_integer("bits", kMinIntegerBits, kMaxIntegerBits, "an integer width in 2..32"));
    f.fraction_bits = static_cast<int>(r.integer("fraction_bits", 0, -1000, 1000));
    f.symmetric = r.boolean("symmetric", false);
  }
  try {
    f.finalize();
  } catch (const SpecError& e) {
    // Point at the line of the field the record's own check names ("field 'x' = ..."), if any.
    const std::string msg = e.what();
    const toml::node* at = &t;
    if (const auto k = msg.find("field '"); k != std::string::npos) {
      const auto end = msg.find('\'', k + 7);
      const std::string field = msg.substr(k + 7, end - k - 7);
      if (const toml::node* n = t.get(field)) at = n;
    }
    throw SpecError(io::detail::where(origin, at) + ": " + msg);
  }
  return f;
}

std::string to_toml(const Format& f) {
  io::detail::TomlWriter w;
  w.str("name", f.name);
  if (!f.aliases.empty()) w.strings("aliases", f.aliases);
  w.str_if("source", f.source);
  w.str("kind", to_string(f.kind));
  if (f.kind == Kind::floating) {
    w.integer("exponent_bits", f.exponent_bits)
        .integer("mantissa_bits", f.mantissa_bits)
        .integer("bias", f.bias);
    w.str("specials", to_string(f.specials)).boolean("subnormals", f.subnormals);
    if (!f.is_signed) w.boolean("signed", false);
    if (!f.has_zero) w.boolean("zero", false);
  } else {
    w.integer("bits", f.bits);
    if (!f.is_signed) w.boolean("signed", false);
    if (f.fraction_bits != 0) w.integer("fraction_bits", f.fraction_bits);
    if (f.symmetric) w.boolean("symmetric", true);
  }
  return w.text();
}
const Registry& Registry::builtin() {
  static const Registry kBuiltin = [] {
    Registry r;
    lpemu::detail::for_each_builtin_spec("element", [&](std::string_view text, const std::string& origin) {
      r.add(parse_format_toml(text, origin), origin);
    });
    return r;
  }();
  return kBuiltin;
}

Registry Registry::with_user_paths(const std::vector<std::filesystem::path>& dirs) {
  Registry r = builtin();
  for (const auto& d : lpemu::detail::user_spec_dirs(dirs)) r.add_directory(d);
  return r;
}

void Registry::add(Format f, std::string origin) { formats_.add(std::move(f), std::move(origin)); }

void Registry::add_file(const std::filesystem::path& file) {
  add(parse_format_toml(lpemu::detail::read_spec_file(file, "format"), file.string()), file.string());
}

void Registry::add_directory(const std::filesystem::path& dir) {
  lpemu::detail::require_spec_dir(dir);
  for (const auto& sub : {dir, dir / "element"}) {
    for (const auto& file : lpemu::detail::toml_files_in(sub)) add_file(file);
  }
}

const Format* Registry::find(std::string_view name) const { return formats_.find(name); }

const Format& Registry::get(std::string_view name) const { return formats_.get(name); }

std::vector<std::string> Registry::names() const { return formats_.names(); }

const std::string& Registry::origin(std::string_view name) const { return formats_.origin(name); }

}  // namespace lpemu::format
