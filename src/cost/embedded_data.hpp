// Private: the cost model's built-in data files, embedded from data/ at build time.
#pragma once

#include <span>

namespace lpemu::cost::detail {

/// One embedded file: its path relative to data/ ("hardware/h100_sxm.toml") and its text.
struct EmbeddedFile {
  const char* path;
  const char* text;
};

/// Every data/{hardware,shapes,plans,datapaths}/*.toml, sorted by path.
std::span<const EmbeddedFile> embedded_cost_data();

}  // namespace lpemu::cost::detail
