// The `lpemu` command: parses arguments and calls the library (DESIGN.md: thin CLI).
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "lpemu/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"lpemu: bit-exact emulation of low-precision formats and datapaths"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "lpemu 0.1.0");
  lpemu::cli::Context ctx;
  app.add_option("--formats-dir", ctx.formats_dirs,
                 "extra directory of format files (DIR/*.toml, DIR/element, DIR/block, DIR/datapath); repeatable")
      ->check(CLI::ExistingDirectory);
  app.add_option("--threads", ctx.threads, "worker threads (default: all cores)")->check(CLI::PositiveNumber);
  lpemu::cli::register_formats(app, ctx);
  lpemu::cli::register_convert(app, ctx);
  lpemu::cli::register_quantize(app, ctx);
  lpemu::cli::register_engine(app, ctx);
  lpemu::cli::register_proposal(app, ctx);
  lpemu::cli::register_cost(app, ctx);
  lpemu::cli::register_datapath(app, ctx);
  lpemu::cli::register_gemm(app, ctx);
  lpemu::cli::register_sweep(app, ctx);
  lpemu::cli::register_import(app, ctx);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const lpemu::Error& e) {
    // Bad input (STYLE.md §3.5): the message names the file, field and value; exit status 2.
    std::cerr << "lpemu: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "lpemu: internal error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}
