// The catalogue of element formats: the built-in files under formats/element/ (embedded at build
// time) plus user files from --formats-dir DIR and LPEMU_FORMATS_PATH.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "lpemu/detail/named_registry.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/format/format.hpp"

namespace lpemu::format {

/// Parses one element-format TOML document; `origin` (a path) names it in errors, which give
/// origin:line, the field, the value and what was expected.
Format parse_format_toml(std::string_view text, std::string_view origin);
/// The element-format TOML document of `f`, the exact inverse of parse_format_toml: reading it
/// gives a format equal to `f` (fields at their defaults, signed = true, zero = true,
/// fraction_bits = 0 and symmetric = false, are left out; the description is not part of Format).
std::string to_toml(const Format& f);

/// The `n` known names closest to `name` (edit distance), for "did you mean" messages.
using lpemu::detail::closest_names;

/// Element formats by name and alias.
class Registry {
 public:
  /// The built-in formats only.
  static const Registry& builtin();
  /// Built-ins, then every directory in LPEMU_FORMATS_PATH (':'-separated), then `dirs`.
  static Registry with_user_paths(const std::vector<std::filesystem::path>& dirs = {});

  /// Adds a format; throws SpecError if its name or an alias is taken by a different format.
  void add(Format f, std::string origin);
  /// Parses and adds one TOML file.
  void add_file(const std::filesystem::path& file);
  /// Adds DIR/*.toml and DIR/element/*.toml (block/ and datapath/ belong to other layers).
  void add_directory(const std::filesystem::path& dir);

  /// The format called `name` (or an alias); throws UnknownNameError with the closest names.
  const Format& get(std::string_view name) const;
  /// The format called `name`, or nullptr.
  const Format* find(std::string_view name) const;
  /// Canonical names in sorted order.
  std::vector<std::string> names() const;
  /// Where a format came from ("builtin:element/fp8_e4m3.toml" or a path).
  const std::string& origin(std::string_view name) const;

 private:
  lpemu::detail::NamedRegistry<Format> formats_{{"format", " (see `lpemu formats list`)"}};
};

}  // namespace lpemu::format
