// `lpemu gemm`: C = A·Bᵀ on a datapath, operands as the engine feeds them (thin wrapper over
// lpemu::engine::gemm_operands).
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "lpemu/engine/quantizer.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/hdf5.hpp"

namespace lpemu::cli {
namespace {

struct GemmArgs {
  std::string datapath, a, b, out, a_format, b_format, a_scales, b_scales;
  float a_tensor_scale = 1.0F, b_tensor_scale = 1.0F;
  bool codes = false, force = false;
};

engine::RowMatrix read_matrix(const std::string& spec, const char* what) {
  const io::Tensor t = io::read_tensor(spec);
  if (t.shape.size() != 2) {
    throw ShapeError(spec + ": " + what + " has " + std::to_string(t.shape.size()) +
                     " dimensions, expected 2");
  }
  engine::RowMatrix m(static_cast<Eigen::Index>(t.shape[0]), static_cast<Eigen::Index>(t.shape[1]));
  std::copy(t.data.begin(), t.data.end(), m.data());
  return m;
}

void run_gemm(Context& ctx, const GemmArgs& g) {
  ctx.apply_threads();
  const auto quantizers = engine::QuantizerFactory::standard(ctx.formats(), &ctx.blocks());
  const auto gemms = engine::GemmFactory::with_datapaths(ctx.datapaths());
  const auto strategy = gemms.make(g.datapath);
  std::unique_ptr<engine::Quantizer> qa, qb;
  if (!g.a_format.empty()) qa = quantizers.make(engine::QuantSpec{g.a_format, {}, "--a-format"});
  if (!g.b_format.empty()) qb = quantizers.make(engine::QuantSpec{g.b_format, {}, "--b-format"});
  engine::RowMatrix a = read_matrix(g.a, "A");
  engine::RowMatrix b = read_matrix(g.b, "B");
  engine::RowMatrix c;
  if (g.codes) {
    if (!qa || !qb)
      throw Error("--codes: A and B are codes; name their formats with --a-format and --b-format");
    const auto scales = [](const std::string& spec) {
      return spec.empty() ? std::vector<float>() : io::read_tensor(spec).data;
    };
    const std::vector<float> sa = scales(g.a_scales), sb = scales(g.b_scales);
    engine::RowMatrix va, vb;
    const auto ea = engine::operand_from_codes(*qa, a, sa, g.a_tensor_scale, va, g.a);
    const auto eb = engine::operand_from_codes(*qb, b, sb, g.b_tensor_scale, vb, g.b);
    c = engine::gemm_operands(*strategy, va, vb, nullptr, nullptr, &ea, &eb);
  } else {
    if (!g.a_scales.empty() || !g.b_scales.empty()) throw Error("--a-scales/--b-scales need --codes");
    c = engine::gemm_operands(*strategy, a, b, qa.get(), qb.get());
  }
  io::Tensor t{{static_cast<std::size_t>(c.rows()), static_cast<std::size_t>(c.cols())},
               std::vector<float>(c.data(), c.data() + c.size())};
  // Never over an operand file, and an existing output only with --force (README "Robustness").
  io::write_tensor(g.out, t, io::OutputPolicy{g.force, {io::tensor_file(g.a), io::tensor_file(g.b)}});
  std::cout << "wrote [" << c.rows() << ", " << c.cols() << "] float32 to " << g.out << " ("
            << strategy->name() << ")\n";
}

}  // namespace

void register_gemm(CLI::App& app, Context& ctx) {
  static GemmArgs args;
  auto* sub = app.add_subcommand(
      "gemm", "C = A·Bᵀ on a datapath (A [M, K], B [N, K]), operands as the engine feeds them");
  sub->add_option("--datapath", args.datapath, "datapath name (see `lpemu datapath list`) or eigen")
      ->required();
  sub->add_option("--a-format", args.a_format,
                  "format A is quantised to (block or element); default: fp32 values");
  sub->add_option("--b-format", args.b_format,
                  "format B is quantised to (block or element); default: fp32 values");
  sub->add_flag("--codes", args.codes, "A and B hold codes of --a-format/--b-format instead of values");
  sub->add_option("--a-scales", args.a_scales,
                  "with --codes: A's scale codes in block order (FILE.npy or FILE.h5:/ds)");
  sub->add_option("--b-scales", args.b_scales, "with --codes: B's scale codes in block order");
  sub->add_option("--a-tensor-scale", args.a_tensor_scale, "with --codes: A's FP32 tensor scale (NVFP4)");
  sub->add_option("--b-tensor-scale", args.b_tensor_scale, "with --codes: B's FP32 tensor scale (NVFP4)");
  sub->add_flag("--force", args.force, "overwrite OUT if it exists");
  sub->add_option("A", args.a, "A [M, K]: FILE.npy or FILE.h5:/path/dataset")->required();
  sub->add_option("B", args.b, "B [N, K]: FILE.npy or FILE.h5:/path/dataset")->required();
  sub->add_option("OUT", args.out, "C [M, N] float32: FILE.npy or FILE.h5:/path/dataset")->required();
  sub->callback([&ctx] { run_gemm(ctx, args); });
}

}  // namespace lpemu::cli
