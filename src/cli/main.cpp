// The `lpemu` command: parses arguments and calls the library.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/io/output_transaction.hpp"

namespace {

// True for "-1", "-2.5e3", "-inf", "-nan", "-0x1p3": a value, not an option. CLI11 2.1 reads any
// word after '-' as a short option, so such words are passed on with a leading space, which
// strtod/strtoll (CLI11's conversions and cli::parse_real) skip.
bool negative_number(const char* a) {
  if (a[0] != '-' || a[1] == '\0' || a[1] == '-') return false;
  char* end = nullptr;
  std::strtod(a, &end);
  return end != a && *end == '\0';
}

int run(int argc, char** argv) {
  // A write past the file-size limit (RLIMIT_FSIZE) fails with EFBIG instead of killing the process
  // with SIGXFSZ, so the writer reports it, removes its temporary file and exits 2.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"lpemu: bit-exact emulation of low-precision formats and datapaths"};
  app.name("lpemu");  // parse(vector) below does not take the name from argv[0]
  app.require_subcommand(1);
  app.set_version_flag("--version", "lpemu 0.1.0");
  lpemu::cli::Context ctx;
  app.add_option(
         "--formats-dir", ctx.formats_dirs,
         "extra directory of format files (DIR/*.toml, DIR/element, DIR/block, DIR/datapath); repeatable")
      ->check(CLI::ExistingDirectory);
  app.add_option("--threads", ctx.threads, "worker threads (default: all cores)")
      ->check(CLI::Range(1, 65536));
  lpemu::cli::register_formats(app, ctx);
  lpemu::cli::register_convert(app, ctx);
  lpemu::cli::register_quantize(app, ctx);
  lpemu::cli::register_engine(app, ctx);
  lpemu::cli::register_proposal(app, ctx);
  lpemu::cli::register_cost(app, ctx);
  lpemu::cli::register_datapath(app, ctx);
  lpemu::cli::register_gemm(app, ctx);
  lpemu::cli::register_core(app, ctx);
  lpemu::cli::register_sweep(app, ctx);
  lpemu::cli::register_import(app, ctx);
  std::vector<std::string> args(argv + 1, argv + argc);
  for (auto& a : args) {
    if (negative_number(a.c_str())) a.insert(0, " ");
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
  try {
    // Every file the command writes stays only if its result reached stdout: a run whose report
    // was lost (`--json > /dev/full`) or that failed half way leaves what was there before.
    lpemu::io::OutputTransaction outputs;
    app.parse(args);
    lpemu::io::flush_stdout();  // output that did not reach stdout is a failure, not a success
    outputs.commit();
  } catch (const CLI::RuntimeError& e) {
    // A command's own non-zero status (`proposal verify` found differences: 1); it printed why,
    // unless that report could not be written (exit 2, saying so).
    try {
      lpemu::io::flush_stdout();
    } catch (const lpemu::Error& lost) {
      std::cerr << "lpemu: error: " << lost.what() << ": the report on standard output was lost\n";
      return 2;
    }
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2 like every other bad input.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "lpemu: error: " << e.what() << "\n";
    return 2;
  } catch (const lpemu::Error& e) {
    // Bad input: the message names the file, field and value; exit status 2.
    std::cerr << "lpemu: error: " << e.what() << "\n";
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user gave that the system refused (a symlink loop, a device where a folder was
    // expected, a read-only or full disk): bad input, named by its path and the system's reason.
    std::cerr << "lpemu: error: " << e.path1().string() << ": " << e.code().message()
              << (e.path2().empty() ? std::string() : " (" + e.path2().string() + ")") << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "lpemu: internal error: " << e.what() << "\n";
    return 3;
  } catch (...) {
    std::cerr << "lpemu: internal error: unknown exception\n";
    return 3;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int status = run(argc, argv);
  if (status != 0) {
    // A failed run ends here without exit handlers: every output was cleaned up while the error
    // unwound, and libhdf5 1.10's own handler (H5close) crashes on a file whose close failed
    // (a full disk or file-size limit while writing a .h5).
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    std::_Exit(status);
  }
  return 0;
}
