#include "lpemu/app/train.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <type_traits>

#include "lpemu/app/price.hpp"
#include "lpemu/app/train_sweep.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/tokenizer.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/hdf5.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/train/backward.hpp"
#include "lpemu/train/linear_plan.hpp"
#include "lpemu/train/loss_scale.hpp"
#include "lpemu/train/optimizer.hpp"

namespace lpemu::app {
namespace {

namespace fs = std::filesystem;

std::vector<int> training_tokens(const TrainRequest& a, const engine::Model& model) {
  if (!a.tokens.empty()) return engine::load_token_ids(a.tokens, model.config.vocab_size);
  if (model.tokenizer.empty())
    throw IoError(model.path.string() + ": model file has no tokenizer (use tokens)");
  std::vector<int> all;
  for (const auto& f : a.texts) {
    std::string text = io::read_input(f, std::size_t{64} << 20);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    const std::vector<int> t = model.tokenizer.encode(text);
    all.insert(all.end(), t.begin(), t.end());
  }
  return all;
}

/// The model `a` names: a model file or shipped model, else a shape (a data/shapes name or a .toml
/// file) initialised from `a.seed` exactly as a training experiment initialises it.
engine::Model training_model(experiment::Context& ctx, const TrainRequest& a) {
  if (fs::path(a.model).extension() != ".toml") {
    try {
      return ctx.load_model(a.model);
    } catch (const IoError& e) {
      const std::vector<std::string> shapes = cost_catalog(ctx).shape_names();
      if (std::find(shapes.begin(), shapes.end(), a.model) == shapes.end()) {
        throw IoError("train: model '" + a.model +
                      "' is neither a model file, a shipped model nor a shape (" + e.what() +
                      "; shapes: " + detail::join_names(shapes) + ")");
      }
    }
  }
  return shape_model(ctx, a.model, a.seed, a.seq);
}

/// Mean next-token cross-entropy of windows [first, first + count) of `tokens` under `p` and the
/// plan, in chunks of `batch` windows (the mean over all their predictions).
template <class T>
double windows_loss(const engine::Config& c, const train::Params<T>& p, const std::vector<int>& tokens,
                    int first, int count, int batch, int seq, const train::LinearPlan* lp) {
  const std::size_t w = static_cast<std::size_t>(seq) + 1;
  train::Params<T> scratch;
  double sum = 0;
  for (int at = 0; at < count; at += batch) {
    const int rows = std::min(batch, count - at);
    const auto begin = tokens.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(first + at) * w);
    const std::vector<int> chunk(begin,
                                 begin + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(rows) * w));
    sum += double(rows) * train::loss_and_gradients(c, p, chunk, rows, seq, scratch, lp);
  }
  return sum / double(count);
}

/// Per transformer block: SQNR in dB of `g` against `ref`, 10·log10(Σ ref² / Σ (g − ref)²) over every
/// tensor of the block (+inf when they are equal; NaN propagates).
template <class T>
std::vector<double> block_sqnr(const train::Params<T>& g, const train::Params<T>& ref) {
  const std::size_t n = ref.layers.size();
  std::vector<double> signal(n, 0.0), noise(n, 0.0);
  std::vector<const T*> refs;
  std::vector<std::size_t> sizes;
  ref.for_each([&refs, &sizes](const std::string&, const auto& t) {
    refs.push_back(t.data());
    sizes.push_back(static_cast<std::size_t>(t.size()));
  });
  std::size_t i = 0;
  g.for_each([&](const std::string& name, const auto& t) {
    const T* r = refs[i];
    const std::size_t size = sizes[i++];
    if (name.rfind("layers/", 0) != 0) return;
    const std::size_t layer = std::stoul(name.substr(7));
    for (std::size_t k = 0; k < size; ++k) {
      const double want = double(r[k]);
      const double d = double(t.data()[k]) - want;
      signal[layer] += want * want;
      noise[layer] += d * d;
    }
  });
  std::vector<double> out(n);
  for (std::size_t l = 0; l < n; ++l) {
    out[l] = noise[l] == 0 && signal[l] == signal[l] ? std::numeric_limits<double>::infinity()
                                                     : 10.0 * std::log10(signal[l] / noise[l]);
  }
  return out;
}

/// Writes every tensor of `p` under `group`, flat, in T.
template <class T>
void write_params(io::H5File& f, const std::string& group, const train::Params<T>& p) {
  p.for_each([&f, &group](const std::string& name, const auto& t) {
    const std::vector<std::size_t> shape{static_cast<std::size_t>(t.size())};
    if constexpr (std::is_same_v<T, float>) {
      f.write_floats(group + "/" + name, shape, t.data());
    } else {
      f.write_doubles(group + "/" + name, shape, t.data());
    }
  });
}

/// Reads every tensor of `p` from `group` (as write_params wrote it); throws naming file and dataset.
template <class T>
void read_params(const io::H5File& f, const std::string& group, train::Params<T>& p) {
  p.for_each([&f, &group](const std::string& name, auto& t) {
    const std::string ds = group + "/" + name;
    const std::vector<double> v = f.read_doubles(ds);
    if (v.size() != static_cast<std::size_t>(t.size())) {
      throw SpecError(f.path().string() + ": " + ds + " has " + std::to_string(v.size()) +
                      " values; the model's tensor has " + std::to_string(t.size()));
    }
    for (std::size_t k = 0; k < v.size(); ++k) t.data()[k] = static_cast<T>(v[k]);
  });
}

/// The log of the run in `out` (its log.h5), for a resumed run; checks it ends at `step`.
std::vector<TrainStep> read_log(const fs::path& file, int steps, int layers,
                                const std::vector<std::string>& count_roles) {
  const io::H5File f = io::H5File::open(file);
  const std::vector<std::int64_t> step = f.read_ints("step");
  const std::vector<double> loss = f.read_doubles("loss"), val = f.read_doubles("val_loss"),
                            norm = f.read_doubles("grad_norm"), lr = f.read_doubles("lr");
  std::vector<double> sqnr;
  if (f.exists("grad_sqnr")) sqnr = f.read_doubles("grad_sqnr");
  const std::size_t n = step.size();
  const auto l = static_cast<std::size_t>(layers);
  // Logs written before loss scaling and range counts have neither (no scaling, counts of 0).
  std::vector<double> loss_scale;
  std::vector<std::int64_t> skipped;
  if (f.exists("loss_scale")) {
    loss_scale = f.read_doubles("loss_scale");
    skipped = f.read_ints("skipped");
  }
  std::vector<std::vector<std::int64_t>> over, under;
  for (const std::string& role : count_roles) {
    const bool has = f.exists("overflow/" + role);
    over.push_back(has ? f.read_ints("overflow/" + role) : std::vector<std::int64_t>(n, 0));
    under.push_back(has ? f.read_ints("underflow/" + role) : std::vector<std::int64_t>(n, 0));
    if (over.back().size() != n || under.back().size() != n) {
      throw SpecError(file.string() + ": overflow/" + role + " and underflow/" + role + " must have " +
                      std::to_string(n) + " rows, as step has");
    }
  }
  if ((!loss_scale.empty() || !skipped.empty()) && (loss_scale.size() != n || skipped.size() != n)) {
    throw SpecError(file.string() + ": loss_scale and skipped must have " + std::to_string(n) +
                    " rows, as step has");
  }
  if (n != static_cast<std::size_t>(steps) || loss.size() != n || val.size() != n || norm.size() != n ||
      lr.size() != n || (!sqnr.empty() && sqnr.size() != n * l)) {
    throw SpecError(file.string() + ": expected " + std::to_string(steps) +
                    " rows in step, loss, val_loss, grad_norm, lr (and grad_sqnr) as state.h5 says");
  }
  std::vector<TrainStep> log(n);
  for (std::size_t i = 0; i < n; ++i) {
    log[i].step = static_cast<int>(step[i]);
    log[i].loss = loss[i];
    log[i].val_loss = val[i];
    log[i].grad_norm = norm[i];
    log[i].lr = lr[i];
    log[i].loss_scale = loss_scale.empty() ? 1.0 : loss_scale[i];
    log[i].skipped = !skipped.empty() && skipped[i] != 0;
    for (std::size_t k = 0; k < count_roles.size(); ++k) {
      log[i].overflow.push_back(static_cast<std::uint64_t>(over[k][i]));
      log[i].underflow.push_back(static_cast<std::uint64_t>(under[k][i]));
    }
    if (!sqnr.empty() && !std::isnan(sqnr[i * l])) {
      log[i].grad_sqnr.assign(sqnr.begin() + static_cast<std::ptrdiff_t>(i * l),
                              sqnr.begin() + static_cast<std::ptrdiff_t>((i + 1) * l));
    }
  }
  return log;
}

template <class T>
void run(experiment::Context& ctx, const TrainRequest& a, engine::Model& model,
         const engine::PrecisionPlan& plan, const std::vector<int>& tokens, TrainResult& r) {
  const engine::Config& c = model.config;
  train::Params<T> p = train::params_from_model<T>(model);
  train::LinearPlan lp(plan, ctx.quantizers(), ctx.gemms(), c);
  for (const engine::Role role : lp.quantised_roles()) r.count_roles.emplace_back(engine::to_string(role));
  train::OptimizerOptions o;
  o.kind = train::parse_optimizer(a.optimizer);
  o.lr = a.lr;
  o.momentum = a.momentum;
  o.weight_decay = a.weight_decay;
  o.clip_norm = a.clip_norm;
  o.warmup_steps = a.warmup;
  o.decay_steps = a.schedule == "cosine" ? std::max(a.steps - a.warmup, 1) : 0;
  train::Optimizer<T> opt(o, p, &plan, &ctx.quantizers(), c.n_layers);
  for (const engine::Role role : opt.quantised_roles()) r.count_roles.emplace_back(engine::to_string(role));
  train::LossScaler scaler(plan.loss_scale);
  const bool scaled = plan.loss_scale.kind != engine::LossScale::Kind::none;
  const fs::path state_file = a.out / "state.h5";
  const char* compute = std::is_same_v<T, float> ? "fp32" : "fp64";
  if (a.resume) {
    const io::H5File f = io::H5File::open(state_file);
    const std::string saved_opt = f.attr_string("/", "optimizer");
    const std::string saved_compute = f.attr_string("/", "compute");
    if (saved_opt != a.optimizer || saved_compute != compute) {
      throw SpecError("train: " + state_file.string() + " holds a " + saved_opt + " run computing in " +
                      saved_compute + "; resume it with the same optimizer and plan compute type (got " +
                      a.optimizer + ", " + compute + ")");
    }
    r.log = read_log(a.out / "log.h5", r.first_step, r.layers, r.count_roles);
    read_params(f, "params", p);
    for (const auto& [name, state] : opt.state()) read_params(f, name, *state);
    // Skipped steps (dynamic loss scaling) do not count; older state files have no optimizer_steps.
    opt.set_steps(f.has_attr("/", "optimizer_steps") ? static_cast<int>(f.attr_int("/", "optimizer_steps"))
                                                     : r.first_step);
    if (scaled) {
      if (!f.has_attr("/", "loss_scale")) {
        throw SpecError("train: " + state_file.string() +
                        " holds a run without loss scaling; resume it with the same plan");
      }
      scaler.restore(static_cast<float>(f.attr_double("/", "loss_scale")),
                     static_cast<int>(f.attr_int("/", "growth_tracker")));
    }
  }
  const std::size_t w = static_cast<std::size_t>(a.seq) + 1;
  const auto train_windows = static_cast<std::size_t>(r.windows - r.val_windows);
  std::vector<int> batch(static_cast<std::size_t>(a.batch) * w);
  train::Params<T> g, ref;
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = r.first_step; s < a.steps; ++s) {
    // Row b of step s is training window (s·batch + b) mod training windows: the stream's windows in order.
    for (int b = 0; b < a.batch; ++b) {
      const auto win =
          (static_cast<std::size_t>(s) * static_cast<std::size_t>(a.batch) + static_cast<std::size_t>(b)) %
          train_windows;
      std::copy_n(tokens.begin() + static_cast<std::ptrdiff_t>(win * w), w,
                  batch.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(b) * w));
    }
    lp.set_step((a.seed << 32U) + static_cast<std::uint64_t>(s));
    TrainStep st;
    st.step = s;
    if (r.val_windows > 0 && s % a.eval_every == 0) {
      lp.set_counting(false);  // the log counts the training pass only
      st.val_loss = windows_loss(c, p, tokens, r.windows - r.val_windows, r.val_windows, a.batch, a.seq, &lp);
      lp.set_counting(true);
    }
    lp.set_loss_scale(scaler.scale());
    st.loss_scale = scaler.scale();
    lp.reset_counts();
    st.loss = train::loss_and_gradients(c, p, batch, a.batch, a.seq, g, &lp);
    for (const train::RangeCounts& n : lp.range_counts()) {
      st.overflow.push_back(n.overflow);
      st.underflow.push_back(n.underflow);
    }
    const bool found_inf = scaled && train::unscale_gradients(g, scaler.scale());
    if (a.sqnr_every > 0 && s % a.sqnr_every == 0) {
      train::loss_and_gradients(c, p, batch, a.batch, a.seq, ref, nullptr);
      st.grad_sqnr = block_sqnr(g, ref);
    }
    st.lr = train::learning_rate(o, s);
    st.skipped = scaler.update(found_inf);
    opt.reset_counts();
    st.grad_norm = st.skipped ? train::global_norm(g) : opt.step(p, g, st.lr);
    for (const train::RangeCounts& n : opt.range_counts()) {  // zero on a skipped step
      st.overflow.push_back(n.overflow);
      st.underflow.push_back(n.underflow);
    }
    r.log.push_back(st);
    if (a.progress) {
      a.progress({r.first_step > 0 ? "train (resumed at step " + std::to_string(r.first_step) + ")" : "train",
                  static_cast<std::size_t>(s + 1 - r.first_step),
                  static_cast<std::size_t>(a.steps - r.first_step),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()});
    }
  }
  train::params_to_model(p, model);
  io::write_h5_atomic(state_file, io::OutputPolicy{true, {}}, false, [&](io::H5File& f) {
    f.set_attr("/", "step", static_cast<std::int64_t>(a.steps));
    f.set_attr("/", "optimizer_steps", static_cast<std::int64_t>(opt.steps()));
    if (scaled) {
      f.set_attr("/", "loss_scale", static_cast<double>(scaler.scale()));
      f.set_attr("/", "growth_tracker", static_cast<std::int64_t>(scaler.growth_tracker()));
    }
    f.set_attr("/", "optimizer", a.optimizer);
    f.set_attr("/", "compute", std::string(compute));
    write_params(f, "params", p);
    for (const auto& [name, state] : opt.state()) write_params(f, name, *state);
  });
}

}  // namespace

TrainResult train(experiment::Context& ctx, const TrainRequest& a) {
  if (a.steps < 1 || a.batch < 1 || a.seq < 1) {
    throw SpecError("train: steps, batch and seq must be >= 1 (got " + std::to_string(a.steps) + ", " +
                    std::to_string(a.batch) + ", " + std::to_string(a.seq) + ")");
  }
  if (a.warmup < 0) throw SpecError("train: warmup = " + std::to_string(a.warmup) + ": expected >= 0");
  if (a.schedule != "cosine" && a.schedule != "constant") {
    throw SpecError("train: schedule '" + a.schedule + "': expected cosine or constant");
  }
  if (!(a.val_fraction >= 0 && a.val_fraction < 1)) {
    throw SpecError("train: val_fraction = " + std::to_string(a.val_fraction) + ": expected >= 0 and < 1");
  }
  if (a.eval_every < 1)
    throw SpecError("train: eval_every = " + std::to_string(a.eval_every) + ": expected >= 1");
  if (a.sqnr_every < 0)
    throw SpecError("train: sqnr_every = " + std::to_string(a.sqnr_every) + ": expected >= 0");
  if (a.out.empty()) throw SpecError("train: give an output folder (out)");
  if (a.texts.empty() == a.tokens.empty())
    throw SpecError("train: give tokens (a .npy) or texts, one of them");
  train::parse_optimizer(a.optimizer);
  engine::Model model = training_model(ctx, a);
  const engine::PrecisionPlan plan = ctx.load_plan(a.plan);
  if (a.seq > model.config.seq_len) {
    throw SpecError("train: seq = " + std::to_string(a.seq) + " exceeds the model's seq_len " +
                    std::to_string(model.config.seq_len));
  }
  const std::vector<int> tokens = training_tokens(a, model);
  TrainResult r;
  r.windows = static_cast<int>(tokens.size() / (static_cast<std::size_t>(a.seq) + 1));
  if (r.windows < 1) {
    throw SpecError("train: " + std::to_string(tokens.size()) +
                    " tokens hold no window of seq + 1 = " + std::to_string(a.seq + 1));
  }
  if (a.val_fraction > 0)
    r.val_windows = std::max(1, static_cast<int>(std::lround(a.val_fraction * r.windows)));
  if (r.val_windows >= r.windows) {
    throw SpecError("train: val_fraction = " + std::to_string(a.val_fraction) + " holds out " +
                    std::to_string(r.val_windows) + " of " + std::to_string(r.windows) +
                    " windows, leaving none to train on");
  }
  r.layers = model.config.n_layers;
  io::check_output_dir(a.out, "log.csv");
  if (a.resume) {
    const fs::path state = a.out / "state.h5";
    if (!fs::exists(state)) {
      throw IoError(state.string() + ": no training state to resume from (lpemu train writes it in --out)");
    }
    r.first_step = static_cast<int>(io::H5File::open(state).attr_int("/", "step"));
    if (r.first_step >= a.steps) {
      throw SpecError("train: " + state.string() + " has " + std::to_string(r.first_step) +
                      " steps already; give steps above that to resume");
    }
  }
  fs::create_directories(a.out);
  const auto t0 = std::chrono::steady_clock::now();
  if (plan.compute == engine::Compute::fp64) {
    run<double>(ctx, a, model, plan, tokens, r);
  } else {
    run<float>(ctx, a, model, plan, tokens, r);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.model = model.config.name;
  r.plan = plan.name;
  r.optimizer = a.optimizer;
  r.batch = a.batch;
  r.seq = a.seq;
  r.model_out = (a.out / "model.h5").string();
  r.log_out = (a.out / "log.csv").string();
  engine::save_model(model, r.model_out);
  r.log_h5 = (a.out / "log.h5").string();
  std::ostringstream csv;
  csv << "step,loss,val_loss,grad_norm,lr,loss_scale,skipped";
  if (a.sqnr_every > 0) {
    for (int l = 0; l < r.layers; ++l) csv << ",grad_sqnr_" << l;
  }
  for (const std::string& role : r.count_roles) csv << ",overflow_" << role << ",underflow_" << role;
  csv << "\n";
  char line[200];
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const TrainStep& s : r.log) {
    std::snprintf(line, sizeof line, "%d,%.17g,%.17g,%.17g,%.17g,%.17g,%d", s.step, s.loss, s.val_loss,
                  s.grad_norm, s.lr, s.loss_scale, s.skipped ? 1 : 0);
    csv << line;
    if (a.sqnr_every > 0) {
      for (int l = 0; l < r.layers; ++l) {
        std::snprintf(line, sizeof line, ",%.17g",
                      s.grad_sqnr.empty() ? nan : s.grad_sqnr[static_cast<std::size_t>(l)]);
        csv << line;
      }
    }
    for (std::size_t k = 0; k < r.count_roles.size(); ++k)
      csv << "," << s.overflow[k] << "," << s.underflow[k];
    csv << "\n";
  }
  io::write_file_atomic(r.log_out, csv.str(), io::OutputPolicy{true, {}});
  io::write_h5_atomic(r.log_h5, io::OutputPolicy{true, {}}, false, [&r, &a, nan](io::H5File& f) {
    const std::size_t n = r.log.size();
    std::vector<std::int64_t> step(n);
    std::vector<double> loss(n), val(n), norm(n), lr(n);
    for (std::size_t i = 0; i < n; ++i) {
      step[i] = r.log[i].step;
      loss[i] = r.log[i].loss;
      val[i] = r.log[i].val_loss;
      norm[i] = r.log[i].grad_norm;
      lr[i] = r.log[i].lr;
    }
    f.write_ints("step", {n}, step.data());
    f.write_doubles("loss", {n}, loss.data());
    f.write_doubles("val_loss", {n}, val.data());
    f.write_doubles("grad_norm", {n}, norm.data());
    f.write_doubles("lr", {n}, lr.data());
    std::vector<double> scale(n);
    std::vector<std::int64_t> skipped(n);
    for (std::size_t i = 0; i < n; ++i) {
      scale[i] = r.log[i].loss_scale;
      skipped[i] = r.log[i].skipped ? 1 : 0;
    }
    f.write_doubles("loss_scale", {n}, scale.data());
    f.write_ints("skipped", {n}, skipped.data());
    for (std::size_t k = 0; k < r.count_roles.size(); ++k) {
      std::vector<std::int64_t> over(n), under(n);
      for (std::size_t i = 0; i < n; ++i) {
        over[i] = static_cast<std::int64_t>(r.log[i].overflow[k]);
        under[i] = static_cast<std::int64_t>(r.log[i].underflow[k]);
      }
      f.write_ints("overflow/" + r.count_roles[k], {n}, over.data());
      f.write_ints("underflow/" + r.count_roles[k], {n}, under.data());
    }
    if (a.sqnr_every > 0) {
      const auto layers = static_cast<std::size_t>(r.layers);
      std::vector<double> sqnr(n * layers, nan);
      for (std::size_t i = 0; i < n; ++i) {
        std::copy(r.log[i].grad_sqnr.begin(), r.log[i].grad_sqnr.end(),
                  sqnr.begin() + static_cast<std::ptrdiff_t>(i * layers));
      }
      f.write_doubles("grad_sqnr", {n, layers}, sqnr.data());
    }
  });
  return r;
}

Fields fields(const TrainResult& r) {
  Fields log = Fields::array();
  for (const TrainStep& s : r.log) {
    Fields row = {{"step", s.step},
                  {"loss", s.loss},
                  {"val_loss", s.val_loss},
                  {"grad_norm", s.grad_norm},
                  {"lr", s.lr}};
    if (!s.grad_sqnr.empty()) row["grad_sqnr"] = s.grad_sqnr;
    row["loss_scale"] = s.loss_scale;
    row["skipped"] = s.skipped;
    Fields over = Fields::object(), under = Fields::object();
    for (std::size_t k = 0; k < r.count_roles.size(); ++k) {
      over[r.count_roles[k]] = s.overflow[k];
      under[r.count_roles[k]] = s.underflow[k];
    }
    row["overflow"] = over;
    row["underflow"] = under;
    log.push_back(row);
  }
  return {{"model", r.model},
          {"plan", r.plan},
          {"optimizer", r.optimizer},
          {"batch", r.batch},
          {"seq", r.seq},
          {"windows", r.windows},
          {"first_step", r.first_step},
          {"val_windows", r.val_windows},
          {"count_roles", r.count_roles},
          {"log", log},
          {"model_out", r.model_out},
          {"log_out", r.log_out},
          {"log_h5", r.log_h5}};
}

TrainRequest train_request(const Fields& f) {
  TrainRequest r;
  FieldReader in(f, "train");
  in.read("model", r.model);
  in.read("plan", r.plan);
  in.read("tokens", r.tokens);
  in.read("texts", r.texts);
  in.read("steps", r.steps);
  in.read("batch", r.batch);
  in.read("seq", r.seq);
  in.read("optimizer", r.optimizer);
  in.read("lr", r.lr);
  in.read("momentum", r.momentum);
  in.read("weight_decay", r.weight_decay);
  in.read("clip_norm", r.clip_norm);
  in.read("warmup", r.warmup);
  in.read("schedule", r.schedule);
  in.read("seed", r.seed);
  in.read("out", r.out);
  in.read("val_fraction", r.val_fraction);
  in.read("eval_every", r.eval_every);
  in.read("sqnr_every", r.sqnr_every);
  in.read("resume", r.resume);
  in.finish();
  return r;
}

}  // namespace lpemu::app
