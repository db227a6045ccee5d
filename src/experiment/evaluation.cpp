#include "lpemu/experiment/evaluation.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <span>

#include "lpemu/engine/ops.hpp"
#include "lpemu/engine/session.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/hdf5.hpp"

namespace lpemu::experiment {
namespace {

using engine::RowMatrix;
using metrics::compare;
using metrics::ErrorStats;
using metrics::kl_divergence;
using metrics::nll;

std::span<const float> span_of(const RowMatrix& m) { return {m.data(), static_cast<std::size_t>(m.size())}; }

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Run {
  RowMatrix logits;
  std::map<std::string, RowMatrix> residual;
  ErrorAccumulator points;
  double prepare_s = 0, forward_s = 0, hooks_s = 0;
};

Run run(const engine::Model& model, const engine::PrecisionPlan& plan, const std::vector<int>& tokens,
        const engine::QuantizerFactory& q, const engine::GemmFactory& g) {
  Run r;
  engine::SessionOptions o;
  o.quantizers = &q;
  o.gemms = &g;
  o.max_tokens = static_cast<int>(tokens.size());
  o.on_trace = [&](std::string_view name, const RowMatrix& x) {
    const auto h0 = Clock::now();
    if (name.find("residual") != std::string_view::npos && name != "layers/0/residual_input") {
      r.residual[std::string(name)] = x;
    }
    r.hooks_s += since(h0);
  };
  o.on_quant = [&](const engine::QuantPoint& p, const RowMatrix& in, const RowMatrix& out) {
    const auto h0 = Clock::now();
    const std::string key = (p.layer < 0 ? std::string("head") : std::to_string(p.layer)) + "/" +
                            std::string(engine::to_string(p.role)) + "/" + std::string(p.tensor);
    r.points.add(key, span_of(in), span_of(out), p.head);
    r.hooks_s += since(h0);
  };
  const auto t0 = Clock::now();
  engine::Session s(model, plan, o);
  r.prepare_s = since(t0);
  const auto t1 = Clock::now();
  r.logits = s.forward(tokens);
  r.forward_s = since(t1);
  return r;
}

bool is_nan(float v) { return std::isnan(v); }

}  // namespace

void ErrorAccumulator::add(const std::string& key, std::span<const float> ref, std::span<const float> test,
                           int part) {
  if (ref.size() != test.size()) throw ShapeError("metrics: '" + key + "' pair sizes differ");
  auto it = std::find_if(sums_.begin(), sums_.end(), [&](const auto& e) { return e.first == key; });
  if (it == sums_.end()) {
    sums_.emplace_back(key, std::map<int, Sums>{});
    it = sums_.end() - 1;
  }
  Sums& s = it->second[part];
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double r = static_cast<double>(ref[i]);
    const double d = static_cast<double>(test[i]) - r;
    s.sig += r * r;
    s.err += d * d;
    s.max_abs = metrics::max_nan(s.max_abs, std::abs(d));
  }
  s.count += ref.size();
}

std::vector<std::pair<std::string, ErrorStats>> ErrorAccumulator::results() const {
  std::vector<std::pair<std::string, ErrorStats>> out;
  for (const auto& [k, parts] : sums_) {
    Sums s;
    for (const auto& [part, p] : parts) {
      s.sig += p.sig;
      s.err += p.err;
      s.max_abs = metrics::max_nan(s.max_abs, p.max_abs);
      s.count += p.count;
    }
    ErrorStats e;
    e.count = s.count;
    const double n = s.count == 0 ? 1.0 : static_cast<double>(s.count);
    e.mse = s.err / n;
    e.ref_rms = std::sqrt(s.sig / n);
    e.max_abs = s.max_abs;
    e.sqnr_db = s.err == 0 ? std::numeric_limits<double>::infinity() : 10.0 * std::log10(s.sig / s.err);
    out.emplace_back(k, e);
  }
  return out;
}

EvalResult evaluate(const engine::Model& model, const engine::PrecisionPlan& plan,
                    const engine::PrecisionPlan& reference, const std::vector<int>& tokens,
                    const engine::QuantizerFactory& quantizers, const engine::GemmFactory& gemms) {
  if (tokens.size() < 2) throw ShapeError("eval: need at least two tokens to score");
  const Run test = run(model, plan, tokens, quantizers, gemms);
  const Run ref = run(model, reference, tokens, quantizers, gemms);
  EvalResult e;
  e.tokens = tokens;
  e.plan_logits = test.logits;
  const std::size_t n = tokens.size() - 1;
  for (std::size_t t = 0; t < n; ++t) {
    const auto ti = static_cast<Eigen::Index>(t);
    const std::span<const float> lt(&test.logits(ti, 0), static_cast<std::size_t>(test.logits.cols()));
    const std::span<const float> lr(&ref.logits(ti, 0), static_cast<std::size_t>(ref.logits.cols()));
    e.nll.push_back(nll(lt, tokens[t + 1]));
    e.ref_nll.push_back(nll(lr, tokens[t + 1]));
    e.kl.push_back(kl_divergence(lr, lt));
    // A NaN logit has no rank: the position's agreement is unknown, so the mean is NaN too.
    const bool ranked =
        std::none_of(lt.begin(), lt.end(), is_nan) && std::none_of(lr.begin(), lr.end(), is_nan);
    e.top1_agree.push_back(ranked && engine::argmax(lt) == engine::argmax(lr) ? 1 : 0);
    e.mean_nll += e.nll.back();
    e.ref_mean_nll += e.ref_nll.back();
    e.mean_kl += e.kl.back();
    e.max_kl = metrics::max_nan(e.max_kl, e.kl.back());
    e.top1_agreement += ranked ? e.top1_agree.back() : std::numeric_limits<double>::quiet_NaN();
  }
  const double dn = static_cast<double>(n);
  e.mean_nll /= dn;
  e.ref_mean_nll /= dn;
  e.mean_kl /= dn;
  e.top1_agreement /= dn;
  e.perplexity = std::exp(e.mean_nll);
  e.ref_perplexity = std::exp(e.ref_mean_nll);
  for (int l = 1; l <= model.config.n_layers; ++l) {
    const std::string name = l < model.config.n_layers ? "layers/" + std::to_string(l) + "/residual_input"
                                                       : std::string("final_residual");
    e.residual.emplace_back(name, compare(span_of(ref.residual.at(name)), span_of(test.residual.at(name))));
  }
  e.logits = compare(span_of(ref.logits), span_of(test.logits));
  e.points = test.points.results();
  e.timing = {test.prepare_s, test.forward_s, ref.prepare_s, ref.forward_s, test.hooks_s + ref.hooks_s};
  return e;
}

namespace {

// One linear layer fed with a recorded input: quantise input and weight as the plan says, multiply
// with the plan's GEMM, and compare with the exact (double) product of the unquantised operands.
ReplayRow replay_one(int layer, engine::LayerKind kind, const std::string& tensor, const std::string& input,
                     const RowMatrix& x, const RowMatrix& w, engine::Role in_role, engine::Role w_role,
                     const engine::PrecisionPlan& plan, int n_layers,
                     const engine::QuantizerFactory& quantizers, const engine::GemmFactory& gemms) {
  ReplayRow r;
  r.layer = layer;
  r.tensor = tensor;
  r.input = input;
  RowMatrix xq = x;
  RowMatrix wq = w;
  const auto in_spec = plan.resolve(in_role, layer, kind, n_layers);
  const auto w_spec = plan.resolve(w_role, layer, kind, n_layers);
  r.input_format = in_spec ? in_spec->format : "none";
  r.weight_format = w_spec ? w_spec->format : "none";
  r.gemm = plan.resolve_gemm(layer, kind, n_layers);
  // Operands are quantised and enter the plan's GEMM as a session feeds them (gemm_operands).
  const std::unique_ptr<engine::Quantizer> qx = in_spec ? quantizers.make(*in_spec) : nullptr;
  const std::unique_ptr<engine::Quantizer> qw = w_spec ? quantizers.make(*w_spec) : nullptr;
  const auto strategy = gemms.make(r.gemm);
  RowMatrix y;
  if (strategy->datapath() != nullptr) {
    y = engine::gemm_operands(*strategy, xq, wq, qx.get(), qw.get());
  }
  engine::QuantPoint p;
  p.layer = layer;
  p.kind = kind;
  p.tensor = input;
  if (qx) {
    p.role = in_role;
    qx->apply(xq, p);
  }
  if (qw) {
    p.role = w_role;
    p.tensor = tensor;
    p.axis = 1;
    qw->apply(wq, p);
  }
  const std::string af = in_spec ? in_spec->format : std::string();
  const std::string bf = w_spec ? w_spec->format : std::string();
  if (strategy->datapath() == nullptr)
    strategy->nt(xq, wq, y, engine::GemmPoint{layer, kind, tensor, af, bf});
  const engine::RowMatrixD xd = x.cast<double>();
  const engine::RowMatrixD wd = w.cast<double>();
  engine::RowMatrixD yd;
  engine::linear(xd, wd, engine::Vec<double>(), yd);
  const RowMatrix yref = yd.cast<float>();
  r.input_error = compare(span_of(x), span_of(xq));
  r.weight_error = compare(span_of(w), span_of(wq));
  r.output_error = compare(span_of(yref), span_of(y));
  return r;
}

}  // namespace

std::vector<ReplayRow> replay(const std::filesystem::path& activations, const engine::Model& model,
                              const engine::PrecisionPlan& plan, const engine::QuantizerFactory& quantizers,
                              const engine::GemmFactory& gemms) {
  const io::H5File f = io::H5File::open(activations);
  const int n_layers = model.config.n_layers;
  std::vector<ReplayRow> rows;
  auto read = [&](const std::string& name, Eigen::Index cols) {
    const io::Tensor t = f.read_floats(name);
    if (t.shape.size() != 2 || static_cast<Eigen::Index>(t.shape[1]) != cols) {
      throw ShapeError(activations.string() + ": dataset '" + name + "' is not [tokens, " +
                       std::to_string(cols) + "]");
    }
    if (t.shape[0] == 0) {  // no token: every error of the replay would be of nothing
      throw ShapeError(activations.string() + ": dataset '" + name +
                       "' holds 0 tokens: expected at least one");
    }
    RowMatrix m(static_cast<Eigen::Index>(t.shape[0]), cols);
    std::copy(t.data.begin(), t.data.end(), m.data());
    return m;
  };
  auto one = [&](int layer, engine::LayerKind kind, const std::string& tensor, const std::string& input,
                 const RowMatrix& x, const engine::WeightMatrix& w, engine::Role in_role,
                 engine::Role w_role) {
    RowMatrix buffer;
    rows.push_back(replay_one(layer, kind, tensor, input, x, w.view(buffer), in_role, w_role, plan, n_layers,
                              quantizers, gemms));
    rows.back().role = tensor == "wq"   ? "attention.q"
                       : tensor == "wk" ? "attention.k"
                       : tensor == "wv" ? "attention.v"
                       : tensor == "wo" ? "attention.out"
                       : tensor == "w1" ? "mlp.gate"
                       : tensor == "w3" ? "mlp.up"
                       : tensor == "w2" ? "mlp.down"
                                        : "head";
  };
  using engine::LayerKind;
  using engine::Role;
  for (int l = 0; l < n_layers; ++l) {
    const auto& w = model.layers[static_cast<std::size_t>(l)];
    const std::string p = "layers/" + std::to_string(l) + "/";
    const Eigen::Index dim = model.config.dim;
    const RowMatrix qkv = read(p + "attention/qkv_input", dim);
    one(l, LayerKind::attention, "wq", p + "attention/qkv_input", qkv, w.wq, Role::linear_input,
        Role::weights);
    one(l, LayerKind::attention, "wk", p + "attention/qkv_input", qkv, w.wk, Role::linear_input,
        Role::weights);
    one(l, LayerKind::attention, "wv", p + "attention/qkv_input", qkv, w.wv, Role::linear_input,
        Role::weights);
    one(l, LayerKind::attention, "wo", p + "attention/wo_input", read(p + "attention/wo_input", w.wo.cols()),
        w.wo, Role::linear_input, Role::weights);
    if (!w.experts.empty()) continue;  // mixture-of-experts blocks: attention only (no dense FFN to replay)
    const RowMatrix ff = read(p + "feed_forward/w1_w3_input", dim);
    one(l, LayerKind::mlp, "w1", p + "feed_forward/w1_w3_input", ff, w.w1, Role::linear_input, Role::weights);
    if (w.w3.size() != 0) {
      one(l, LayerKind::mlp, "w3", p + "feed_forward/w1_w3_input", ff, w.w3, Role::linear_input,
          Role::weights);
    }
    one(l, LayerKind::mlp, "w2", p + "feed_forward/w2_input", read(p + "feed_forward/w2_input", w.w2.cols()),
        w.w2, Role::linear_input, Role::weights);
  }
  if (f.exists("output_input")) {
    one(-1, LayerKind::head, "output", "output_input", read("output_input", model.config.dim), model.output,
        Role::lm_head_input, Role::lm_head);
  }
  return rows;
}

bool is_linear_activations(const std::filesystem::path& activations) {
  const io::H5File f = io::H5File::open(activations);
  return f.exists("/linear");
}

std::vector<ReplayRow> replay_linear(const std::filesystem::path& activations,
                                     const engine::PrecisionPlan& plan,
                                     const engine::QuantizerFactory& quantizers,
                                     const engine::GemmFactory& gemms) {
  const io::H5File f = io::H5File::open(activations);
  if (!f.exists("/linear")) {
    throw IoError(activations.string() +
                  ": no /linear group (schema lpemu-linear-activations, data/README.md)");
  }
  struct Item {
    std::string name;
    int layer;
    engine::LayerKind kind;
    std::string role;
  };
  std::vector<Item> items;
  int n_layers = 0;
  for (const auto& name : f.list("/linear")) {
    const std::string g = "/linear/" + name;
    const int layer = f.has_attr(g, "layer") ? static_cast<int>(f.attr_int(g, "layer")) : -1;
    const std::string kind = f.has_attr(g, "kind") ? f.attr_string(g, "kind") : "other";
    engine::LayerKind k = engine::LayerKind::attention;  // "other": linear maps outside the named kinds
    if (kind != "other" && !engine::parse_layer_kind(kind, k)) {
      throw SpecError(activations.string() + ":" + g + ": attribute kind = \"" + kind +
                      "\": expected attention, mlp, head or other");
    }
    const std::string role = f.has_attr(g, "role") ? f.attr_string(g, "role") : kind;
    items.push_back({name, layer, k, role});
    n_layers = std::max(n_layers, layer + 1);
  }
  std::vector<ReplayRow> rows;
  for (const auto& it : items) {
    const std::string g = "/linear/" + it.name;
    const io::Tensor x = f.read_floats(g + "/input");
    const io::Tensor w = f.read_floats(g + "/weight");
    if (x.shape.size() != 2 || w.shape.size() != 2 || x.shape[1] != w.shape[1]) {
      throw ShapeError(activations.string() + ":" + g +
                       ": input [tokens, in] and weight [out, in] disagree (input " +
                       std::to_string(x.shape.size() == 2 ? x.shape[1] : 0) + " features, weight " +
                       std::to_string(w.shape.size() == 2 ? w.shape[1] : 0) + ")");
    }
    RowMatrix xm(static_cast<Eigen::Index>(x.shape[0]), static_cast<Eigen::Index>(x.shape[1]));
    std::copy(x.data.begin(), x.data.end(), xm.data());
    RowMatrix wm(static_cast<Eigen::Index>(w.shape[0]), static_cast<Eigen::Index>(w.shape[1]));
    std::copy(w.data.begin(), w.data.end(), wm.data());
    const bool head = it.kind == engine::LayerKind::head;
    if (it.role == "other") {
      // No kind is known: only entries that attention and MLP layers share apply.
      const auto same = [&](engine::Role r) {
        const auto a = plan.resolve(r, it.layer, engine::LayerKind::attention, n_layers);
        const auto m = plan.resolve(r, it.layer, engine::LayerKind::mlp, n_layers);
        return (a ? a->format : "none") == (m ? m->format : "none");
      };
      if (!same(engine::Role::linear_input) || !same(engine::Role::weights) ||
          plan.resolve_gemm(it.layer, engine::LayerKind::attention, n_layers) !=
              plan.resolve_gemm(it.layer, engine::LayerKind::mlp, n_layers)) {
        throw Error(activations.string() + ":" + g + ": linear map '" + it.name +
                    "' has kind \"other\" but plan '" + plan.name +
                    "' quantises attention and MLP layers differently there; record it with its kind");
      }
    }
    rows.push_back(replay_one(it.layer, it.kind, it.name, g + "/input", xm, wm,
                              head ? engine::Role::lm_head_input : engine::Role::linear_input,
                              head ? engine::Role::lm_head : engine::Role::weights, plan, n_layers,
                              quantizers, gemms));
    rows.back().role = it.role;
  }
  return rows;
}

std::vector<int> eval_tokens(const engine::Model& model, std::string text) {
  if (model.tokenizer.empty()) throw IoError(model.path.string() + ": model file has no tokenizer");
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  std::vector<int> tokens = model.tokenizer.encode(text);
  if (static_cast<int>(tokens.size()) > model.config.seq_len) {
    tokens.resize(static_cast<std::size_t>(model.config.seq_len));
  }
  return tokens;
}

}  // namespace lpemu::experiment
