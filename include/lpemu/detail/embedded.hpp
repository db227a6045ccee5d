// Specs embedded into the library at build time from formats/ (cmake/lpemu_embed.cmake, in lpemu::common).
#pragma once

#include <span>

namespace lpemu::detail {

/// One embedded TOML file: its path relative to formats/ and its text.
struct EmbeddedSpec {
  const char* path;
  const char* text;
};

/// Every TOML file under formats/, sorted by path.
std::span<const EmbeddedSpec> embedded_specs();

}  // namespace lpemu::detail
