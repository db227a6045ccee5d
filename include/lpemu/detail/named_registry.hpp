// The name/alias catalogue behind every spec registry: element formats (format::Registry), block
// formats (block::BlockRegistry) and datapaths (datapath::DatapathRegistry). Each item has a
// canonical name, optional aliases and an origin (where it was loaded from). Visible because those
// classes hold one as a member; not API.
#pragma once

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lpemu/detail/embedded.hpp"

namespace lpemu::detail {

/// How a registry names its items in messages: `noun` ("format", "block format", "datapath")
/// and `list_hint`, appended to unknown-name errors (empty, or " (see `lpemu formats list`)").
struct RegistryKind {
  std::string_view noun;
  std::string_view list_hint;
};

/// Throws SpecError "<origin>: <noun> name '<key>' is already defined by <previous>".
[[noreturn]] void throw_name_taken(const RegistryKind& kind, const std::string& origin,
                                   const std::string& key, const std::string& previous);
/// Throws UnknownNameError "unknown <noun> '<name>'; closest known names: a, b, c<list_hint>".
[[noreturn]] void throw_unknown_name(const RegistryKind& kind, std::string_view name,
                                     const std::vector<std::string>& known);

/// The user spec directories: each entry of LPEMU_FORMATS_PATH (':'-separated, empty ones skipped), then
/// `dirs`.
std::vector<std::filesystem::path> user_spec_dirs(const std::vector<std::filesystem::path>& dirs);
/// Throws IoError unless `dir` (from --formats-dir or LPEMU_FORMATS_PATH) is a directory.
void require_spec_dir(const std::filesystem::path& dir);
/// The *.toml files directly inside `dir`, sorted; none when `dir` is not a directory.
std::vector<std::filesystem::path> toml_files_in(const std::filesystem::path& dir);
/// The text of a spec file; throws IoError "<file>: cannot open <noun> file".
std::string read_spec_file(const std::filesystem::path& file, std::string_view noun);
/// The TOML text behind a registry origin ("builtin:element/fp8_e4m3.toml" or a file path); "" if
/// the origin names no embedded spec and no existing file.
std::string spec_text(const std::string& origin);

/// Calls f(text, origin) for each embedded spec under `folder`/ ("element", "block", "datapath"),
/// in path order, with origin "builtin:<folder>/<file>.toml".
template <class F>
void for_each_builtin_spec(std::string_view folder, F&& f) {
  const std::string prefix = std::string(folder) + "/";
  for (const EmbeddedSpec& spec : embedded_specs()) {
    const std::string_view path = spec.path;
    if (!path.starts_with(prefix)) continue;
    const std::string origin = "builtin:" + std::string(path);
    f(std::string_view(spec.text), origin);
  }
}

/// Items of type T (with a `name` and, optionally, `aliases`) by name and alias, each with its origin.
template <class T>
class NamedRegistry {
 public:
  /// An empty registry whose messages call its items `kind.noun`.
  explicit NamedRegistry(RegistryKind kind) : kind_(kind) {}

  /// Adds `item`; throws SpecError if its name or an alias is already taken.
  void add(T item, std::string origin) {
    std::vector<std::string> keys{item.name};
    if constexpr (requires { item.aliases; })
      keys.insert(keys.end(), item.aliases.begin(), item.aliases.end());
    for (const auto& k : keys) {
      if (const auto it = index_.find(k); it != index_.end())
        throw_name_taken(kind_, origin, k, origins_[it->second]);
    }
    for (auto& k : keys) index_.emplace(std::move(k), items_.size());
    items_.push_back(std::move(item));
    origins_.push_back(std::move(origin));
  }

  /// The item called `name` (or an alias), or nullptr.
  const T* find(std::string_view name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &items_[it->second];
  }

  /// The item called `name` (or an alias); throws UnknownNameError with the closest names.
  const T& get(std::string_view name) const { return items_[index_of(name)]; }

  /// Canonical names in sorted order.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(items_.size());
    for (const auto& item : items_) out.push_back(item.name);
    std::sort(out.begin(), out.end());
    return out;
  }

  /// Where the item called `name` came from; throws UnknownNameError like get().
  const std::string& origin(std::string_view name) const { return origins_[index_of(name)]; }

 private:
  // Index of the item called `name`; throws UnknownNameError with the closest names.
  std::size_t index_of(std::string_view name) const {
    if (const auto it = index_.find(name); it != index_.end()) return it->second;
    std::vector<std::string> known;
    known.reserve(index_.size());
    for (const auto& entry : index_) known.push_back(entry.first);
    throw_unknown_name(kind_, name, known);
  }

  RegistryKind kind_;
  std::vector<T> items_;
  std::vector<std::string> origins_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name or alias -> items_ index
};

}  // namespace lpemu::detail
