// Each file cmd_<verb>.cpp adds its subcommands to the `lpemu` app.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/common.hpp"

namespace lpemu::cli {

/// `lpemu formats list|show`, `lpemu encode`, `lpemu decode`.
void register_formats(CLI::App& app, Context& ctx);
/// `lpemu convert`.
void register_convert(CLI::App& app, Context& ctx);
/// `lpemu quantize`.
void register_quantize(CLI::App& app, Context& ctx);
/// `lpemu run`, `lpemu eval`, `lpemu replay`.
void register_engine(CLI::App& app, Context& ctx);
/// `lpemu proposal` and `lpemu proposal verify`.
void register_proposal(CLI::App& app, Context& ctx);
/// `lpemu cost`, `lpemu cost mac`, `lpemu cost targets`.
void register_cost(CLI::App& app, Context& ctx);
/// `lpemu dot`, `lpemu datapath-error`, `lpemu datapath list|show`.
void register_datapath(CLI::App& app, Context& ctx);
/// `lpemu core`.
void register_core(CLI::App& app, Context& ctx);
/// `lpemu gemm`.
void register_gemm(CLI::App& app, Context& ctx);
/// `lpemu import` (Hugging Face checkpoint folders).
void register_import(CLI::App& app, Context& ctx);
/// `lpemu sweep` and `lpemu sweep merge`.
void register_sweep(CLI::App& app, Context& ctx);

}  // namespace lpemu::cli
