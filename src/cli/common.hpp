// Shared pieces of the `lpemu` command: global options, registries, option groups, output.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tbb/global_control.h>

#include "lpemu/block/block_format.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/engine/quantizer.hpp"
#include "lpemu/experiment/sweep.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/format/rounding.hpp"

namespace lpemu::cli {

/// Options every command sees, and what is built from them on first use.
struct Context {
  std::vector<std::filesystem::path> formats_dirs;
  int threads = 0;  ///< 0: oneTBB's default (all cores)

  /// Applies --threads for the rest of the process (only the CLI creates tbb::global_control).
  void apply_threads();
  /// Element formats: built-ins, LPEMU_FORMATS_PATH, then --formats-dir.
  const format::Registry& formats();
  /// Block formats: built-ins, LPEMU_FORMATS_PATH, then --formats-dir (elements from formats()).
  const block::BlockRegistry& blocks();
  /// Datapaths: built-in presets, LPEMU_FORMATS_PATH, then --formats-dir.
  const datapath::DatapathRegistry& datapaths();
  /// Adds an element format for the rest of the invocation (e.g. one named by its .toml file).
  void add_format(format::Format f, std::string origin);
  /// Adds a block format for the rest of the invocation.
  void add_block(block::BlockFormat f, std::string origin);
  /// Adds a datapath for the rest of the invocation.
  void add_datapath(datapath::Datapath d, std::string origin);

 private:
  std::optional<format::Registry> formats_;
  std::optional<block::BlockRegistry> blocks_;
  std::optional<datapath::DatapathRegistry> datapaths_;
  std::unique_ptr<tbb::global_control> control_;
};

/// Directories where shipped models, plans and experiments are looked up: the executable's folder
/// and its two parents, the source tree lpemu was built from, $LPEMU_DATA_DIR, the working dir.
std::vector<std::filesystem::path> data_search_dirs();

/// Everything a precision plan may name (formats, block formats, GEMM datapaths), built once.
struct PlanTools {
  engine::QuantizerFactory quantizers;
  engine::GemmFactory gemms;
  std::unique_ptr<cost::Catalog> costs;  ///< built-in hardware targets, shapes and cost datapaths
  experiment::Toolbox tools;  ///< points into this object: PlanTools never moves
};

/// The plan tools for this invocation (honours --formats-dir and LPEMU_FORMATS_PATH).
std::unique_ptr<PlanTools> make_plan_tools(Context& ctx);

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
