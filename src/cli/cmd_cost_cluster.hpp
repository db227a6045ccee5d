// `lpemu cost` at cluster level: the options that select it (--system, --devices, --parallel,
// --search, --phase train) and the printing of training steps, searches and inference tables.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "cli/common.hpp"
#include "lpemu/app/price.hpp"

namespace CLI {
class App;
}

namespace lpemu::cli {

/// Every option of `lpemu cost` and its subcommands: the request the library prices, and the
/// `cost mac` options.
struct CostArgs {
  app::PriceRequest req;
  bool json = false;
  // mac
  std::string format, format_b, iso_target, iso_class = "bf16", iso_format;
};

/// Adds the cluster options (--system, --devices, --parallel, --search, training and
/// --batches) to `lpemu cost`, bound into `a`.
void add_cost_cluster_options(CLI::App* cmd, CostArgs& a);

/// Prints a cluster-level result as tables.
void print_cost_cluster(const app::PriceResult& r, const app::PriceRequest& req);

}  // namespace lpemu::cli
