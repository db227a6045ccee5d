// Private: the built-in cores, embedded from data/cores/*.toml at build time.
#pragma once

#include <span>

namespace lpemu::core::detail {

/// One embedded file: its path relative to data/ ("cores/scalesim_32x32_os.toml") and its text.
struct EmbeddedFile {
  const char* path;
  const char* text;
};

/// Every data/cores/*.toml, sorted by path.
std::span<const EmbeddedFile> embedded_core_data();

}  // namespace lpemu::core::detail
