// The cost model's data: hardware targets and model shapes (the files under data/{hardware,shapes}/
// embedded at build time, src/cost/sources.cmake; users add DIR/{hardware,shapes}/*.toml in the same
// user directories as formats — --formats-dir DIR, LPEMU_FORMATS_PATH, or --cost-dir DIR for one
// command — or name a .toml file directly), and the MAC view of the datapath records
// (formats/datapath/*.toml: the records the emulator runs). Plans are the engine's plan files,
// turned into LayerwisePlan by lpemu::experiment::layerwise_plan.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "lpemu/cost/mac_model.hpp"
#include "lpemu/cost/target.hpp"
#include "lpemu/cost/workload.hpp"
#include "lpemu/format/registry.hpp"

namespace lpemu::datapath {
class DatapathRegistry;
struct Datapath;
}  // namespace lpemu::datapath

namespace lpemu::cost {

/// Parses a model-shape TOML document.
ModelShape parse_shape_toml(std::string_view text, std::string_view origin);
/// The model-shape TOML document of `s`, the exact inverse of parse_shape_toml (`origin` is not
/// written: reading the text from the same origin gives a shape equal to `s`).
std::string to_toml(const ModelShape& s);

/// Named targets, shapes and datapaths.
class Catalog {
 public:
  /// Built-ins (embedded data/), then each DIR of LPEMU_FORMATS_PATH and `dirs`; `formats` and `blocks`
  /// (nullptr: the built-in block formats) resolve format names, `datapaths` (nullptr: the built-in presets)
  /// the datapath records; all must outlive the catalog.
  explicit Catalog(const format::Registry& formats, const std::vector<std::filesystem::path>& dirs = {},
                   const block::BlockRegistry* blocks = nullptr,
                   const datapath::DatapathRegistry* datapaths = nullptr);

  /// The target called `name` (or a path to a .toml); throws UnknownNameError with suggestions.
  const Target& target(std::string_view name);
  /// The model shape called `name` (or a .toml path).
  const ModelShape& shape(std::string_view name);
  /// The MAC view of the datapath record called `name` (or a .toml path); UnknownNameError if none.
  const MacDatapath& datapath(std::string_view name);
  /// Adds (or replaces) a datapath record for the rest of the catalog's life (e.g. a generated one).
  void add_datapath(const datapath::Datapath& d);

  /// Sorted target names.
  std::vector<std::string> target_names() const;
  /// Sorted model-shape names.
  std::vector<std::string> shape_names() const;
  /// Sorted datapath names.
  std::vector<std::string> datapath_names() const;

  /// The format registry in use.
  const format::Registry& formats() const { return formats_; }
  /// Resolves an element- or block-format name with this catalog's registries.
  CostFormat format(std::string_view name) const { return resolve_format(name, formats_, blocks_); }

  /// The user directories this catalog read (LPEMU_FORMATS_PATH, then `dirs`), for the records it
  /// does not hold itself (load_system).
  const std::vector<std::filesystem::path>& user_dirs() const { return user_dirs_; }

  /// Parses a hardware TOML; proposed targets are derived through this catalog.
  Target parse_target_toml(std::string_view text, std::string_view origin);

 private:
  struct Pending {
    std::string text, origin;
  };
  void add_text(std::string_view kind, const std::string& text, const std::string& origin);

  const format::Registry& formats_;
  const block::BlockRegistry* blocks_ = nullptr;
  const datapath::DatapathRegistry* datapath_records_ = nullptr;
  std::map<std::string, Pending, std::less<>> raw_targets_;
  std::map<std::string, Target, std::less<>> targets_;
  std::map<std::string, ModelShape, std::less<>> shapes_;
  std::map<std::string, MacDatapath, std::less<>> datapaths_;
  std::vector<std::string> resolving_;
  std::vector<std::filesystem::path> user_dirs_;
};

/// Result of spending a target's MAC-array area for one rate class on MACs of another format.
struct IsoArea {
  MacCost budget, candidate;
  double budget_macs_per_clock_per_unit = 0;
  long long macs_per_clock_per_unit = 0;  ///< floor(budget MACs x budget area / candidate area)
  double tflops = 0;                      ///< units x MACs/clock/unit x 2 x clock
};

/// How many `candidate` MACs fit in the area of `target`'s `budget_class` MACs (priced as
/// `budget_format`) on datapath `dp`, and the resulting peak rate. Throws SpecError if the
/// target does not publish units, clock and MACs/clock for `budget_class`.
IsoArea iso_area_peak(const Target& target, std::string_view budget_class, const CostFormat& budget_format,
                      const CostFormat& candidate, const MacDatapath& dp);

}  // namespace lpemu::cost
