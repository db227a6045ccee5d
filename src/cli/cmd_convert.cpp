// `lpemu convert --from F --to G IN OUT`: parses into app::ConvertRequest, runs app::convert (the
// streaming converter and the storage rules are described in lpemu/app/convert.hpp).
#include <iostream>

#include "cli/commands.hpp"
#include "lpemu/app/convert.hpp"
#include "lpemu/error.hpp"

namespace lpemu::cli {
namespace {

struct ConvertArgs {
  app::ConvertRequest req;
  bool json = false;
};

void run_convert(Context& ctx, const ConvertArgs& a) {
  ctx.apply_threads();
  if (a.json && a.req.output == "-") {
    throw SpecError("--json prints the result to standard output; give OUT a file name, not '-'");
  }
  const app::ConvertResult r = app::convert(ctx, a.req);
  if (a.json) {
    print_json(app::fields(r));
  } else if (r.output != "-") {
    std::cerr << "lpemu: converted " << r.elements << " elements from " << r.from << " to " << r.to
              << " into " << r.output << "\n";
  }
}

}  // namespace

void register_convert(CLI::App& app, Context& ctx) {
  static ConvertArgs args;
  app::ConvertRequest& req = args.req;
  auto* sub = app.add_subcommand("convert", "convert a stream of values or codes between two formats");
  sub->add_option("--from", req.from, "source format (default from a .npy float dtype: fp32/fp64/fp16)");
  sub->add_option("--to", req.to, "destination format")->required();
  sub->add_flag("--packed", req.packed, "codes narrower than 8 bits are bit-packed, LSB first (raw streams)");
  sub->add_flag("--force", req.force, "overwrite OUT if it exists");
  sub->add_flag("--json", args.json, "print the result (counts, formats, output) as JSON");
  add_convert_options(sub, req.options);
  sub->add_option("IN", req.input, "input: FILE.npy, a raw little-endian FILE, or - for stdin")->required();
  sub->add_option("OUT", req.output, "output: FILE.npy, a raw FILE, or - for stdout")->required();
  sub->callback([&ctx] { run_convert(ctx, args); });
}

}  // namespace lpemu::cli
