// The set of registries and factories that experiments, the `lpemu` command and the Python module
// share: element, block and datapath registries (built-ins, LPEMU_FORMATS_PATH, user directories),
// the quantiser and GEMM factories plans name, the cost catalog and the sweep Toolbox over them.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lpemu/block/block_format.hpp"
#include "lpemu/cost/catalog.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/quantizer.hpp"
#include "lpemu/experiment/sweep.hpp"
#include "lpemu/format/registry.hpp"

namespace lpemu::experiment {

/// `first`, then $LPEMU_DATA_DIR, then the working directory: where shipped models, plans and
/// experiments are looked up (NAME → data/models/NAME/model.h5, experiments/plans/NAME.toml).
std::vector<std::filesystem::path> data_search_dirs(std::vector<std::filesystem::path> first = {});

/// Registries and factories built once, on first use, from `formats_dirs` and `data_dirs`.
/// Set the directories and call add_*() before the first factory is used; the context must not
/// move once anything was built (objects it hands out point into it).
class Context {
 public:
  std::vector<std::filesystem::path> formats_dirs;  ///< user format directories (as --formats-dir)
  std::vector<std::filesystem::path> data_dirs = data_search_dirs();  ///< model/plan search dirs

  Context() = default;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  /// Element formats: built-ins, LPEMU_FORMATS_PATH, then formats_dirs.
  const format::Registry& formats();
  /// Block formats: built-ins, LPEMU_FORMATS_PATH, then formats_dirs (elements from formats()).
  const block::BlockRegistry& blocks();
  /// Datapaths: built-in presets, LPEMU_FORMATS_PATH, then formats_dirs.
  const datapath::DatapathRegistry& datapaths();
  /// Adds an element format; throws Error once the factories were built.
  void add_format(format::Format f, std::string origin);
  /// Adds a block format; throws Error once the factories were built.
  void add_block(block::BlockFormat f, std::string origin);
  /// Adds a datapath; throws Error once the factories were built.
  void add_datapath(datapath::Datapath d, std::string origin);

  /// Quantisers a plan may name (element and block formats).
  const engine::QuantizerFactory& quantizers();
  /// GEMM strategies a plan may name (the datapaths).
  const engine::GemmFactory& gemms();
  /// The cost model's built-in targets and shapes over formats(), blocks() and datapaths().
  cost::Catalog& costs();
  /// Everything run_sweep needs, pointing into this context.
  const Toolbox& toolbox();
  /// A plan: a .toml path, fp32/fp64, or NAME found as experiments/plans/NAME.toml in data_dirs.
  engine::PrecisionPlan load_plan(const std::string& name_or_path);
  /// A model: an .h5 path or NAME found as data/models/NAME/model.h5 in data_dirs.
  engine::Model load_model(const std::string& name_or_path) const;

 private:
  void check_open(const char* what) const;
  std::optional<format::Registry> formats_;
  std::optional<block::BlockRegistry> blocks_;
  std::optional<datapath::DatapathRegistry> datapaths_;
  std::optional<engine::QuantizerFactory> quantizers_;
  std::optional<engine::GemmFactory> gemms_;
  std::unique_ptr<cost::Catalog> costs_;
  std::optional<Toolbox> toolbox_;
};

}  // namespace lpemu::experiment
