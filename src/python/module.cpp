// lpemu._lpemu: the pybind11 extension behind the `lpemu` Python package (src/python/lpemu/).
// Thin: converts NumPy arrays and Python values, calls the library, converts back. Arrays of the
// right dtype and C order are read in place (no copy); results are new NumPy arrays.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "lpemu/app/commands.hpp"
#include "lpemu/app/evaluate.hpp"
#include "lpemu/app/replay.hpp"
#include "lpemu/app/sweep.hpp"
#include "lpemu/block/block_format.hpp"
#include "lpemu/block/pack.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/cost/workload.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/datapath/dot.hpp"
#include "lpemu/datapath/gemm.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/engine/session.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/experiment/datapath_error.hpp"
#include "lpemu/experiment/evaluation.hpp"
#include "lpemu/experiment/experiment.hpp"
#include "lpemu/experiment/pricing.hpp"
#include "lpemu/format/codec.hpp"

namespace py = pybind11;

namespace lpemu::python {
namespace {

template <typename T>
using CArray = py::array_t<T, py::array::c_style | py::array::forcecast>;

std::vector<std::size_t> shape_of(const py::array& a) {
  return std::vector<std::size_t>(a.shape(), a.shape() + a.ndim());
}

template <typename T>
std::span<const T> view(const CArray<T>& a) {
  return {a.data(), static_cast<std::size_t>(a.size())};
}

format::ConvertOptions options(const std::string& rounding, const std::string& overflow, std::uint64_t seed,
                               int sr_bits, bool ftz, bool daz) {
  format::ConvertOptions o;
  o.rounding = format::parse_rounding(rounding);
  o.overflow = format::parse_overflow(overflow);
  o.seed = seed;
  o.sr_bits = sr_bits;
  o.flush_subnormal_outputs = ftz;
  o.flush_subnormal_inputs = daz;
  format::validate(o);
  return o;
}

bool is_double(const py::array& x) { return x.dtype().is(py::dtype::of<double>()); }

engine::RowMatrix to_matrix(const CArray<float>& x) {
  if (x.ndim() != 2) {
    throw ShapeError("expected a 2-D float32 array [rows, cols], got " + std::to_string(x.ndim()) +
                     " dimensions");
  }
  return Eigen::Map<const engine::RowMatrix>(x.data(), x.shape(0), x.shape(1));
}

py::array_t<float> from_matrix(const engine::RowMatrix& m) {
  py::array_t<float> out({m.rows(), m.cols()});
  std::copy(m.data(), m.data() + m.size(), out.mutable_data());
  return out;
}

/// Python values as named fields: None, bool, int, float, str, os.PathLike, lists, tuples and dicts.
app::Fields to_fields(py::handle x) {
  if (x.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(x)) return x.cast<bool>();
  if (py::isinstance<py::int_>(x)) {
    if (x.cast<py::int_>() < py::int_(0)) return x.cast<long long>();
    return x.cast<std::uint64_t>();
  }
  if (py::isinstance<py::float_>(x)) return x.cast<double>();
  if (py::isinstance<py::str>(x)) return x.cast<std::string>();
  if (py::hasattr(x, "__fspath__")) return py::str(x.attr("__fspath__")()).cast<std::string>();
  if (py::isinstance<py::dict>(x)) {
    app::Fields out = app::Fields::object();
    for (const auto& [k, v] : x.cast<py::dict>()) out[py::str(k).cast<std::string>()] = to_fields(v);
    return out;
  }
  if (py::isinstance<py::list>(x) || py::isinstance<py::tuple>(x)) {
    app::Fields out = app::Fields::array();
    for (const auto& v : x) out.push_back(to_fields(v));
    return out;
  }
  if (py::hasattr(x, "item")) return to_fields(x.attr("item")());  // NumPy scalars
  throw Error("cannot pass a Python " + py::str(py::type::of(x).attr("__name__")).cast<std::string>() +
              " as a request field");
}

/// Named fields as Python values (dicts keep the fields' order; NaN stays a float NaN).
py::object from_fields(const app::Fields& f) {
  switch (f.type()) {
    case app::Fields::value_t::null: return py::none();
    case app::Fields::value_t::boolean: return py::bool_(f.get<bool>());
    case app::Fields::value_t::number_integer: return py::int_(f.get<long long>());
    case app::Fields::value_t::number_unsigned: return py::int_(f.get<std::uint64_t>());
    case app::Fields::value_t::number_float: return py::float_(f.get<double>());
    case app::Fields::value_t::string: return py::str(f.get_ref<const std::string&>());
    case app::Fields::value_t::array: {
      py::list out;
      for (const auto& v : f) out.append(from_fields(v));
      return out;
    }
    case app::Fields::value_t::object: {
      py::dict out;
      for (const auto& [k, v] : f.items()) out[py::str(k)] = from_fields(v);
      return out;
    }
    default: throw Error("a result field of an unsupported type");
  }
}

/// A model, shared with the plans evaluated on it.
struct PyModel {
  std::shared_ptr<engine::Model> model;
};

/// A precision plan bound to the context whose factories resolved its names.
class PyPlan {
 public:
  PyPlan(std::shared_ptr<experiment::Context> ctx, engine::PrecisionPlan plan)
      : ctx_(std::move(ctx)), plan_(std::move(plan)) {}

  const engine::PrecisionPlan& plan() const { return plan_; }

  std::optional<std::string> format(const std::string& role, int layer, const std::string& kind,
                                    int n_layers) const {
    const auto spec =
        plan_.resolve(engine::parse_role(role), layer, engine::parse_layer_kind(kind), n_layers);
    if (!spec) return std::nullopt;
    return spec->format;
  }

  std::string gemm(int layer, const std::string& kind, int n_layers, const std::string& pass) const {
    const engine::LayerKind k = engine::parse_layer_kind(kind);
    return plan_.resolve_gemm_site(layer, k, any_site(k), n_layers, parse_pass(pass)).datapath;
  }

  bool float_gemm(int layer, const std::string& kind, int n_layers, const std::string& pass) const {
    return datapath::names_float_gemm(gemm(layer, kind, n_layers, pass));
  }

  py::object quantize(const CArray<float>& x, const std::string& role, int layer, const std::string& kind,
                      const std::string& tensor, int n_layers, int head, int axis, std::uint64_t row0) {
    const engine::Role r = engine::parse_role(role);
    const auto spec = plan_.resolve(r, layer, engine::parse_layer_kind(kind), n_layers);
    engine::RowMatrix m = to_matrix(x);
    if (spec) {
      const std::unique_ptr<engine::Quantizer> q = ctx_->quantizers().make(*spec);
      engine::QuantPoint p;
      p.role = r;
      p.layer = layer;
      p.kind = engine::parse_layer_kind(kind);
      p.tensor = tensor;
      p.head = head;
      p.axis = axis;
      p.index_offset = row0 * static_cast<std::uint64_t>(m.cols());
      p.stream = engine::point_stream(tensor, layer, head, r);
      {
        py::gil_scoped_release release;
        q->apply(m, p);
      }
    }
    return from_matrix(m);
  }

  py::array_t<float> linear(const CArray<float>& a, const CArray<float>& b, int layer,
                            const std::string& kind, const std::string& tensor, int n_layers,
                            const std::string& pass) {
    const engine::LayerKind k = engine::parse_layer_kind(kind);
    const engine::GemmPass gp = parse_pass(pass);
    const bool head = k == engine::LayerKind::head;
    const engine::Role input = head ? engine::Role::lm_head_input : engine::Role::linear_input;
    const engine::Role weights = head ? engine::Role::lm_head : engine::Role::weights;
    // Operand roles of the pass: forward X·Wᵀ, dgrad dY·W, wgrad dYᵀ·X.
    const engine::Role ra = gp == engine::GemmPass::forward ? input : engine::Role::grad_output;
    const engine::Role rb = gp == engine::GemmPass::wgrad ? input : weights;
    const auto qa = plan_.resolve(ra, layer, k, n_layers);
    const auto qb = plan_.resolve(rb, layer, k, n_layers);
    const std::string fa = qa ? qa->format : std::string(), fb = qb ? qb->format : std::string();
    const engine::RowMatrix am = to_matrix(a), bm = to_matrix(b);
    if (am.cols() != bm.cols()) {
      throw ShapeError("linear " + tensor + ": A has " + std::to_string(am.cols()) + " columns but B has " +
                       std::to_string(bm.cols()) + " (C = A·Bᵀ, B is [out, in])");
    }
    const auto g = ctx_->gemms().make(plan_.resolve_gemm_site(layer, k, any_site(k), n_layers, gp).datapath);
    engine::RowMatrix c(am.rows(), bm.rows());
    {
      py::gil_scoped_release release;
      g->nt(am, bm, c, engine::GemmPoint{layer, k, tensor, fa, fb});
    }
    return from_matrix(c);
  }

  // C = A·Bᵀ of GEMM pass `pass` from high-precision A and B [rows, contraction]: each operand is
  // quantised by its role in that pass as quantize() does at point `a_tensor` / `b_tensor` (axis 1),
  // and enters the pass's GEMM with its encoding (codes and block scales), as a datapath takes
  // block-format operands. Returns (C, quantised A, quantised B).
  py::tuple linear_quantized(const CArray<float>& a, const CArray<float>& b, int layer,
                             const std::string& kind, const std::string& tensor, int n_layers,
                             const std::string& pass, const std::string& a_tensor,
                             const std::string& b_tensor) {
    const engine::LayerKind k = engine::parse_layer_kind(kind);
    const engine::GemmPass gp = parse_pass(pass);
    const bool head = k == engine::LayerKind::head;
    const engine::Role input = head ? engine::Role::lm_head_input : engine::Role::linear_input;
    const engine::Role weights = head ? engine::Role::lm_head : engine::Role::weights;
    const engine::Role ra = gp == engine::GemmPass::forward ? input : engine::Role::grad_output;
    const engine::Role rb = gp == engine::GemmPass::wgrad ? input : weights;
    engine::RowMatrix am = to_matrix(a), bm = to_matrix(b);
    if (am.cols() != bm.cols()) {
      throw ShapeError("linear " + tensor + ": A has " + std::to_string(am.cols()) + " columns but B has " +
                       std::to_string(bm.cols()) + " (C = A·Bᵀ, both [rows, contraction])");
    }
    const auto qa = plan_.resolve(ra, layer, k, n_layers);
    const auto qb = plan_.resolve(rb, layer, k, n_layers);
    const auto g = ctx_->gemms().make(plan_.resolve_gemm_site(layer, k, any_site(k), n_layers, gp).datapath);
    engine::RowMatrix c(am.rows(), bm.rows());
    {
      py::gil_scoped_release release;
      engine::GemmPoint point{layer, k, tensor, qa ? qa->format : "", qb ? qb->format : ""};
      std::optional<engine::EncodedOperand> ea, eb;
      if (qa) ea = ctx_->quantizers().make(*qa)->encode(am, point_of(ra, layer, k, a_tensor));
      if (qb) eb = ctx_->quantizers().make(*qb)->encode(bm, point_of(rb, layer, k, b_tensor));
      point.a_operand = ea ? &*ea : nullptr;
      point.b_operand = eb ? &*eb : nullptr;
      g->nt(am, bm, c, point);
    }
    return py::make_tuple(from_matrix(c), from_matrix(am), from_matrix(bm));
  }

 private:
  // The quantisation point quantize() uses for `tensor` (axis 1, no head, first row 0).
  static engine::QuantPoint point_of(engine::Role r, int layer, engine::LayerKind k,
                                     const std::string& tensor) {
    engine::QuantPoint p;
    p.role = r;
    p.layer = layer;
    p.kind = k;
    p.tensor = tensor;
    p.stream = engine::point_stream(tensor, layer, -1, r);
    return p;
  }

  // A linear GEMM site of kind `k` (the plan resolves linear GEMMs by layer and kind, not by site).
  static std::string_view any_site(engine::LayerKind k) {
    return k == engine::LayerKind::head ? "output" : k == engine::LayerKind::mlp ? "w1" : "wq";
  }

  // "forward", "dgrad" or "wgrad".
  static engine::GemmPass parse_pass(const std::string& pass) {
    if (pass == "forward") return engine::GemmPass::forward;
    if (pass == "dgrad") return engine::GemmPass::dgrad;
    if (pass == "wgrad") return engine::GemmPass::wgrad;
    throw Error("GEMM pass '" + pass + "': expected \"forward\", \"dgrad\" or \"wgrad\"");
  }

  std::shared_ptr<experiment::Context> ctx_;
  engine::PrecisionPlan plan_;
};

py::dict eval_dict(const experiment::EvalResult& r) {
  py::dict d = from_fields(app::fields(r)).cast<py::dict>();  // named as by `lpemu eval --json`
  d["tokens"] = r.tokens;
  d["nll"] = py::array_t<double>(static_cast<py::ssize_t>(r.nll.size()), r.nll.data());
  d["ref_nll"] = py::array_t<double>(static_cast<py::ssize_t>(r.ref_nll.size()), r.ref_nll.data());
  d["kl"] = py::array_t<double>(static_cast<py::ssize_t>(r.kl.size()), r.kl.data());
  d["top1_agree"] = r.top1_agree;
  return d;
}

// Codes given as uint64 (the Python API's code type) narrowed to the type T a prepared GEMM takes
// (bytes for A and B, 32 bits for C); throws Error naming `what` and the code that does not fit.
template <class T>
std::vector<T> narrow_codes(const CArray<std::uint64_t>& codes, const char* what) {
  std::vector<T> out(static_cast<std::size_t>(codes.size()));
  const std::uint64_t* p = codes.data();
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (p[i] > std::numeric_limits<T>::max()) {
      throw Error(
          std::string(what) + ": code " + std::to_string(p[i]) + " at index " + std::to_string(i) +
          " does not fit " + std::to_string(8 * sizeof(T)) +
          " bits (a prepared B takes datapaths with inputs of at most 8 bits, outputs of at most 32)");
    }
    out[i] = static_cast<T>(p[i]);
  }
  return out;
}

// A weight's B [K, N] prepared once for many GEMMs under one datapath (datapath::PreparedB).
struct PyPreparedB {
  std::shared_ptr<const datapath::PreparedB> b;

  py::array_t<std::uint64_t> gemm(const CArray<std::uint64_t>& a,
                                  const std::optional<CArray<std::uint64_t>>& c,
                                  const std::optional<CArray<std::int32_t>>& sa,
                                  const std::optional<CArray<std::int32_t>>& sb) const {
    if (a.ndim() != 2 || static_cast<std::size_t>(a.shape(1)) != b->k()) {
      throw ShapeError("gemm: expected A [M, " + std::to_string(b->k()) + "] codes for the prepared B [" +
                       std::to_string(b->k()) + ", " + std::to_string(b->n()) + "]");
    }
    const auto m = static_cast<std::size_t>(a.shape(0));
    const std::vector<std::uint8_t> a8 = narrow_codes<std::uint8_t>(a, "gemm: A");
    const std::vector<std::uint32_t> c32 =
        c ? narrow_codes<std::uint32_t>(*c, "gemm: C") : std::vector<std::uint32_t>{};
    datapath::GemmScales s;
    if (sa) s.a = view(*sa);
    if (sb) s.b = view(*sb);
    std::vector<std::uint32_t> d32(m * b->n());
    {
      py::gil_scoped_release release;
      datapath::gemm(m, a8, *b, c32, d32, s);
    }
    py::array_t<std::uint64_t> d(std::vector<std::size_t>{m, b->n()});
    std::copy(d32.begin(), d32.end(), d.mutable_data());
    return d;
  }
};

/// The Python face of experiment::Context (shared so plans can keep it alive).
class ContextHandle {
 public:
  ContextHandle(std::vector<std::filesystem::path> formats_dirs, std::vector<std::filesystem::path> data_dirs)
      : ctx_(std::make_shared<experiment::Context>()) {
    ctx_->formats_dirs = std::move(formats_dirs);
    ctx_->data_dirs = experiment::data_search_dirs(std::move(data_dirs));
  }

  py::list formats() {
    py::list out;
    const auto& reg = ctx_->formats();
    for (const auto& name : reg.names()) {
      const auto& f = reg.get(name);
      py::dict d;
      d["name"] = f.name;
      d["kind"] = "element";
      d["bits"] = f.bits;
      d["encoding"] = format::describe(f);
      d["max_finite"] = f.max_finite;
      d["aliases"] = f.aliases;
      d["origin"] = reg.origin(name);
      out.append(d);
    }
    const auto& blocks = ctx_->blocks();
    for (const auto& name : blocks.names()) {
      const auto& b = blocks.get(name);
      py::dict d;
      d["name"] = b.name;
      d["kind"] = "block";
      d["element"] = b.element.name;
      d["scale"] = block::describe_scale(b);
      d["granularity"] = block::describe_granularity(b);
      d["scale_rule"] = std::string(block::to_string(b.rule));
      d["origin"] = blocks.origin(name);
      out.append(d);
    }
    return out;
  }

  py::array encode(const std::string& name, const py::array& x, const format::ConvertOptions& o) {
    const format::Format& f = ctx_->formats().get(name);
    if (is_double(x) || f.bits > 32) {
      const CArray<double> in(x);
      py::array_t<std::uint64_t> out(shape_of(in));
      auto ov = std::span<std::uint64_t>(out.mutable_data(), static_cast<std::size_t>(out.size()));
      {
        py::gil_scoped_release release;
        format::encode(f, view(in), ov, o);
      }
      return out;
    }
    const CArray<float> in(x);
    return encode_as(f, in, o);
  }

  py::array decode(const std::string& name, const py::array& codes) {
    const format::Format& f = ctx_->formats().get(name);
    check_codes(f, view(CArray<std::uint64_t>(codes)));  // before any narrowing to the code type
    if (f.bits <= 32 && format::fits_in_float(f)) {
      if (f.bits <= 8) return decode_as<std::uint8_t>(f, codes);
      if (f.bits <= 16) return decode_as<std::uint16_t>(f, codes);
      return decode_as<std::uint32_t>(f, codes);
    }
    const CArray<std::uint64_t> in(codes);
    check_codes(f, view(in));
    py::array_t<double> out(shape_of(in));
    auto ov = std::span<double>(out.mutable_data(), static_cast<std::size_t>(out.size()));
    {
      py::gil_scoped_release release;
      format::decode(f, view(in), ov);
    }
    return out;
  }

  py::array quantize(const std::string& name, const py::array& x, const block::BlockOverrides& ov,
                     const format::ConvertOptions& o) {
    if (const block::BlockFormat* bf = ctx_->blocks().find(name)) {
      block::BlockOverrides full = ov;
      full.element_options = o;
      const block::BlockFormat f = block::with_overrides(*bf, full);
      const CArray<float> in(x);
      py::array_t<float> out(shape_of(in));
      const auto shape = shape_of(in);
      auto outv = std::span<float>(out.mutable_data(), static_cast<std::size_t>(out.size()));
      {
        py::gil_scoped_release release;
        block::quantize(f, view(in), outv, shape.empty() ? std::vector<std::size_t>{1} : shape);
      }
      return out;
    }
    const format::Format& f = element_or_throw(name);
    if (ov.axis || ov.block_size || !ov.scale_rule.empty()) {
      throw SpecError("axis, block and scale_rule need a block format; '" + name + "' is an element format");
    }
    if (is_double(x)) return quantize_as<double>(f, x, o);
    return quantize_as<float>(f, x, o);
  }

  py::dict block_encode(const std::string& name, const py::array& x, const block::BlockOverrides& ov,
                        const format::ConvertOptions& o, bool packed) {
    block::BlockOverrides full = ov;
    full.element_options = o;
    const block::BlockFormat f = block::with_overrides(ctx_->blocks().get(name), full);
    const CArray<float> in(x);
    auto shape = shape_of(in);
    if (shape.empty()) shape = {1};
    block::BlockTensor t;
    {
      py::gil_scoped_release release;
      t = block::encode(f, view(in), shape);
    }
    const int sbits = f.scale_is_pow2 ? 32 : f.scale.bits;
    py::dict d;
    d["format"] = f.name;
    d["element_bits"] = f.element.bits;
    d["scale_bits"] = sbits;
    d["tensor_scale"] = t.tensor_scale;
    d["shape"] = shape;
    d["layout"] = py::dict(py::arg("outer") = t.layout.outer, py::arg("rows") = t.layout.rows,
                           py::arg("cols") = t.layout.cols, py::arg("block_rows") = t.layout.block_rows,
                           py::arg("block_cols") = t.layout.block_cols);
    if (packed) {
      const auto pc = block::pack_codes(t.codes, f.element.bits);
      const auto ps = block::pack_codes(t.scales, sbits);
      d["codes"] = py::array_t<std::uint8_t>(static_cast<py::ssize_t>(pc.size()), pc.data());
      d["scales"] = py::array_t<std::uint8_t>(static_cast<py::ssize_t>(ps.size()), ps.data());
    } else {
      py::array_t<std::uint32_t> codes(shape);
      std::copy(t.codes.begin(), t.codes.end(), codes.mutable_data());
      const std::vector<std::size_t> grid{t.layout.outer, t.layout.grid_rows(), t.layout.grid_cols()};
      py::array_t<std::uint32_t> scales(grid);
      std::copy(t.scales.begin(), t.scales.end(), scales.mutable_data());
      d["codes"] = codes;
      d["scales"] = scales;
    }
    return d;
  }

  py::dict datapath_info(const std::string& name) {
    const datapath::Datapath& dp = ctx_->datapaths().get(name);
    py::dict d;
    d["name"] = dp.name;
    d["a"] = dp.a.name;
    d["b"] = dp.b.name;
    d["output"] = dp.output().name;
    d["scale_block"] = dp.scale_block;
    d["summary"] = dp.summary();
    d["origin"] = ctx_->datapaths().origin(name);
    return d;
  }

  py::dict datapath_error(const std::vector<std::string>& names, const std::vector<std::size_t>& ks,
                          const std::string& dist, int trials, std::uint64_t seed,
                          const std::string& inputs) {
    experiment::DatapathErrorConfig c;
    for (const auto& n : names) {
      datapath::Datapath dp = ctx_->datapaths().get(n);
      if (!inputs.empty()) dp.a = dp.b = ctx_->formats().get(inputs);
      c.datapaths.push_back(std::move(dp));
    }
    c.ks = ks;
    c.dist = dist;
    c.trials = trials;
    c.seed = seed;
    const experiment::DatapathErrorResult r = experiment::datapath_error(c);
    py::dict d;
    d["datapaths"] = names;
    d["k"] = ks;
    d["mean"] = r.mean;
    d["max"] = r.max;
    return d;
  }

  std::uint64_t dot(const std::string& name, const CArray<std::uint64_t>& a, const CArray<std::uint64_t>& b,
                    std::uint64_t c, const std::optional<CArray<std::int32_t>>& sa,
                    const std::optional<CArray<std::int32_t>>& sb, std::uint64_t index) {
    const datapath::Datapath& dp = ctx_->datapaths().get(name);
    datapath::BlockScales s;
    if (sa) s.a = view(*sa);
    if (sb) s.b = view(*sb);
    py::gil_scoped_release release;
    return datapath::dot(dp, view(a), view(b), c, s, index);
  }

  py::array_t<std::uint64_t> gemm(const std::string& name, const CArray<std::uint64_t>& a,
                                  const CArray<std::uint64_t>& b,
                                  const std::optional<CArray<std::uint64_t>>& c,
                                  const std::optional<CArray<std::int32_t>>& sa,
                                  const std::optional<CArray<std::int32_t>>& sb) {
    const datapath::Datapath& dp = ctx_->datapaths().get(name);
    if (a.ndim() != 2 || b.ndim() != 2 || a.shape(1) != b.shape(0)) {
      throw ShapeError("gemm: expected A [M, K] and B [K, N] code arrays, got A with " +
                       std::to_string(a.ndim()) + " dimensions and B with " + std::to_string(b.ndim()) +
                       " (or K disagrees)");
    }
    const auto m = static_cast<std::size_t>(a.shape(0)), k = static_cast<std::size_t>(a.shape(1)),
               n = static_cast<std::size_t>(b.shape(1));
    py::array_t<std::uint64_t> d(std::vector<std::size_t>{m, n});
    datapath::GemmScales s;
    if (sa) s.a = view(*sa);
    if (sb) s.b = view(*sb);
    std::span<const std::uint64_t> cv;
    if (c) cv = view(*c);
    auto dv = std::span<std::uint64_t>(d.mutable_data(), m * n);
    {
      py::gil_scoped_release release;
      datapath::gemm(dp, m, n, k, view(a), view(b), cv, dv, s);
    }
    return d;
  }

  PyPreparedB prepare_b(const std::string& name, const CArray<std::uint64_t>& b) {
    const datapath::Datapath& dp = ctx_->datapaths().get(name);
    if (b.ndim() != 2)
      throw ShapeError("prepare_b: expected B [K, N] codes, got " + std::to_string(b.ndim()) + " dimensions");
    const auto k = static_cast<std::size_t>(b.shape(0)), n = static_cast<std::size_t>(b.shape(1));
    std::vector<std::uint8_t> b8 = narrow_codes<std::uint8_t>(b, "prepare_b: B");
    py::gil_scoped_release release;
    return {std::make_shared<const datapath::PreparedB>(dp, n, k, std::move(b8))};
  }

  PyModel load_model(const std::string& name) {
    return {std::make_shared<engine::Model>(ctx_->load_model(name))};
  }

  PyPlan load_plan(const std::string& name) { return PyPlan(ctx_, ctx_->load_plan(name)); }

  py::dict evaluate(const PyModel& m, const PyPlan& plan, const std::vector<int>& tokens,
                    const PyPlan& reference) {
    experiment::EvalResult r;
    {
      py::gil_scoped_release release;
      r = experiment::evaluate(*m.model, plan.plan(), reference.plan(), tokens, ctx_->quantizers(),
                               ctx_->gemms());
    }
    return eval_dict(r);
  }

  py::list replay(const std::filesystem::path& activations, const PyPlan& plan,
                  const std::optional<PyModel>& m) {
    std::vector<experiment::ReplayRow> rows;
    if (experiment::is_linear_activations(activations)) {
      rows = experiment::replay_linear(activations, plan.plan(), ctx_->quantizers(), ctx_->gemms());
    } else {
      if (!m) throw Error(activations.string() + ": this activations file needs its model (model=...)");
      rows = experiment::replay(activations, *m->model, plan.plan(), ctx_->quantizers(), ctx_->gemms());
    }
    // The rows as `lpemu replay --json` names them.
    return from_fields(app::fields(app::ReplayReport{"", "", std::move(rows)})["rows"]).cast<py::list>();
  }

  /// Runs an application command on keyword arguments; its result as Python values.
  py::object call(const std::string& name, const py::dict& request) {
    const app::Fields in = to_fields(request);
    app::Fields out;
    {
      py::gil_scoped_release release;
      out = app::run(*ctx_, name, in);
    }
    return from_fields(out);
  }

 private:
  const format::Format& element_or_throw(const std::string& name) {
    if (const format::Format* f = ctx_->formats().find(name)) return *f;
    std::vector<std::string> all = ctx_->blocks().names();
    for (const auto& n : ctx_->formats().names()) all.push_back(n);
    throw UnknownNameError("unknown format '" + name + "' (neither a block nor an element format)" +
                           lpemu::detail::closest_names_hint(name, all));
  }

  template <typename Code>
  py::array encode_as_code(const format::Format& f, const CArray<float>& in,
                           const format::ConvertOptions& o) {
    py::array_t<Code> out(shape_of(in));
    auto ov = std::span<Code>(out.mutable_data(), static_cast<std::size_t>(out.size()));
    {
      py::gil_scoped_release release;
      format::encode(f, view(in), ov, o);
    }
    return out;
  }

  py::array encode_as(const format::Format& f, const CArray<float>& in, const format::ConvertOptions& o) {
    if (f.bits <= 8) return encode_as_code<std::uint8_t>(f, in, o);
    if (f.bits <= 16) return encode_as_code<std::uint16_t>(f, in, o);
    return encode_as_code<std::uint32_t>(f, in, o);
  }

  template <typename Code>
  static void check_codes(const format::Format& f, std::span<const Code> codes) {
    for (std::size_t i = 0; i < codes.size(); ++i) {
      if ((static_cast<std::uint64_t>(codes[i]) & ~f.code_mask()) != 0) {
        format::require_code_fits(f, static_cast<std::uint64_t>(codes[i]),
                                  "codes[" + std::to_string(i) + "]");
      }
    }
  }

  template <typename Code>
  py::array decode_as(const format::Format& f, const py::array& codes) {
    const CArray<Code> in(codes);
    check_codes(f, view(in));
    py::array_t<float> out(shape_of(in));
    auto ov = std::span<float>(out.mutable_data(), static_cast<std::size_t>(out.size()));
    {
      py::gil_scoped_release release;
      format::decode(f, view(in), ov);
    }
    return out;
  }

  template <typename T>
  py::array quantize_as(const format::Format& f, const py::array& x, const format::ConvertOptions& o) {
    const CArray<T> in(x);
    py::array_t<T> out(shape_of(in));
    auto ov = std::span<T>(out.mutable_data(), static_cast<std::size_t>(out.size()));
    {
      py::gil_scoped_release release;
      format::quantize(f, view(in), ov, o);
    }
    return out;
  }

  std::shared_ptr<experiment::Context> ctx_;
};

}  // namespace
}  // namespace lpemu::python

PYBIND11_MODULE(_lpemu, m) {
  using namespace lpemu;
  using namespace lpemu::python;
  m.doc() = "lpemu: bit-exact emulation of low-precision formats, datapaths and models";
  m.attr("source_dir") = LPEMU_SOURCE_DIR;

  // Library errors become Python exceptions carrying the library's message (base first, so the
  // most derived translator is tried first).
  static py::exception<Error> error(m, "Error", PyExc_ValueError);
  static py::exception<SpecError> spec_error(m, "SpecError", error.ptr());
  static py::exception<IoError> io_error(m, "IoError", error.ptr());
  static py::exception<ShapeError> shape_error(m, "ShapeError", error.ptr());
  static py::exception<UnknownNameError> unknown_error(m, "UnknownNameError", error.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const UnknownNameError& e) {
      PyErr_SetString(unknown_error.ptr(), e.what());
    } catch (const ShapeError& e) {
      PyErr_SetString(shape_error.ptr(), e.what());
    } catch (const IoError& e) {
      PyErr_SetString(io_error.ptr(), e.what());
    } catch (const SpecError& e) {
      PyErr_SetString(spec_error.ptr(), e.what());
    } catch (const Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });

  py::class_<format::ConvertOptions>(m, "_ConvertOptions");
  m.def("_options", &options, "Validated conversion options", py::arg("rounding"), py::arg("overflow"),
        py::arg("seed"), py::arg("sr_bits"), py::arg("ftz"), py::arg("daz"));

  py::class_<block::BlockOverrides>(m, "_BlockOverrides")
      .def(py::init([](std::optional<int> axis, std::optional<int> block, std::string scale_rule) {
             block::BlockOverrides o;
             o.axis = axis;
             o.block_size = block;
             o.scale_rule = std::move(scale_rule);
             return o;
           }),
           py::arg("axis"), py::arg("block"), py::arg("scale_rule"));

  py::class_<PyModel>(m, "Model", "A transformer model loaded from HDF5 (data/README.md schema)")
      .def_property_readonly("name", [](const PyModel& x) { return x.model->config.name; })
      .def_property_readonly("path", [](const PyModel& x) { return x.model->path; })
      .def_property_readonly("n_layers", [](const PyModel& x) { return x.model->config.n_layers; })
      .def_property_readonly("dim", [](const PyModel& x) { return x.model->config.dim; })
      .def_property_readonly("vocab_size", [](const PyModel& x) { return x.model->config.vocab_size; })
      .def_property_readonly("seq_len", [](const PyModel& x) { return x.model->config.seq_len; })
      .def(
          "encode", [](const PyModel& x, const std::string& text) { return x.model->tokenizer.encode(text); },
          "Token ids of `text`, BOS first (llama2.c tokenizer)", py::arg("text"))
      .def(
          "decode",
          [](const PyModel& x, const std::vector<int>& ids) { return x.model->tokenizer.decode(ids); },
          "Text of token ids", py::arg("ids"))
      .def(
          "eval_tokens",
          [](const PyModel& x, const std::string& text) { return experiment::eval_tokens(*x.model, text); },
          "The tokens `lpemu eval` scores for a text", py::arg("text"));

  py::class_<PyPlan>(m, "Plan", "A precision plan bound to the context that resolved its names")
      .def_property_readonly("name", [](const PyPlan& p) { return p.plan().name; })
      .def_property_readonly("description", [](const PyPlan& p) { return p.plan().description; })
      .def_property_readonly("origin", [](const PyPlan& p) { return p.plan().origin; })
      .def("format", &PyPlan::format, "Format name of a role at (layer, kind), or None", py::arg("role"),
           py::arg("layer"), py::arg("kind"), py::arg("n_layers"))
      .def("gemm", &PyPlan::gemm, "GEMM strategy name of a pass (forward, dgrad, wgrad) at (layer, kind)",
           py::arg("layer"), py::arg("kind"), py::arg("n_layers"), py::arg("gemm_pass") = "forward")
      .def("float_gemm", &PyPlan::float_gemm, "True when that GEMM is a plain float GEMM (no datapath)",
           py::arg("layer"), py::arg("kind"), py::arg("n_layers"), py::arg("gemm_pass") = "forward")
      .def("quantize", &PyPlan::quantize,
           "A copy of 2-D float32 x quantised as the plan's role at that point", py::arg("x"),
           py::arg("role"), py::arg("layer"), py::arg("kind"), py::arg("tensor"), py::arg("n_layers"),
           py::arg("head") = -1, py::arg("axis") = 1, py::arg("row0") = 0)
      .def("linear", &PyPlan::linear,
           "C = A·Bᵀ on the plan's GEMM strategy of a pass (forward, dgrad, wgrad) at (layer, kind)",
           py::arg("a"), py::arg("b"), py::arg("layer"), py::arg("kind"), py::arg("tensor"),
           py::arg("n_layers"), py::arg("gemm_pass") = "forward")
      .def("linear_quantized", &PyPlan::linear_quantized,
           "(C, A', B'): A and B quantised by their roles in a GEMM pass, then C = A'·B'ᵀ on its datapath",
           py::arg("a"), py::arg("b"), py::arg("layer"), py::arg("kind"), py::arg("tensor"),
           py::arg("n_layers"), py::arg("gemm_pass"), py::arg("a_tensor"), py::arg("b_tensor"));

  py::class_<PyPreparedB>(m, "PreparedB",
                          "A weight's B [K, N] codes prepared (checked, packed) for one datapath")
      .def_property_readonly("datapath", [](const PyPreparedB& p) { return p.b->datapath().name; })
      .def_property_readonly("k", [](const PyPreparedB& p) { return p.b->k(); })
      .def_property_readonly("n", [](const PyPreparedB& p) { return p.b->n(); })
      .def_property_readonly("packed", [](const PyPreparedB& p) { return p.b->packed(); })
      .def_property_readonly("bytes", [](const PyPreparedB& p) { return p.b->bytes(); })
      .def("gemm", &PyPreparedB::gemm, "D = C + A*B on the prepared B", py::arg("a"), py::arg("c"),
           py::arg("scales_a"), py::arg("scales_b"));
  py::class_<ContextHandle>(m, "Context", "Registries and factories: built-in formats plus user directories")
      .def(py::init<std::vector<std::filesystem::path>, std::vector<std::filesystem::path>>(),
           py::arg("formats_dirs") = std::vector<std::filesystem::path>{},
           py::arg("data_dirs") = std::vector<std::filesystem::path>{})
      .def("formats", &ContextHandle::formats, "Element formats, then block formats, as `lpemu formats list`")
      .def("encode", &ContextHandle::encode, "Codes of x", py::arg("name"), py::arg("x"), py::arg("options"))
      .def("decode", &ContextHandle::decode, "Values of codes", py::arg("name"), py::arg("codes"))
      .def("quantize", &ContextHandle::quantize, "Fake-quantised x", py::arg("name"), py::arg("x"),
           py::arg("overrides"), py::arg("options"))
      .def("block_encode", &ContextHandle::block_encode, "Codes and scales of x", py::arg("name"),
           py::arg("x"), py::arg("overrides"), py::arg("options"), py::arg("packed"))
      .def("datapath", &ContextHandle::datapath_info, "A datapath's formats and summary", py::arg("name"))
      .def("datapath_error", &ContextHandle::datapath_error,
           "Relative error of datapaths versus K (lpemu datapath-error)", py::arg("datapaths"), py::arg("ks"),
           py::arg("dist"), py::arg("trials"), py::arg("seed"), py::arg("inputs"))
      .def("dot", &ContextHandle::dot, "d = c + sum a_i*b_i under a datapath", py::arg("name"), py::arg("a"),
           py::arg("b"), py::arg("c"), py::arg("scales_a"), py::arg("scales_b"), py::arg("index"))
      .def("gemm", &ContextHandle::gemm, "D = C + A*B under a datapath", py::arg("name"), py::arg("a"),
           py::arg("b"), py::arg("c"), py::arg("scales_a"), py::arg("scales_b"))
      .def("prepare_b", &ContextHandle::prepare_b, "B [K, N] prepared once for many GEMMs under a datapath",
           py::arg("name"), py::arg("b"))
      .def("load_model", &ContextHandle::load_model, "A model by path or shipped name", py::arg("name"))
      .def("load_plan", &ContextHandle::load_plan, "A plan by path, fp32/fp64 or shipped name",
           py::arg("name"))
      .def("evaluate", &ContextHandle::evaluate, "Scores tokens under a plan against a reference",
           py::arg("model"), py::arg("plan"), py::arg("tokens"), py::arg("reference"))
      .def("replay", &ContextHandle::replay, "Replays recorded linear inputs under a plan",
           py::arg("activations"), py::arg("plan"), py::arg("model"))
      .def("call", &ContextHandle::call, "Runs an lpemu command on named fields (lpemu.app)", py::arg("name"),
           py::arg("request"));
  m.def("commands", &app::command_names, "Names of the commands Context.call runs");

  m.def(
      "read_sweep",
      [](const std::filesystem::path& dir) {
        py::list out;
        for (const auto& p : app::read_sweep(dir)) out.append(from_fields(app::fields(p)));
        return out;
      },
      "Every plan result of a sweep's output directory, in plan order", py::arg("dir"));
}
