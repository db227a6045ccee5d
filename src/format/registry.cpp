#include "lpemu/format/registry.hpp"
#include "io/toml_util.hpp"

#include <algorithm>
#include <set>

#include "io/toml.hpp"

#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::format {
namespace {

using io::detail::fail;
using io::detail::show;
using io::detail::where;

struct Reader {
  const toml::table& t;
  std::string_view origin;

  const toml::node* node(std::string_view key) const { return t.get(key); }

  std::string str(std::string_view key, bool required, std::string def = {}) const {
    const toml::node* n = node(key);
    if (n == nullptr) {
      if (required) fail(origin, &t, key, "(missing)", "a string");
      return def;
    }
    if (!n->is_string()) fail(origin, n, key, show(*n), "a string");
    return *n->value<std::string>();
  }

  int integer(std::string_view key, bool required, int def, long lo, long hi, std::string_view what) const {
    const toml::node* n = node(key);
    if (n == nullptr) {
      if (required) fail(origin, &t, key, "(missing)", what);
      return def;
    }
    if (!n->is_integer()) fail(origin, n, key, show(*n), what);
    const auto v = *n->value<std::int64_t>();
    if (v < lo || v > hi) fail(origin, n, key, std::to_string(v), what);
    return static_cast<int>(v);
  }

  bool boolean(std::string_view key, bool def) const {
    const toml::node* n = node(key);
    if (n == nullptr) return def;
    if (!n->is_boolean()) fail(origin, n, key, show(*n), "true or false");
    return *n->value<bool>();
  }
};

const std::set<std::string, std::less<>> kFloatKeys = {
    "name", "aliases",  "source",     "kind",   "exponent_bits", "mantissa_bits",
    "bias", "specials", "subnormals", "signed", "zero",          "description"};
const std::set<std::string, std::less<>> kIntKeys = {
    "name", "aliases", "source", "kind", "bits", "signed", "fraction_bits", "symmetric", "description"};

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1);
  std::vector<std::size_t> cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

Format parse_format_toml(std::string_view text, std::string_view origin) {
  const toml::table t = io::detail::parse(text, origin);
  const Reader r{t, origin};
  Format f;
  f.name = r.str("name", true);
  if (f.name.empty()) fail(origin, r.node("name"), "name", "\"\"", "a non-empty name");
  f.source = r.str("source", false);
  const std::string kind = r.str("kind", false, "float");
  if (kind != "float" && kind != "int")
    fail(origin, r.node("kind"), "kind", '"' + kind + '"', "\"float\" or \"int\"");
  f.kind = kind == "float" ? Kind::floating : Kind::integer;
  const auto& allowed = f.kind == Kind::floating ? kFloatKeys : kIntKeys;
  for (const auto& [key, value] : t) {
    if (allowed.find(key.str()) == allowed.end()) {
      std::string list;
      for (const auto& k : allowed) {
        if (!list.empty()) list += ", ";
        list += k;
      }
      fail(origin, &value, key.str(), show(value), "a known key for kind = \"" + kind + "\" (" + list + ")");
    }
  }
  if (const toml::node* a = r.node("aliases")) {
    const toml::array* arr = a->as_array();
    if (arr == nullptr) fail(origin, a, "aliases", show(*a), "an array of strings");
    for (const toml::node& e : *arr) {
      if (!e.is_string()) fail(origin, &e, "aliases", show(e), "an array of strings");
      f.aliases.push_back(*e.value<std::string>());
    }
  }
  f.is_signed = r.boolean("signed", true);
  if (f.kind == Kind::floating) {
    f.exponent_bits = r.integer("exponent_bits", true, 0, 1, kMaxExponentBits, "an integer in 1..11");
    f.mantissa_bits = r.integer("mantissa_bits", true, 0, 0, kMaxMantissaBits, "an integer in 0..52");
    const int ieee_bias = (1 << (f.exponent_bits - 1)) - 1;
    f.bias = r.integer("bias", false, ieee_bias, -100000, 100000, "an integer");
    const std::string sp = r.str("specials", false, "ieee");
    if (sp != "ieee" && sp != "fn" && sp != "fnuz" && sp != "none") {
      fail(origin, r.node("specials"), "specials", '"' + sp + '"',
           "one of \"ieee\", \"fn\", \"fnuz\", \"none\"");
    }
    f.specials = parse_specials(sp);
    f.subnormals = r.boolean("subnormals", true);
    f.has_zero = r.boolean("zero", true);
  } else {
    f.bits = r.integer("bits", true, 0, kMinIntegerBits, kMaxIntegerBits, "an integer width in 2..32");
    f.fraction_bits = r.integer("fraction_bits", false, 0, -1000, 1000, "an integer in -1000..1000");
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
    throw SpecError(where(origin, at) + ": " + msg);
  }
  return f;
}

std::vector<std::string> closest_names(std::string_view name, const std::vector<std::string>& known,
                                       std::size_t n) {
  std::vector<std::pair<std::size_t, std::string>> scored;
  scored.reserve(known.size());
  for (const auto& k : known) {
    const bool contains = k.find(name) != std::string::npos || std::string(name).find(k) != std::string::npos;
    scored.emplace_back(contains ? 0 : edit_distance(name, k), k);
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (std::size_t i = 0; i < scored.size() && i < n; ++i) out.push_back(scored[i].second);
  return out;
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
