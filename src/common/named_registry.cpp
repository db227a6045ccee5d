#include "lpemu/detail/named_registry.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "lpemu/detail/embedded.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/output.hpp"

namespace lpemu::detail {

void throw_name_taken(const RegistryKind& kind, const std::string& origin, const std::string& key,
                      const std::string& previous) {
  throw SpecError(origin + ": " + std::string(kind.noun) + " name '" + key + "' is already defined by " +
                  previous);
}

void throw_unknown_name(const RegistryKind& kind, std::string_view name,
                        const std::vector<std::string>& known) {
  throw UnknownNameError("unknown " + std::string(kind.noun) + " '" + std::string(name) + "'" +
                         closest_names_hint(name, known) + std::string(kind.list_hint));
}

std::vector<std::filesystem::path> user_spec_dirs(const std::vector<std::filesystem::path>& dirs) {
  std::vector<std::filesystem::path> out;
  if (const char* env = std::getenv("LPEMU_FORMATS_PATH"); env != nullptr) {
    std::string_view rest(env);
    while (!rest.empty()) {
      const auto colon = rest.find(':');
      const std::string_view dir = rest.substr(0, colon);
      if (!dir.empty()) out.emplace_back(dir);
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  out.insert(out.end(), dirs.begin(), dirs.end());
  return out;
}

void require_spec_dir(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) {
    throw IoError(dir.string() +
                  ": formats directory does not exist (from --formats-dir or LPEMU_FORMATS_PATH)");
  }
}

std::vector<std::filesystem::path> toml_files_in(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  if (!std::filesystem::is_directory(dir)) return files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".toml") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_spec_file(const std::filesystem::path& file, std::string_view noun) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec))
    throw IoError(file.string() + ": cannot open " + std::string(noun) + " file");
  return io::read_input(file, std::size_t{64} << 20);  // bounded: a device or FIFO cannot hang the load
}

std::string spec_text(const std::string& origin) {
  constexpr std::string_view kBuiltin = "builtin:";
  if (origin.rfind(kBuiltin, 0) == 0) {
    const std::string_view path = std::string_view(origin).substr(kBuiltin.size());
    for (const auto& e : embedded_specs()) {
      if (path == e.path) return e.text;
    }
    return {};
  }
  return std::filesystem::exists(origin) ? read_spec_file(origin, "spec") : std::string();
}

}  // namespace lpemu::detail
