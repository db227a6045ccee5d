// Each file cmd_<verb>.cpp adds its subcommands to the `lpemu` app.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/common.hpp"

namespace lpemu::cli {

/// `lpemu formats list|show`, `lpemu encode`, `lpemu decode`.
void register_formats(CLI::App& app, Context& ctx);
/// `lpemu convert`.
void register_convert(CLI::App& app, Context& ctx);
/// `lpemu run`, `lpemu eval`, `lpemu replay`.
void register_engine(CLI::App& app, Context& ctx);
/// `lpemu sweep` and `lpemu sweep merge`.
void register_sweep(CLI::App& app, Context& ctx);
/// `lpemu proposal` and `lpemu proposal verify`.
void register_proposal(CLI::App& app, Context& ctx);

}  // namespace lpemu::cli
