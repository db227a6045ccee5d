#include "lpemu/train/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numbers>
#include <vector>

#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"

namespace lpemu::train {
namespace {

constexpr lpemu::detail::EnumName<OptimizerKind> kOptimizerNames[] = {{"sgd", OptimizerKind::sgd},
                                                                      {"adamw", OptimizerKind::adamw}};

// Where a parameter sits, for per-layer plan entries: "layers/L/<attention or mlp tensor>" or the head.
void place_of(const std::string& name, int& layer, engine::LayerKind& kind) {
  layer = -1;
  kind = engine::LayerKind::head;
  if (!name.starts_with("layers/")) return;
  const auto slash = name.find('/', 7);
  layer = std::stoi(name.substr(7, slash - 7));
  const std::string t = name.substr(slash + 1);
  const bool mlp =
      t.starts_with("ffn_norm") || t == "w1" || t == "w2" || t == "w3" || t == "b1" || t == "b2" || t == "b3";
  kind = mlp ? engine::LayerKind::mlp : engine::LayerKind::attention;
}

// A tensor of a Params as flat row-major storage [rows, cols] (a vector as one row).
template <class T>
struct Flat {
  T* data;
  Eigen::Index rows, cols;
};

template <class T>
std::vector<Flat<T>> flat(Params<T>& p) {
  std::vector<Flat<T>> out;
  p.for_each([&](const std::string&, auto& t) {
    using M = std::remove_reference_t<decltype(t)>;
    if constexpr (M::ColsAtCompileTime == 1) {
      out.push_back({t.data(), 1, t.size()});
    } else {
      out.push_back({t.data(), t.rows(), t.cols()});
    }
  });
  return out;
}

// Quantises a flat tensor in place (rows as GEMM operands hold them: scales along each row) as role
// `role`, adding the range counts to `counts`.
template <class T>
void quantize_flat(const engine::Quantizer& q, engine::Role role, const Flat<T>& f, RoleCounts& counts) {
  Eigen::Map<Mat<T>> view(f.data, f.rows, f.cols);
  Mat<T> m = view;
  engine::QuantPoint p;
  p.role = role;
  p.tensor = engine::to_string(role);
  RangeCounts c;
  apply_counted(q, p, m, c);
  view = m;
  const std::lock_guard<std::mutex> lock(counts.mutex);
  counts.by_role[static_cast<std::size_t>(role)] += c;
}

constexpr engine::Role kOptimizerRoles[] = {engine::Role::master_weights, engine::Role::optimizer_state,
                                            engine::Role::weight_update};

}  // namespace

std::string_view to_string(OptimizerKind k) { return lpemu::detail::enum_name(kOptimizerNames, k); }

OptimizerKind parse_optimizer(std::string_view text) {
  if (const auto k = lpemu::detail::enum_value(kOptimizerNames, text)) return *k;
  throw SpecError("optimizer '" + std::string(text) + "': expected sgd or adamw");
}

double learning_rate(const OptimizerOptions& o, int step) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / o.warmup_steps;
  if (o.decay_steps <= 0) return o.lr;
  const double progress = std::min(1.0, static_cast<double>(step - o.warmup_steps) / o.decay_steps);
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

template <class T>
double global_norm(const Params<T>& g) {
  double ss = 0;
  g.for_each([&](const std::string&, const auto& t) {
    for (Eigen::Index i = 0; i < t.size(); ++i)
      ss += static_cast<double>(t.data()[i]) * static_cast<double>(t.data()[i]);
  });
  return std::sqrt(ss);
}

template <class T>
struct Optimizer<T>::Impl {
  OptimizerOptions o;
  int t = 0;
  Params<T> m, v;  // SGD: m is the momentum buffer; AdamW: first and second moments
  // Per tensor (for_each order): quantisers of master weights, state and update (nullptr: none).
  struct Formats {
    std::shared_ptr<const engine::Quantizer> master, state, update;
  };
  std::vector<Formats> formats;
  std::vector<engine::Role> roles;  // the roles some tensor's formats quantise, in declaration order
  RoleCounts counts;
};

template <class T>
Optimizer<T>::Optimizer(const OptimizerOptions& o, const Params<T>& like, const engine::PrecisionPlan* plan,
                        const engine::QuantizerFactory* quantizers, int n_layers)
    : impl_(std::make_unique<Impl>()) {
  if (!(o.lr >= 0) || !(o.momentum >= 0) || !(o.beta1 >= 0 && o.beta1 < 1) ||
      !(o.beta2 >= 0 && o.beta2 < 1) || !(o.eps > 0) || !(o.weight_decay >= 0) || !(o.clip_norm >= 0) ||
      o.warmup_steps < 0 || o.decay_steps < 0) {
    throw SpecError(
        "optimizer: expected lr, momentum, weight_decay, clip_norm >= 0, beta1 and beta2 in [0, 1), eps > 0 "
        "and warm-up and decay steps >= 0");
  }
  impl_->o = o;
  impl_->m = zeros_like(like);
  if (o.kind == OptimizerKind::adamw) impl_->v = zeros_like(like);
  like.for_each([&](const std::string& name, const auto&) {
    typename Impl::Formats f;
    if (plan != nullptr && quantizers != nullptr) {
      int layer = -1;
      engine::LayerKind kind{};
      place_of(name, layer, kind);
      const auto make = [&](engine::Role r) -> std::shared_ptr<const engine::Quantizer> {
        const auto spec = plan->resolve(r, layer, kind, n_layers);
        if (!spec) return nullptr;
        return std::shared_ptr<const engine::Quantizer>(quantizers->make(*spec));
      };
      f.master = make(engine::Role::master_weights);
      f.state = make(engine::Role::optimizer_state);
      f.update = make(engine::Role::weight_update);
    }
    impl_->formats.push_back(std::move(f));
  });
  for (const engine::Role r : kOptimizerRoles) {
    const bool used =
        std::any_of(impl_->formats.begin(), impl_->formats.end(), [r](const typename Impl::Formats& f) {
          return (r == engine::Role::master_weights    ? f.master
                  : r == engine::Role::optimizer_state ? f.state
                                                       : f.update) != nullptr;
        });
    if (used) impl_->roles.push_back(r);
  }
}

template <class T>
const std::vector<engine::Role>& Optimizer<T>::quantised_roles() const {
  return impl_->roles;
}

template <class T>
std::vector<RangeCounts> Optimizer<T>::range_counts() const {
  const std::lock_guard<std::mutex> lock(impl_->counts.mutex);
  std::vector<RangeCounts> out;
  for (const engine::Role r : impl_->roles) out.push_back(impl_->counts.by_role[static_cast<std::size_t>(r)]);
  return out;
}

template <class T>
void Optimizer<T>::reset_counts() {
  const std::lock_guard<std::mutex> lock(impl_->counts.mutex);
  impl_->counts.by_role.fill(RangeCounts{});
}

template <class T>
Optimizer<T>::~Optimizer() = default;
template <class T>
Optimizer<T>::Optimizer(Optimizer&&) noexcept = default;
template <class T>
Optimizer<T>& Optimizer<T>::operator=(Optimizer&&) noexcept = default;

template <class T>
int Optimizer<T>::steps() const {
  return impl_->t;
}

template <class T>
void Optimizer<T>::set_steps(int steps) {
  impl_->t = steps;
}

template <class T>
std::vector<std::pair<std::string, Params<T>*>> Optimizer<T>::state() {
  if (impl_->o.kind == OptimizerKind::sgd) return {{"momentum", &impl_->m}};
  return {{"exp_avg", &impl_->m}, {"exp_avg_sq", &impl_->v}};
}

template <class T>
double Optimizer<T>::step(Params<T>& p, Params<T>& g, double lr) {
  Impl& s = *impl_;
  const OptimizerOptions& o = s.o;
  const double norm = global_norm(g);
  if (o.clip_norm > 0 && norm > o.clip_norm) {
    // torch.nn.utils.clip_grad_norm_: g ← g · max_norm / (norm + 1e-6).
    const T f = static_cast<T>(o.clip_norm / (norm + 1e-6));
    g.for_each([&](const std::string&, auto& t) { t *= f; });
  }
  ++s.t;
  const auto pf = flat(p);
  const auto gf = flat(g);
  const auto mf = flat(s.m);
  const auto vf = o.kind == OptimizerKind::adamw ? flat(s.v) : std::vector<Flat<T>>{};
  const T lr_t = static_cast<T>(lr);
  // torch.optim.AdamW: bias corrections 1 − β^t; step size lr / bc1; denominator √v / √bc2 + eps.
  const T step_size = static_cast<T>(lr / (1.0 - std::pow(o.beta1, s.t)));
  const T bc2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(o.beta2, s.t)));
  const T decay = static_cast<T>(1.0 - lr * o.weight_decay);
  std::vector<T> update;
  for (std::size_t i = 0; i < pf.size(); ++i) {
    const auto& f = s.formats[i];
    const Eigen::Index n = pf[i].rows * pf[i].cols;
    T* w = pf[i].data;
    const T* gi = gf[i].data;
    T* mi = mf[i].data;
    update.assign(static_cast<std::size_t>(n), T{0});
    if (o.kind == OptimizerKind::sgd) {
      // torch.optim.SGD (dampening 0): b ← μ b + g, b = g at the first step; p ← p − lr b.
      for (Eigen::Index j = 0; j < n; ++j)
        mi[j] = s.t == 1 ? gi[j] : static_cast<T>(o.momentum) * mi[j] + gi[j];
      if (f.state) quantize_flat(*f.state, engine::Role::optimizer_state, mf[i], s.counts);
      for (Eigen::Index j = 0; j < n; ++j) update[static_cast<std::size_t>(j)] = -lr_t * mi[j];
    } else {
      // Decoupled weight decay first (p ← p (1 − lr wd)), then m ← β1 m + (1 − β1) g,
      // v ← β2 v + (1 − β2) g², p ← p − (lr / bc1) m / (√v / √bc2 + eps).
      T* vi = vf[i].data;
      if (o.weight_decay != 0) {
        for (Eigen::Index j = 0; j < n; ++j) w[j] *= decay;
      }
      for (Eigen::Index j = 0; j < n; ++j) {
        mi[j] = static_cast<T>(o.beta1) * mi[j] + static_cast<T>(1 - o.beta1) * gi[j];
        vi[j] = static_cast<T>(o.beta2) * vi[j] + static_cast<T>(1 - o.beta2) * gi[j] * gi[j];
      }
      if (f.state) {
        quantize_flat(*f.state, engine::Role::optimizer_state, mf[i], s.counts);
        quantize_flat(*f.state, engine::Role::optimizer_state, vf[i], s.counts);
      }
      for (Eigen::Index j = 0; j < n; ++j) {
        update[static_cast<std::size_t>(j)] =
            -step_size * mi[j] / (std::sqrt(vi[j]) / bc2_sqrt + static_cast<T>(o.eps));
      }
    }
    if (f.update) {
      quantize_flat(*f.update, engine::Role::weight_update, Flat<T>{update.data(), pf[i].rows, pf[i].cols},
                    s.counts);
    }
    for (Eigen::Index j = 0; j < n; ++j) w[j] += update[static_cast<std::size_t>(j)];
    if (f.master) quantize_flat(*f.master, engine::Role::master_weights, pf[i], s.counts);
  }
  return norm;
}

#define LPEMU_TRAIN_OPTIMIZER(T)                    \
  template double global_norm<T>(const Params<T>&); \
  template class Optimizer<T>;
LPEMU_TRAIN_OPTIMIZER(float)
LPEMU_TRAIN_OPTIMIZER(double)
#undef LPEMU_TRAIN_OPTIMIZER

}  // namespace lpemu::train
