// Loss scaling for training with narrow gradient formats (FP16 mixed precision: Micikevicius et al.,
// "Mixed Precision Training", ICLR 2018). The loss gradient is multiplied by a scale S before the
// backward pass, so that small gradients stay above the format's underflow threshold, and the
// gradients are multiplied by 1/S before the optimizer. Dynamic scaling is PyTorch's
// torch.amp.GradScaler (torch/amp/grad_scaler.py and its update kernel `_amp_update_scale_`):
// a step whose unscaled gradients hold Inf or NaN is skipped and S multiplied by backoff_factor;
// after growth_interval steps in a row without, S is multiplied by growth_factor (kept when the
// product is not finite). S is an FP32 number, as GradScaler keeps it.
#pragma once

#include "lpemu/engine/plan.hpp"
#include "lpemu/train/backward.hpp"

namespace lpemu::train {

/// The loss scale of each step of a run under a plan's LossScale.
class LossScaler {
 public:
  /// A scaler for `s` (kind none: the scale is 1 and no step is skipped).
  explicit LossScaler(const engine::LossScale& s);
  /// The scale of the coming step.
  float scale() const { return scale_; }
  /// Good steps in a row since the scale last changed (GradScaler's growth tracker).
  int growth_tracker() const { return tracker_; }
  /// Sets the scale and growth tracker (a resumed run); throws SpecError for a scale that is not
  /// positive and finite or a tracker outside 0 .. growth_interval − 1.
  void restore(float scale, int growth_tracker);
  /// Updates the scale after a step whose gradients did (`found_inf`) or did not hold Inf/NaN, as
  /// GradScaler.update does; true when that step is to be skipped (dynamic scaling and `found_inf`).
  bool update(bool found_inf);

 private:
  engine::LossScale options_;
  float scale_ = 1;
  int tracker_ = 0;
};

/// Multiplies every gradient by fp32(1 / scale) (GradScaler.unscale_: the reciprocal in double,
/// rounded to FP32); true when some gradient holds Inf or NaN (before or after).
template <class T>
bool unscale_gradients(Params<T>& grads, float scale);

}  // namespace lpemu::train
