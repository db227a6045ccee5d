// `lpemu quantize --format NAME IN OUT`: parses into app::QuantizeRequest, runs app::quantize and
// prints the result (a line, the statistics, or --json).
#include <cstdio>
#include <iostream>

#include "cli/commands.hpp"
#include "lpemu/app/quantize.hpp"
#include "lpemu/block/block_format.hpp"

namespace lpemu::cli {
namespace {

struct QuantizeArgs {
  app::QuantizeRequest req;
  bool json = false;
};

void print_stats(const metrics::QuantizationStats& s) {
  std::printf("SQNR            %.4f dB\n", s.sqnr_db());
  std::printf("MSE             %.6g\n", s.mse());
  std::printf("max abs error   %.6g\n", s.max_abs);
  std::printf("max rel error   %.6g\n", s.max_rel);
  std::printf("clipped         %.6f\n", s.fraction(s.clipped));
  std::printf("saturated       %.6f\n", s.fraction(s.saturated));
  std::printf("flushed to zero %.6f\n", s.fraction(s.flushed));
  if (s.nonfinite_inputs) std::printf("non-finite inputs %zu (excluded)\n", s.nonfinite_inputs);
  if (s.nonfinite_outputs) std::printf("non-finite outputs of finite inputs %zu\n", s.nonfinite_outputs);
}

void run_quantize(Context& ctx, const QuantizeArgs& a) {
  ctx.apply_threads();
  const app::QuantizeResult r = app::quantize(ctx, a.req);
  if (a.json) {
    print_json(app::fields(r));
  } else if (r.stats) {
    print_stats(*r.stats);
  } else {
    std::cout << "quantized " << r.elements << " elements with " << r.format << " -> " << r.output << "\n";
  }
}

}  // namespace

void register_quantize(CLI::App& app, Context& ctx) {
  static QuantizeArgs args;
  app::QuantizeRequest& req = args.req;
  auto* sub = app.add_subcommand(
      "quantize", "fake-quantize a tensor with a block format (MX, NVFP4, ...) or an element format");
  sub->add_option("--format", req.format, "block format (see formats/block) or element format")->required();
  sub->add_option("--axis", req.axis, "blocked axis (negative counts from the end); default: the format's");
  sub->add_option("--block", req.block, "block size 1..4096 along the axis; default: the format's")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--scale-rule", req.scale_rule, "ocp | ceil (rceil) | even | amax_over_max | search")
      ->check(parsed_by([](const std::string& rule) { block::parse_scale_rule(rule); }, ""));
  sub->add_flag("--stats", req.stats,
                "print SQNR, MSE, max abs/rel error, fractions clipped/saturated/flushed");
  sub->add_flag("--json", args.json, "machine-readable output");
  sub->add_option("--packed", req.packed, "also write packed codes and scales to this HDF5 file");
  sub->add_flag("--force", req.force, "overwrite OUT (and --packed FILE) if it exists");
  add_convert_options(sub, req.options, format::Overflow::saturate);
  sub->add_option("IN", req.input, "input tensor: FILE.npy or FILE.h5:/path/dataset")->required();
  sub->add_option("OUT", req.output, "output tensor: FILE.npy or FILE.h5:/path/dataset")->required();
  sub->callback([&ctx] { run_quantize(ctx, args); });
}

}  // namespace lpemu::cli
