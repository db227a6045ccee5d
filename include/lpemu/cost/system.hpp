// Multi-device systems for the cluster-level cost model: the device (a hardware target), the
// scale-up domain (NVLink/NVSwitch or a TPU ICI torus), the scale-out network, and the GEMM
// tiling the device's kernels use (data/systems/*.toml).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace lpemu::cost {

/// One network level: bandwidth per device per direction and per-message latency.
struct Link {
  double bandwidth_gb_s = 0;  ///< 1e9 bytes/s, per device (switch) or per link (torus), one direction
  double latency_us = 0;      ///< per hop / per collective step
  std::string source;
  double achieved_gb_s = 0;  ///< bus bandwidth a collective benchmark measures on it (0: none published)
  std::string achieved_source;
  /// The bandwidth collectives run at: achieved_gb_s where published, else bandwidth_gb_s.
  double effective_gb_s() const { return achieved_gb_s > 0 ? achieved_gb_s : bandwidth_gb_s; }
  bool unverified = false;
  std::string note;

  friend bool operator==(const Link&, const Link&) = default;
};

/// A system: many copies of one device joined by a scale-up domain and a scale-out network.
struct System {
  std::string name, display_name, device, source, origin;
  long long devices_per_node = 1;
  std::string scale_up_kind;          ///< "switch" (NVLink/NVSwitch) or "torus" (TPU ICI)
  long long scale_up_size = 1;        ///< devices in one scale-up domain (torus: product of dims)
  std::vector<long long> torus_dims;  ///< torus only, e.g. {16, 16, 24}
  Link scale_up;                      ///< switch: per device; torus: per link (one direction)
  Link scale_out;                     ///< per device, all its NICs together (one direction)
  long long max_devices = 0;          ///< largest system described; 0 = no limit
  // GEMM kernel tiling (one output tile per compute unit at a time).
  long long kernel_units = 0;        ///< units that each run one output tile (SMs, MXUs)
  long long tile_m = 0, tile_n = 0;  ///< output tile of the device's GEMM kernels
  std::string kernel_source;

  /// Every field equal (`origin` included: compare systems read from the same place).
  friend bool operator==(const System&, const System&) = default;
};

/// Parses a system TOML document; errors name `origin`, the field, the value and what was expected.
System parse_system_toml(std::string_view text, std::string_view origin);
/// The system TOML document of `s`, the exact inverse of parse_system_toml (`origin` is not
/// written: reading the text from the same origin gives a system equal to `s`).
std::string to_toml(const System& s);

/// The system called `name`: a built-in (data/systems, embedded), a file DIR/systems/NAME.toml
/// from `dirs` (later wins), or a path ending in .toml. Throws UnknownNameError with suggestions.
System load_system(std::string_view name, const std::vector<std::filesystem::path>& dirs = {});

/// Names of the built-in systems and those under DIR/systems/ for each DIR in `dirs`, sorted.
std::vector<std::string> system_names(const std::vector<std::filesystem::path>& dirs = {});

}  // namespace lpemu::cost
