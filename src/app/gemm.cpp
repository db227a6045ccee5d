#include "lpemu/app/gemm.hpp"

#include <algorithm>
#include <memory>
#include <vector>

#include "lpemu/engine/quantizer.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/hdf5.hpp"
#include "lpemu/io/output.hpp"

namespace lpemu::app {
namespace {

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

}  // namespace

GemmResult gemm(experiment::Context& ctx, const GemmRequest& g) {
  const auto quantizers = engine::QuantizerFactory::standard(ctx.formats(), &ctx.blocks());
  const auto gemms = engine::GemmFactory::with_datapaths(ctx.datapaths());
  const auto strategy = gemms.make(g.datapath);
  std::unique_ptr<engine::Quantizer> qa, qb;
  const auto operand_spec = [](const std::string& format, const char* origin) {
    engine::QuantSpec s;
    s.format = format;
    s.origin = origin;
    return s;
  };
  if (!g.a_format.empty()) qa = quantizers.make(operand_spec(g.a_format, "--a-format"));
  if (!g.b_format.empty()) qb = quantizers.make(operand_spec(g.b_format, "--b-format"));
  engine::RowMatrix a = read_matrix(g.a, "A");
  engine::RowMatrix b = read_matrix(g.b, "B");
  engine::RowMatrix c;
  if (g.codes) {
    if (!qa || !qb)
      throw SpecError("--codes: A and B are codes; name their formats with --a-format and --b-format");
    const auto scales = [](const std::string& spec) {
      return spec.empty() ? std::vector<float>() : io::read_tensor(spec).data;
    };
    const std::vector<float> sa = scales(g.a_scales), sb = scales(g.b_scales);
    engine::RowMatrix va, vb;
    const auto ea = engine::operand_from_codes(*qa, a, sa, g.a_tensor_scale, va, g.a);
    const auto eb = engine::operand_from_codes(*qb, b, sb, g.b_tensor_scale, vb, g.b);
    c = engine::gemm_operands(*strategy, va, vb, nullptr, nullptr, &ea, &eb);
  } else {
    if (!g.a_scales.empty() || !g.b_scales.empty()) throw SpecError("--a-scales/--b-scales need --codes");
    c = engine::gemm_operands(*strategy, a, b, qa.get(), qb.get());
  }
  io::Tensor t{{static_cast<std::size_t>(c.rows()), static_cast<std::size_t>(c.cols())},
               std::vector<float>(c.data(), c.data() + c.size())};
  // Never over an operand file, and an existing output only with force.
  io::OutputPolicy policy{g.force, {io::tensor_file(g.a), io::tensor_file(g.b)}, {g.a, g.b}};
  for (const std::string& s : {g.a_scales, g.b_scales}) {
    if (!s.empty()) {
      policy.inputs.push_back(io::tensor_file(s));
      policy.input_tensors.push_back(s);
    }
  }
  io::write_tensor(g.out, t, policy);
  return {t.shape[0], t.shape[1], g.out, strategy->name()};
}

Fields fields(const GemmResult& r) {
  return {{"rows", r.rows}, {"cols", r.cols}, {"out", r.out}, {"gemm", r.gemm}};
}

GemmRequest gemm_request(const Fields& f) {
  GemmRequest r;
  FieldReader in(f, "gemm");
  in.read("datapath", r.datapath);
  in.read("a", r.a);
  in.read("b", r.b);
  in.read("out", r.out);
  in.read("a_format", r.a_format);
  in.read("b_format", r.b_format);
  in.read("codes", r.codes);
  in.read("a_scales", r.a_scales);
  in.read("b_scales", r.b_scales);
  in.read("a_tensor_scale", r.a_tensor_scale);
  in.read("b_tensor_scale", r.b_tensor_scale);
  in.read("force", r.force);
  in.finish();
  if (r.datapath.empty()) throw SpecError("gemm: datapath (a datapath name or eigen) is required");
  if (r.a.empty() || r.b.empty() || r.out.empty())
    throw SpecError("gemm: a, b and out (FILE.npy or FILE.h5:/dataset) are required");
  return r;
}

}  // namespace lpemu::app
