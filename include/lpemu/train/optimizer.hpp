// Optimizers of training: SGD with momentum and AdamW (bias correction, decoupled weight decay), as
// torch.optim defines them, with global-norm gradient clipping and a warm-up then cosine learning
// rate. A plan's master_weights, optimizer_state and weight_update roles quantise the optimizer's
// tensors after each step.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lpemu/engine/plan.hpp"
#include "lpemu/train/backward.hpp"
#include "lpemu/train/range_counts.hpp"

namespace lpemu::train {

/// The update rule.
enum class OptimizerKind { sgd, adamw };
/// The spelling of an optimizer kind ("sgd", "adamw").
std::string_view to_string(OptimizerKind k);
/// The optimizer kind spelled `text`; throws SpecError naming both spellings otherwise.
OptimizerKind parse_optimizer(std::string_view text);

/// Hyper-parameters of the optimizer and its learning-rate schedule.
struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::adamw;
  double lr = 1e-3;           ///< peak learning rate
  double momentum = 0.9;      ///< SGD: torch.optim.SGD momentum (dampening 0, not Nesterov)
  double beta1 = 0.9;         ///< AdamW: first-moment decay
  double beta2 = 0.999;       ///< AdamW: second-moment decay
  double eps = 1e-8;          ///< AdamW: added to √v̂
  double weight_decay = 0.0;  ///< AdamW: decoupled decay, p ← p − lr·wd·p before the update
  double clip_norm = 0.0;     ///< clip the gradients' global L2 norm to this (0: no clipping)
  int warmup_steps = 0;       ///< linear warm-up: lr·(s+1)/warmup for steps s < warmup
  int decay_steps = 0;        ///< cosine decay from the peak to min_lr over these steps (0: constant)
  double min_lr = 0.0;        ///< the cosine's floor
};

/// The learning rate of step `step` (0-based): warm-up, then cosine decay, then min_lr.
double learning_rate(const OptimizerOptions& o, int step);
/// The global L2 norm of every gradient tensor (accumulated in double, in for_each order).
template <class T>
double global_norm(const Params<T>& g);

/// An optimizer with its state, for parameters shaped like those it was made with.
template <class T>
class Optimizer {
 public:
  /// An optimizer for parameters shaped like `like`; `plan` (may be nullptr) gives the formats of
  /// master weights, optimizer state and weight update per tensor (resolved in a model of
  /// `n_layers` blocks), made by `quantizers`.
  Optimizer(const OptimizerOptions& o, const Params<T>& like, const engine::PrecisionPlan* plan = nullptr,
            const engine::QuantizerFactory* quantizers = nullptr, int n_layers = 0);
  ~Optimizer();
  Optimizer(Optimizer&&) noexcept;
  Optimizer& operator=(Optimizer&&) noexcept;

  /// One step at learning rate `lr`: clips `g` (in place) when asked, then updates `p`. Returns the
  /// gradients' global norm before clipping.
  double step(Params<T>& p, Params<T>& g, double lr);
  /// Steps taken.
  int steps() const;
  /// Sets the steps taken, when resuming from saved state (AdamW's bias correction and SGD's first
  /// step depend on it).
  void set_steps(int steps);
  /// The state tensors (SGD: "momentum/NAME"; AdamW: "exp_avg/NAME", "exp_avg_sq/NAME"), for saving.
  std::vector<std::pair<std::string, Params<T>*>> state();
  /// The roles the plan gives this optimizer (master_weights, optimizer_state, weight_update), in
  /// declaration order: the roles range_counts() reports.
  const std::vector<engine::Role>& quantised_roles() const;
  /// Per role of quantised_roles(), the range counts (range_counts.hpp) of every tensor that role
  /// quantised in step() since reset_counts(): each optimizer state tensor (both AdamW moments), update
  /// and master weight once per step.
  std::vector<RangeCounts> range_counts() const;
  /// Zeroes the range counts.
  void reset_counts();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lpemu::train
