#include "lpemu/app/train_sweep.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <numbers>
#include <random>
#include <sstream>

#include "lpemu/app/price.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/io/svg_plot.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::app {
namespace {

namespace fs = std::filesystem;

/// Standard normal draws from a 64-bit Mersenne Twister by Box–Muller (the same numbers on every
/// platform, unlike std::normal_distribution).
class Normal {
 public:
  explicit Normal(std::uint64_t seed) : rng_(seed) {}
  double operator()() {
    if (have_) {
      have_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(rng_() >> 11) + 1.0) * 0x1p-53;  // (0, 1]
    const double u2 = static_cast<double>(rng_() >> 11) * 0x1p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * std::numbers::pi * u2);
    have_ = true;
    return r * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  std::mt19937_64 rng_;
  double spare_ = 0;
  bool have_ = false;
};

engine::WeightMatrix random_matrix(Normal& n, long long rows, long long cols, double sd) {
  engine::RowMatrix m(rows, cols);
  for (long long i = 0; i < rows; ++i)
    for (long long j = 0; j < cols; ++j) m(i, j) = static_cast<float>(sd * n());
  return engine::WeightMatrix(std::move(m));
}

engine::Vec<float> ones(long long n) { return engine::Vec<float>::Ones(n); }

double tail_mean(const std::vector<TrainStep>& log) {
  const std::size_t k = std::min<std::size_t>(10, log.size());
  double s = 0;
  for (std::size_t i = log.size() - k; i < log.size(); ++i) s += log[i].loss;
  return k == 0 ? std::nan("") : s / static_cast<double>(k);
}

std::string num(double v) { return io::format_number(v); }

// The validation-loss curves beside the training-loss ones: the reference's lowest and highest
// validation loss over its seeds at each measured step, then every other plan's; writes
// train_val_loss.svg and returns the report's section ("" when no run measured a validation loss).
std::string validation_figure(const experiment::Experiment& exp, const experiment::TrainSetup& t,
                              TrainSweepReport& rep) {
  if (t.val_fraction <= 0) return "";
  io::Plot plot;
  plot.title = exp.name + ": validation loss";
  plot.x_label = "step";
  plot.y_label = "validation loss (nats/token)";
  io::Series lo{t.reference + " min over seeds", {}, {}, true, true, {}};
  io::Series hi{t.reference + " max over seeds", {}, {}, true, true, {}};
  const std::size_t seeds = t.seeds.size();
  for (std::size_t s = 0; s < rep.runs.front().result.log.size(); ++s) {
    double a = std::numeric_limits<double>::infinity(), b = -a;
    for (std::size_t i = 0; i < seeds; ++i) {
      const double v = rep.runs[i].result.log[s].val_loss;
      a = std::min(a, v);
      b = std::max(b, v);
    }
    if (!std::isfinite(a) || !std::isfinite(b)) continue;
    const double step = rep.runs.front().result.log[s].step;
    lo.x.push_back(step);
    lo.y.push_back(a);
    hi.x.push_back(step);
    hi.y.push_back(b);
  }
  plot.series = {lo, hi};
  std::ostringstream md;
  md << "## Validation loss\n\nThe mean cross-entropy of the held-out windows (the last ones, a share of "
     << num(t.val_fraction) << " of the token windows) every " << t.eval_every
     << " steps, before the step's update.\n\n![validation loss](train_val_loss.svg)\n\n"
     << "| plan | seed | last measured step | validation loss |\n|---|---|---|---|\n";
  for (std::size_t i = 0; i < rep.runs.size(); ++i) {
    const TrainRun& r = rep.runs[i];
    io::Series ser{r.label, {}, {}, true, true, {}};
    int last = -1;
    double last_v = std::nan("");
    for (const auto& st : r.result.log) {
      if (!std::isfinite(st.val_loss)) continue;
      ser.x.push_back(st.step);
      ser.y.push_back(st.val_loss);
      last = st.step;
      last_v = st.val_loss;
    }
    md << "| " << r.label << " | " << r.seed << " | " << last << " | "
       << io::format_number(last_v, io::NumberStyle::fixed, 4) << " |\n";
    if (i >= seeds) plot.series.push_back(std::move(ser));
  }
  rep.val_svg = rep.dir / "train_val_loss.svg";
  io::write_svg(rep.val_svg, plot);
  md << "\n";
  return md.str();
}

// The per-block gradient SQNR of every plan but the reference at the last step that measured it,
// as a heat map (plans x blocks, train_sqnr.svg) and a table (train_sqnr.csv and the report's
// section); "" when no run measured it.
std::string sqnr_figure(const experiment::Experiment& exp, const experiment::TrainSetup& t,
                        TrainSweepReport& rep) {
  if (t.sqnr_every <= 0) return "";
  io::HeatMap map;
  map.title = exp.name + ": gradient SQNR per block at the last measured step";
  map.x_label = "block";
  map.y_label = "plan";
  map.value_label = "SQNR (dB)";
  std::ostringstream csv, md;
  csv << "label,seed,step,block,grad_sqnr_db\n";
  md << "## Gradient SQNR\n\nPer block, the signal-to-quantisation-noise ratio (dB) of each plan's "
        "gradient against the gradient of the same weights and batch with nothing quantised, at the "
        "last step that measured it (every "
     << t.sqnr_every << " steps).\n\n![gradient SQNR](train_sqnr.svg)\n\n";
  std::size_t blocks = 0;
  for (const auto& r : rep.runs)
    for (const auto& st : r.result.log) blocks = std::max(blocks, st.grad_sqnr.size());
  if (blocks == 0) return "";
  for (std::size_t b = 0; b < blocks; ++b) map.cols.push_back(std::to_string(b));
  md << "| plan | seed | step |";
  for (std::size_t b = 0; b < blocks; ++b) md << " block " << b << " |";
  md << "\n|---|---|---|";
  for (std::size_t b = 0; b < blocks; ++b) md << "---|";
  md << "\n";
  bool infinite = false;
  for (std::size_t i = t.seeds.size(); i < rep.runs.size(); ++i) {
    const TrainRun& r = rep.runs[i];
    const TrainStep* last = nullptr;
    for (const auto& st : r.result.log)
      if (st.grad_sqnr.size() == blocks &&
          std::any_of(st.grad_sqnr.begin(), st.grad_sqnr.end(), [](double v) { return !std::isnan(v); }))
        last = &st;
    map.rows.push_back(r.label);
    md << "| " << r.label << " | " << r.seed << " | " << (last != nullptr ? last->step : -1) << " |";
    for (std::size_t b = 0; b < blocks; ++b) {
      const double v = last != nullptr ? last->grad_sqnr[b] : std::nan("");
      infinite = infinite || std::isinf(v);
      map.values.push_back(std::isfinite(v) ? v : std::nan(""));
      md << " " << io::format_number(v, io::NumberStyle::fixed, 2) << " |";
      if (last != nullptr)
        csv << r.label << "," << r.seed << "," << last->step << "," << b << "," << num(v) << "\n";
    }
    md << "\n";
  }
  if (map.rows.empty()) return "";
  if (infinite) map.notes.push_back("inf (a gradient equal to the unquantised one) is drawn as not measured");
  rep.sqnr_svg = rep.dir / "train_sqnr.svg";
  io::write_svg(rep.sqnr_svg, io::layout(map));
  rep.sqnr_csv = rep.dir / "train_sqnr.csv";
  io::write_file_atomic(rep.sqnr_csv, csv.str(), io::OutputPolicy{true, {}});
  md << "\n";
  return md.str();
}

}  // namespace

engine::Model initial_model(const cost::ModelShape& s, std::uint64_t seed, const engine::Tokenizer& tokenizer,
                            int seq_len) {
  if (s.moe())
    throw SpecError("train: shape '" + s.name + "': mixture-of-experts shapes are not trainable yet");
  if (!s.gated_mlp)
    throw SpecError("train: shape '" + s.name + "': expected a Llama-style (gated MLP) shape");
  if (s.dim <= 0 || s.n_heads <= 0 || s.dim % s.n_heads != 0 || s.n_kv_heads <= 0 ||
      s.n_heads % s.n_kv_heads != 0)
    throw SpecError("train: shape '" + s.name +
                    "': expected dim divisible by n_heads, n_heads by n_kv_heads");
  engine::Model m;
  engine::Config& c = m.config;
  c.name = s.name;
  c.dim = static_cast<int>(s.dim);
  c.n_layers = static_cast<int>(s.n_layers);
  c.n_heads = static_cast<int>(s.n_heads);
  c.n_kv_heads = static_cast<int>(s.n_kv_heads);
  c.head_dim = static_cast<int>(s.head_dim());
  c.hidden_dim = static_cast<int>(s.hidden_dim);
  c.vocab_size = static_cast<int>(s.vocab_size);
  c.seq_len = seq_len;
  c.tied_embeddings = s.tied_embeddings;
  Normal n(seed);
  const double sd = 0.02, out_sd = 0.02 / std::sqrt(2.0 * static_cast<double>(s.n_layers));
  m.tok_embeddings = random_matrix(n, s.vocab_size, s.dim, sd);
  for (long long l = 0; l < s.n_layers; ++l) {
    engine::LayerWeights w;
    w.attention_norm = ones(s.dim);
    w.wq = random_matrix(n, s.dim, s.dim, sd);
    w.wk = random_matrix(n, s.kv_dim(), s.dim, sd);
    w.wv = random_matrix(n, s.kv_dim(), s.dim, sd);
    w.wo = random_matrix(n, s.dim, s.dim, out_sd);
    w.ffn_norm = ones(s.dim);
    w.w1 = random_matrix(n, s.hidden_dim, s.dim, sd);
    w.w2 = random_matrix(n, s.dim, s.hidden_dim, out_sd);
    w.w3 = random_matrix(n, s.hidden_dim, s.dim, sd);
    m.layers.push_back(std::move(w));
  }
  m.norm = ones(s.dim);
  m.output = s.tied_embeddings ? m.tok_embeddings : random_matrix(n, s.vocab_size, s.dim, sd);
  m.tokenizer = tokenizer;
  m.validate();
  return m;
}

engine::Model shape_model(experiment::Context& ctx, const std::string& shape, std::uint64_t seed, int seq) {
  const cost::ModelShape s = cost_catalog(ctx).shape(shape);
  const engine::Model tok_model = ctx.load_model("stories260K");
  const engine::Tokenizer tok =
      tok_model.config.vocab_size == s.vocab_size ? tok_model.tokenizer : engine::Tokenizer{};
  return initial_model(s, seed, tok, std::max(seq, 256));
}

TrainSweepReport train_sweep(experiment::Context& ctx, const experiment::Experiment& exp,
                             const fs::path& out) {
  if (!exp.train) throw SpecError(exp.origin.string() + ": no [train] table");
  const experiment::TrainSetup& t = *exp.train;
  TrainSweepReport rep;
  rep.dir = out.empty() ? exp.out_dir : out;
  io::check_output_dir(rep.dir, "train_results.csv");
  fs::create_directories(rep.dir / "plans");
  fs::create_directories(rep.dir / "init");
  const io::OutputPolicy force{true, {}};

  // One initial model per seed, from the shape.
  const cost::ModelShape shape = cost_catalog(ctx).shape(t.shape);
  std::map<std::uint64_t, fs::path> inits;
  for (const auto seed : t.seeds) {
    const fs::path f = rep.dir / "init" / ("seed" + std::to_string(seed) + ".h5");
    engine::save_model(shape_model(ctx, t.shape, seed, t.seq), f);
    inits[seed] = f;
  }

  // Each plan written to one file that both training and pricing read.
  bool has_reference = false;
  std::vector<std::pair<std::string, fs::path>> plans;
  for (const auto& p : exp.plans) {
    const fs::path f = rep.dir / "plans" / (p.label + ".toml");
    std::string text = p.inline_toml;
    if (text.empty()) {
      const fs::path rel = exp.origin.parent_path() / p.plan;
      text = engine::to_toml(ctx.load_plan(fs::is_regular_file(rel) ? rel.string() : p.plan));
    }
    io::write_file_atomic(f, text, force);
    plans.emplace_back(p.label, f);
    has_reference = has_reference || p.label == t.reference;
  }
  if (!has_reference)
    throw SpecError(exp.origin.string() + ": train.reference = \"" + t.reference +
                    "\": no plan has that label");

  const bool priced = !exp.cost.cluster.system.empty();
  const auto run_one = [&](const std::string& label, const fs::path& plan, std::uint64_t seed) {
    TrainRun r;
    r.label = label;
    r.seed = seed;
    r.plan = plan;
    TrainRequest q;
    q.model = inits.at(seed).string();
    q.plan = plan.string();
    q.tokens = exp.tokens;
    q.steps = t.steps;
    q.batch = t.batch;
    q.seq = t.seq;
    q.optimizer = t.optimizer;
    q.lr = t.lr;
    q.weight_decay = t.weight_decay;
    q.clip_norm = t.clip_norm;
    q.warmup = t.warmup;
    q.seed = seed;
    q.val_fraction = t.val_fraction;
    q.eval_every = t.eval_every;
    q.sqnr_every = t.sqnr_every;
    q.out = rep.dir / "runs" / (label + (label == t.reference ? "_seed" + std::to_string(seed) : ""));
    r.result = train(ctx, q);
    r.final_loss = tail_mean(r.result.log);
    r.step_s = r.tokens_per_s = r.mfu = r.memory_bytes = std::numeric_limits<double>::quiet_NaN();
    if (priced) {
      PriceRequest pr;
      pr.target = exp.cost.target;
      pr.model = exp.cost.shape;
      pr.plan = plan.string();
      pr.setup = exp.cost.cluster;
      const Fields f = fields(price(ctx, pr));
      const Fields& s = f.at("cluster").at("train").at(0);
      r.step_s = s.at("step_s").get<double>();
      r.tokens_per_s = s.at("tokens_per_s").get<double>();
      r.mfu = s.at("mfu").get<double>();
      r.memory_bytes = s.at("memory").at("total").get<double>();
    }
    rep.runs.push_back(std::move(r));
  };
  for (const auto& [label, file] : plans)
    if (label == t.reference)
      for (const auto seed : t.seeds) run_one(label, file, seed);
  for (const auto& [label, file] : plans)
    if (label != t.reference) run_one(label, file, t.seeds.front());

  double ref = 0;
  for (std::size_t i = 0; i < t.seeds.size(); ++i) ref += rep.runs[i].final_loss;
  ref /= static_cast<double>(t.seeds.size());
  for (auto& r : rep.runs) r.gap = r.final_loss - ref;

  // results: one row per run; log: every step of every run.
  std::ostringstream csv, log;
  csv << "label,seed,plan,final_loss,loss_gap,step_s,tokens_per_s,mfu,memory_bytes,train_seconds\n";
  log << "label,seed,step,loss,grad_norm,lr,val_loss\n";
  for (const auto& r : rep.runs) {
    csv << r.label << "," << r.seed << "," << fs::relative(r.plan, rep.dir).generic_string() << ","
        << num(r.final_loss) << "," << num(r.gap) << "," << num(r.step_s) << "," << num(r.tokens_per_s) << ","
        << num(r.mfu) << "," << num(r.memory_bytes) << "," << num(r.result.seconds) << "\n";
    for (const auto& s : r.result.log)
      log << r.label << "," << r.seed << "," << s.step << "," << num(s.loss) << "," << num(s.grad_norm) << ","
          << num(s.lr) << "," << num(s.val_loss) << "\n";
  }
  rep.results_csv = rep.dir / "train_results.csv";
  rep.log_csv = rep.dir / "train_log.csv";
  io::write_file_atomic(rep.results_csv, csv.str(), force);
  io::write_file_atomic(rep.log_csv, log.str(), force);

  // The loss curves: the reference's lowest and highest loss over its seeds at each step (the
  // noise band), then every other plan.
  io::Plot plot;
  plot.title = exp.name + ": training loss (" + shape.name + ", " + t.optimizer + ", lr " + num(t.lr) + ")";
  plot.x_label = "step";
  plot.y_label = "loss (nats/token)";
  io::Series lo{t.reference + " min over seeds", {}, {}, true, false, {}};
  io::Series hi{t.reference + " max over seeds", {}, {}, true, false, {}};
  for (int s = 0; s < t.steps; ++s) {
    double a = std::numeric_limits<double>::infinity(), b = -a;
    for (std::size_t i = 0; i < t.seeds.size(); ++i) {
      a = std::min(a, rep.runs[i].result.log[static_cast<std::size_t>(s)].loss);
      b = std::max(b, rep.runs[i].result.log[static_cast<std::size_t>(s)].loss);
    }
    lo.x.push_back(s);
    lo.y.push_back(a);
    hi.x.push_back(s);
    hi.y.push_back(b);
  }
  plot.series = {lo, hi};
  for (std::size_t i = t.seeds.size(); i < rep.runs.size(); ++i) {
    io::Series ser{rep.runs[i].label, {}, {}, true, false, {}};
    for (const auto& s : rep.runs[i].result.log) {
      ser.x.push_back(s.step);
      ser.y.push_back(s.loss);
    }
    plot.series.push_back(std::move(ser));
  }
  rep.loss_svg = rep.dir / "train_loss.svg";
  io::write_svg(rep.loss_svg, plot);
  const std::string val_md = validation_figure(exp, t, rep);
  const std::string sqnr_md = sqnr_figure(exp, t, rep);

  std::ostringstream md;
  md << "# " << exp.name << ": training\n\n" << exp.description << "\n\n";
  md << "Shape " << shape.name << ", " << t.steps << " steps of " << t.batch << " x " << t.seq << " tokens, "
     << t.optimizer << " lr " << num(t.lr) << "; every plan from seed " << t.seeds.front() << ", "
     << t.reference << " from " << t.seeds.size() << " seeds (mean final loss "
     << io::format_number(ref, io::NumberStyle::fixed, 4) << ").\n\n![loss](train_loss.svg)\n\n";
  md << "| plan | seed | final loss (last 10 steps) | gap vs " << t.reference
     << " mean | step s (cost) | tokens/s (cost) |\n";
  md << "|---|---|---|---|---|---|\n";
  for (const auto& r : rep.runs)
    md << "| " << r.label << " | " << r.seed << " | "
       << io::format_number(r.final_loss, io::NumberStyle::fixed, 4) << " | "
       << io::format_number(r.gap, io::NumberStyle::fixed, 4) << " | "
       << io::format_number(r.step_s, io::NumberStyle::significant, 4) << " | "
       << io::format_number(r.tokens_per_s, io::NumberStyle::significant, 4) << " |\n";
  md << (val_md.empty() && sqnr_md.empty() ? "" : "\n") << val_md << sqnr_md;
  rep.report_md = rep.dir / "train_report.md";
  io::write_file_atomic(rep.report_md, md.str(), force);
  return rep;
}

}  // namespace lpemu::app
