// `lpemu gemm`: parses into app::GemmRequest, runs app::gemm (C = A·Bᵀ on a datapath), prints.
#include <iostream>

#include "cli/commands.hpp"
#include "lpemu/app/gemm.hpp"

namespace lpemu::cli {

void register_gemm(CLI::App& app, Context& ctx) {
  static RequestArgs<app::GemmRequest> args;
  app::GemmRequest& g = args.req;
  auto* sub = app.add_subcommand(
      "gemm", "C = A·Bᵀ on a datapath (A [M, K], B [N, K]), operands as the engine feeds them");
  sub->add_option("--datapath", g.datapath, "datapath name (see `lpemu datapath list`) or eigen")->required();
  sub->add_option("--a-format", g.a_format,
                  "format A is quantised to (block or element); default: fp32 values");
  sub->add_option("--b-format", g.b_format,
                  "format B is quantised to (block or element); default: fp32 values");
  sub->add_flag("--codes", g.codes, "A and B hold codes of --a-format/--b-format instead of values");
  sub->add_option("--a-scales", g.a_scales,
                  "with --codes: A's scale codes in block order (FILE.npy or FILE.h5:/ds)");
  sub->add_option("--b-scales", g.b_scales, "with --codes: B's scale codes in block order");
  sub->add_option("--a-tensor-scale", g.a_tensor_scale, "with --codes: A's FP32 tensor scale (NVFP4)");
  sub->add_option("--b-tensor-scale", g.b_tensor_scale, "with --codes: B's FP32 tensor scale (NVFP4)");
  sub->add_flag("--force", g.force, "overwrite OUT if it exists");
  sub->add_option("A", g.a, "A [M, K]: FILE.npy or FILE.h5:/path/dataset")->required();
  sub->add_option("B", g.b, "B [N, K]: FILE.npy or FILE.h5:/path/dataset")->required();
  sub->add_option("OUT", g.out, "C [M, N] float32: FILE.npy or FILE.h5:/path/dataset")->required();
  json_or_text(
      sub, args, "a line",
      [&ctx](const app::GemmRequest& r) {
        ctx.apply_threads();
        return app::gemm(ctx, r);
      },
      [](const app::GemmResult& r) {
        std::cout << "wrote [" << r.rows << ", " << r.cols << "] float32 to " << r.out << " (" << r.gemm
                  << ")\n";
      });
}

}  // namespace lpemu::cli
