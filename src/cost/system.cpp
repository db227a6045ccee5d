#include "lpemu/cost/system.hpp"

#include <algorithm>
#include <map>

#include "cost/embedded_data.hpp"
#include "io/record_files.hpp"
#include "io/toml.hpp"

#include "io/toml_util.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/registry.hpp"

namespace lpemu::cost {
namespace {

using io::detail::TableReader;

Link read_link(const TableReader& r) {
  r.only({"kind", "size", "torus_dims", "bandwidth_gb_s", "latency_us", "source", "unverified", "note",
          "achieved_gb_s", "achieved_source"});
  Link l;
  l.bandwidth_gb_s = r.required_number("bandwidth_gb_s", 1e-6, 1e9, "a positive bandwidth in GB/s");
  l.latency_us = r.required_number("latency_us", 0, 1e6, "a latency in microseconds (>= 0)");
  l.source = r.required_str("source");
  l.achieved_gb_s = r.number("achieved_gb_s", 0, 1e-6, l.bandwidth_gb_s,
                             "a measured bus bandwidth above 0 and at most bandwidth_gb_s");
  if (l.achieved_gb_s > 0) l.achieved_source = r.required_str("achieved_source");
  l.unverified = r.boolean("unverified", false);
  l.note = r.str("note");
  if (l.unverified && l.note.empty()) r.fail("note", "a note saying what is unverified");
  return l;
}

constexpr io::detail::RecordKind kSystemRecords{
    "system", "systems", " (to change a built-in one, copy its file under a new name)"};

// The built-in system files (data/systems/*.toml, embedded at build time).
std::vector<io::detail::RecordFile> builtin_systems() {
  std::vector<io::detail::RecordFile> out;
  for (const auto& f : cost::detail::embedded_cost_data()) {
    const std::string_view path = f.path;
    if (path.rfind("systems/", 0) == 0)
      out.push_back({std::string(f.text), "builtin:data/" + std::string(path)});
  }
  return out;
}

}  // namespace

System parse_system_toml(std::string_view text, std::string_view origin) {
  const toml::table t = io::detail::parse(text, origin);
  const TableReader r(t, origin);
  r.only({"name", "display_name", "device", "source", "devices_per_node", "max_devices", "scale_up",
          "scale_out", "kernel", "description"});
  System s;
  s.origin = std::string(origin);
  s.name = r.required_str("name");
  s.display_name = r.str("display_name", s.name);
  s.device = r.required_str("device");
  s.source = r.required_str("source");
  constexpr long long kMax = 1LL << 40;
  s.devices_per_node = r.required_integer("devices_per_node", 1, kMax, "a positive integer");
  s.max_devices = r.integer("max_devices", 0, 1, kMax, "a positive integer");

  const TableReader up = r.required_sub("scale_up");
  s.scale_up_kind = up.required_str("kind");
  if (s.scale_up_kind != "switch" && s.scale_up_kind != "torus") up.fail("kind", "\"switch\" or \"torus\"");
  s.scale_up = read_link(up);
  if (s.scale_up_kind == "switch") {
    s.scale_up_size =
        up.required_integer("size", 1, kMax, "a positive number of devices per scale-up domain");
    if (up.has("torus_dims")) up.fail("torus_dims", "no torus_dims for kind = \"switch\"");
  } else {
    constexpr std::string_view kDims = "an array of positive integers, e.g. [16, 16, 24]";
    s.torus_dims = up.integers<long long>("torus_dims", 1, kMax, kDims);
    if (s.torus_dims.empty()) up.fail("torus_dims", kDims);
    s.scale_up_size = 1;
    for (const long long d : s.torus_dims) s.scale_up_size *= d;
    if (up.has("size")) up.fail("size", "no size for kind = \"torus\" (it is the product of torus_dims)");
  }
  if (s.scale_up_kind == "switch" && s.scale_up_size % s.devices_per_node != 0 &&
      s.devices_per_node % s.scale_up_size != 0) {
    up.fail("size", "a multiple or divisor of devices_per_node = " + std::to_string(s.devices_per_node));
  }
  s.scale_out = read_link(r.required_sub("scale_out"));

  const TableReader kr = r.required_sub("kernel");
  kr.only({"units", "tile_m", "tile_n", "source", "unverified", "note"});
  s.kernel_units = kr.required_integer("units", 1, kMax, "a positive number of units that each run one tile");
  s.tile_m = kr.required_integer("tile_m", 1, 1 << 20, "a positive tile height");
  s.tile_n = kr.required_integer("tile_n", 1, 1 << 20, "a positive tile width");
  s.kernel_source = kr.required_str("source");
  return s;
}

namespace {

void write_link(io::detail::TomlWriter& w, const Link& l) {
  w.number("bandwidth_gb_s", l.bandwidth_gb_s).number("latency_us", l.latency_us).str("source", l.source);
  if (l.achieved_gb_s > 0)
    w.number("achieved_gb_s", l.achieved_gb_s).str("achieved_source", l.achieved_source);
  if (l.unverified) w.boolean("unverified", true);
  w.str_if("note", l.note);
}

}  // namespace

std::string to_toml(const System& s) {
  io::detail::TomlWriter w;
  w.str("name", s.name).str("display_name", s.display_name).str("device", s.device).str("source", s.source);
  w.integer("devices_per_node", s.devices_per_node);
  if (s.max_devices > 0) w.integer("max_devices", s.max_devices);
  w.table("scale_up").str("kind", s.scale_up_kind);
  if (s.scale_up_kind == "torus") {
    w.integers("torus_dims", s.torus_dims);
  } else {
    w.integer("size", s.scale_up_size);
  }
  write_link(w, s.scale_up);
  w.table("scale_out");
  write_link(w, s.scale_out);
  w.table("kernel").integer("units", s.kernel_units).integer("tile_m", s.tile_m).integer("tile_n", s.tile_n);
  w.str("source", s.kernel_source);
  return w.text();
}

System load_system(std::string_view name, const std::vector<std::filesystem::path>& dirs) {
  const io::detail::RecordFile f = io::detail::find_record(kSystemRecords, name, builtin_systems(), dirs);
  return parse_system_toml(f.text, f.origin);
}

std::vector<std::string> system_names(const std::vector<std::filesystem::path>& dirs) {
  return io::detail::record_names(kSystemRecords, builtin_systems(), dirs);
}

}  // namespace lpemu::cost
