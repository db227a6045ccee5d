#include "lpemu/cost/system.hpp"

#include <algorithm>
#include <map>

#include "cost/embedded_data.hpp"
#include "cost/toml_read.hpp"
#include "lpemu/detail/named_registry.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/registry.hpp"

namespace lpemu::cost {
namespace {

using detail::fail;
using detail::Reader;

Link read_link(const toml::table& t, std::string_view origin, const std::string& prefix) {
  const Reader r{t, origin, prefix};
  r.only({"kind", "size", "torus_dims", "bandwidth_gb_s", "latency_us", "source", "unverified", "note"});
  Link l;
  l.bandwidth_gb_s = r.number("bandwidth_gb_s", true, 0, 1e-6, 1e9, "a positive bandwidth in GB/s");
  l.latency_us = r.number("latency_us", true, 0, 0, 1e6, "a latency in microseconds (>= 0)");
  l.source = r.str("source", true);
  l.unverified = r.boolean("unverified", false);
  l.note = r.str("note", false);
  if (l.unverified && l.note.empty())
    fail(origin, &t, prefix + "note", "(missing)", "a note saying what is unverified");
  return l;
}

// Every system file by name: built-ins first, then DIR/systems/*.toml in order; a name defined
// twice (a user file reusing a built-in name) is an error.
std::map<std::string, std::pair<std::string, std::string>> all_files(
    const std::vector<std::filesystem::path>& dirs) {
  std::map<std::string, std::pair<std::string, std::string>> out;
  auto add = [&](const std::string& text, const std::string& origin) {
    const toml::table t = detail::parse(text, origin);
    const std::string name = Reader{t, origin, ""}.str("name", true);
    if (const auto it = out.find(name); it != out.end()) {
      throw SpecError(
          origin + ": name = \"" + name + "\": the system '" + name + "' is already defined by " +
          it->second.second +
          "; expected a name of its own (to change a built-in one, copy its file under a new name)");
    }
    out[name] = {text, origin};
  };
  for (const auto& f : cost::detail::embedded_cost_data()) {
    const std::string_view path = f.path;
    if (path.rfind("systems/", 0) == 0) add(f.text, "builtin:data/" + std::string(path));
  }
  for (const auto& dir : dirs) {
    const auto sub = dir / "systems";
    if (!std::filesystem::is_directory(sub)) continue;
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(sub)) {
      if (e.path().extension() == ".toml") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) add(lpemu::detail::read_spec_file(file, "system"), file.string());
  }
  return out;
}

}  // namespace

System parse_system_toml(std::string_view text, std::string_view origin) {
  const toml::table t = detail::parse(text, origin);
  const Reader r{t, origin, ""};
  r.only({"name", "display_name", "device", "source", "devices_per_node", "max_devices", "scale_up",
          "scale_out", "kernel", "description"});
  System s;
  s.origin = std::string(origin);
  s.name = r.str("name", true);
  s.display_name = r.str("display_name", false, s.name);
  s.device = r.str("device", true);
  s.source = r.str("source", true);
  constexpr long long kMax = 1LL << 40;
  s.devices_per_node = r.integer("devices_per_node", true, 0, 1, kMax, "a positive integer");
  s.max_devices = r.integer("max_devices", false, 0, 1, kMax, "a positive integer");

  const toml::table* up = r.table("scale_up", true);
  const Reader ur{*up, origin, "scale_up."};
  s.scale_up_kind = ur.str("kind", true);
  if (s.scale_up_kind != "switch" && s.scale_up_kind != "torus") {
    fail(origin, up->get("kind"), "scale_up.kind", "\"" + s.scale_up_kind + "\"", "\"switch\" or \"torus\"");
  }
  s.scale_up = read_link(*up, origin, "scale_up.");
  if (s.scale_up_kind == "switch") {
    s.scale_up_size =
        ur.integer("size", true, 0, 1, kMax, "a positive number of devices per scale-up domain");
    if (up->get("torus_dims") != nullptr) {
      fail(origin, up->get("torus_dims"), "scale_up.torus_dims", detail::show(*up->get("torus_dims")),
           "no torus_dims for kind = \"switch\"");
    }
  } else {
    const toml::node* d = up->get("torus_dims");
    if (d == nullptr || !d->is_array() || d->as_array()->empty()) {
      fail(origin, d == nullptr ? static_cast<const toml::node*>(up) : d, "scale_up.torus_dims",
           d == nullptr ? "(missing)" : detail::show(*d), "an array of positive integers, e.g. [16, 16, 24]");
    }
    s.scale_up_size = 1;
    for (const auto& e : *d->as_array()) {
      if (!e.is_integer() || *e.value<std::int64_t>() < 1) {
        fail(origin, &e, "scale_up.torus_dims", detail::show(e), "a positive integer");
      }
      s.torus_dims.push_back(*e.value<std::int64_t>());
      s.scale_up_size *= s.torus_dims.back();
    }
    if (up->get("size") != nullptr) {
      fail(origin, up->get("size"), "scale_up.size", detail::show(*up->get("size")),
           "no size for kind = \"torus\" (it is the product of torus_dims)");
    }
  }
  if (s.scale_up_kind == "switch" && s.scale_up_size % s.devices_per_node != 0 &&
      s.devices_per_node % s.scale_up_size != 0) {
    fail(origin, up->get("size"), "scale_up.size", std::to_string(s.scale_up_size),
         "a multiple or divisor of devices_per_node = " + std::to_string(s.devices_per_node));
  }
  const toml::table* out = r.table("scale_out", true);
  s.scale_out = read_link(*out, origin, "scale_out.");

  const toml::table* k = r.table("kernel", true);
  const Reader kr{*k, origin, "kernel."};
  kr.only({"units", "tile_m", "tile_n", "source", "unverified", "note"});
  s.kernel_units = kr.integer("units", true, 0, 1, kMax, "a positive number of units that each run one tile");
  s.tile_m = kr.integer("tile_m", true, 0, 1, 1 << 20, "a positive tile height");
  s.tile_n = kr.integer("tile_n", true, 0, 1, 1 << 20, "a positive tile width");
  s.kernel_source = kr.str("source", true);
  return s;
}

System load_system(std::string_view name, const std::vector<std::filesystem::path>& dirs) {
  if (name.size() > 5 && name.substr(name.size() - 5) == ".toml") {
    return parse_system_toml(lpemu::detail::read_spec_file(std::filesystem::path(name), "system"), name);
  }
  const auto files = all_files(dirs);
  const auto it = files.find(std::string(name));
  if (it == files.end()) {
    std::vector<std::string> known;
    for (const auto& [k, v] : files) known.push_back(k);
    throw UnknownNameError("unknown system '" + std::string(name) + "'" +
                           lpemu::detail::closest_names_hint(name, known));
  }
  return parse_system_toml(it->second.first, it->second.second);
}

std::vector<std::string> system_names(const std::vector<std::filesystem::path>& dirs) {
  std::vector<std::string> out;
  for (const auto& [k, v] : all_files(dirs)) out.push_back(k);
  return out;
}

}  // namespace lpemu::cost
