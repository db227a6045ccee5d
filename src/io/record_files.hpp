// Private: named TOML records of one kind (compute cores, systems, ...) — the built-in texts
// embedded at build time, then DIR/<folder>/*.toml of each user directory, keyed by their `name`
// field — and the lookup of one by name or by its .toml path.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace lpemu::io::detail {

/// One record's TOML text and where it came from ("builtin:data/cores/<name>.toml" or a file path).
struct RecordFile {
  std::string text, origin;
};

/// Where the records of one kind live and how messages name them.
struct RecordKind {
  std::string_view noun;           ///< "core", "system"
  std::string_view folder;         ///< the user directories' sub-folder: "cores", "systems"
  std::string_view redefine_hint;  ///< appended to the "already defined" error ("" for none)
};

/// Every record of `kind` by its `name` field: `builtins` in order, then DIR/<folder>/*.toml for
/// each of `dirs`; a name defined twice throws SpecError naming both origins.
std::map<std::string, RecordFile> record_files(const RecordKind& kind,
                                               const std::vector<RecordFile>& builtins,
                                               const std::vector<std::filesystem::path>& dirs);

/// The record called `name` (as record_files finds them), or the file `name` itself when it ends in
/// ".toml"; throws UnknownNameError "unknown <noun> '<name>'" with the closest names.
RecordFile find_record(const RecordKind& kind, std::string_view name, const std::vector<RecordFile>& builtins,
                       const std::vector<std::filesystem::path>& dirs);

/// The names of every record of `kind`, sorted.
std::vector<std::string> record_names(const RecordKind& kind, const std::vector<RecordFile>& builtins,
                                      const std::vector<std::filesystem::path>& dirs);

}  // namespace lpemu::io::detail
