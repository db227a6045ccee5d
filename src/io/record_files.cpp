#include "io/record_files.hpp"

#include "io/toml.hpp"
#include "io/toml_util.hpp"
#include "lpemu/detail/named_registry.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"

namespace lpemu::io::detail {

std::map<std::string, RecordFile> record_files(const RecordKind& kind,
                                               const std::vector<RecordFile>& builtins,
                                               const std::vector<std::filesystem::path>& dirs) {
  std::map<std::string, RecordFile> out;
  const auto add = [&](const std::string& text, const std::string& origin) {
    const toml::table t = parse(text, origin);
    const std::string name = TableReader(t, origin).required_str("name");
    if (const auto it = out.find(name); it != out.end()) {
      throw SpecError(origin + ": name = \"" + name + "\": the " + std::string(kind.noun) + " '" + name +
                      "' is already defined by " + it->second.origin + "; expected a name of its own" +
                      std::string(kind.redefine_hint));
    }
    out[name] = {text, origin};
  };
  for (const RecordFile& f : builtins) add(f.text, f.origin);
  for (const auto& dir : dirs) {
    for (const auto& file : lpemu::detail::toml_files_in(dir / kind.folder))
      add(lpemu::detail::read_spec_file(file, kind.noun), file.string());
  }
  return out;
}

RecordFile find_record(const RecordKind& kind, std::string_view name, const std::vector<RecordFile>& builtins,
                       const std::vector<std::filesystem::path>& dirs) {
  if (name.size() > 5 && name.substr(name.size() - 5) == ".toml")
    return {lpemu::detail::read_spec_file(std::filesystem::path(name), kind.noun), std::string(name)};
  auto files = record_files(kind, builtins, dirs);
  const auto it = files.find(std::string(name));
  if (it == files.end()) {
    std::vector<std::string> known;
    for (const auto& f : files) known.push_back(f.first);
    throw UnknownNameError("unknown " + std::string(kind.noun) + " '" + std::string(name) + "'" +
                           lpemu::detail::closest_names_hint(name, known));
  }
  return std::move(it->second);
}

std::vector<std::string> record_names(const RecordKind& kind, const std::vector<RecordFile>& builtins,
                                      const std::vector<std::filesystem::path>& dirs) {
  std::vector<std::string> out;
  for (const auto& f : record_files(kind, builtins, dirs)) out.push_back(f.first);
  return out;
}

}  // namespace lpemu::io::detail
