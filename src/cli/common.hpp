// Shared pieces of the `lpemu` command: global options, registries, option groups, output.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <tbb/global_control.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "lpemu/block/block_format.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/engine/quantizer.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/format/rounding.hpp"

namespace lpemu::cli {

/// Options every command sees on top of the library's registries and factories.
struct Context : experiment::Context {
  int threads = 0;  ///< 0: oneTBB's default (all cores)

  /// The CLI's model/plan search directories: the executable's folder and its two parents,
  /// PREFIX/share/lpemu of an install, the source tree lpemu was built from, $LPEMU_DATA_DIR, the working
  /// directory.
  Context();
  /// Applies --threads for the rest of the process (only the CLI creates tbb::global_control).
  void apply_threads();

 private:
  std::unique_ptr<tbb::global_control> control_;
};

/// Strings behind the rounding/overflow options of one subcommand, parsed after CLI11 is done.
struct ConvertFlags {
  std::string rounding = "nearest_even";
  std::string overflow = "native";
  std::uint64_t seed = 0;
  int sr_bits = 32;
  bool ftz = false;
  bool daz = false;

  /// Adds --rounding, --overflow, --seed, --sr-bits, --ftz, --daz to `sub`.
  void add_to(CLI::App* sub, std::string default_overflow = "native");
  /// The validated options (throws lpemu::SpecError on a bad name).
  format::ConvertOptions options() const;
};

/// Parses an unsigned integer in decimal or 0x-hex; throws lpemu::Error naming `what`.
std::uint64_t parse_code(const std::string& text, const std::string& what);
/// Parses a real number (decimal, hex float, inf, nan); throws lpemu::Error naming `what`.
double parse_real(const std::string& text, const std::string& what);
/// Prints `j` and a newline to stdout; NaN and ±Inf numbers print as null, invalid UTF-8 as U+FFFD.
void print_json(const nlohmann::json& j);
/// Shortest decimal that round-trips a double ("448", "0.001953125", "inf", "nan", "-nan").
std::string format_real(double v);

}  // namespace lpemu::cli
