// Each file cmd_<verb>.cpp adds its subcommands to the `lpemu` app.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "cli/common.hpp"

namespace lpemu::cli {

/// A command's application-layer request and its `--json` flag: what the command's callback reads
/// (one static instance per command, bound to its options).
template <class Request>
struct RequestArgs {
  Request req;
  bool json = false;
};

/// Adds `--json` to `sub` and its callback: runs `run(args.req)` (one application function) and
/// prints the result's fields as JSON with `--json`, else prints it as text with `print(result)`.
template <class Request, class Run, class Print>
void json_or_text(CLI::App* sub, RequestArgs<Request>& args, const char* text_is, Run run, Print print) {
  sub->add_flag("--json", args.json, std::string("print JSON instead of ") + text_is);
  sub->callback([&args, run, print] {
    const auto result = run(args.req);
    if (args.json) {
      print_json(fields(result));  // app::fields, found by argument-dependent lookup
      return;
    }
    print(result);
  });
}

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
