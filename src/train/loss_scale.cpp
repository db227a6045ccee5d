#include "lpemu/train/loss_scale.hpp"

#include <cmath>
#include <string>

#include "lpemu/error.hpp"

namespace lpemu::train {

using Kind = engine::LossScale::Kind;

LossScaler::LossScaler(const engine::LossScale& s) : options_(s) {
  if (s.kind != Kind::none) scale_ = static_cast<float>(s.init_scale);
}

void LossScaler::restore(float scale, int growth_tracker) {
  if (!(std::isfinite(scale) && scale > 0) || growth_tracker < 0 ||
      (options_.kind == Kind::dynamic && growth_tracker >= options_.growth_interval)) {
    throw SpecError("train: loss scale " + std::to_string(scale) + " with growth tracker " +
                    std::to_string(growth_tracker) +
                    ": expected a positive finite scale and a tracker below " +
                    std::to_string(options_.growth_interval));
  }
  scale_ = scale;
  tracker_ = growth_tracker;
}

bool LossScaler::update(bool found_inf) {
  if (options_.kind != Kind::dynamic) return false;
  // torch's _amp_update_scale_ (aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp): the products
  // in double, stored in the FP32 scale.
  if (found_inf) {
    scale_ = static_cast<float>(static_cast<double>(scale_) * options_.backoff_factor);
    tracker_ = 0;
    return true;
  }
  const int successful = tracker_ + 1;
  if (successful == options_.growth_interval) {
    const auto grown = static_cast<float>(static_cast<double>(scale_) * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    tracker_ = 0;
  } else {
    tracker_ = successful;
  }
  return false;
}

template <class T>
bool unscale_gradients(Params<T>& grads, float scale) {
  const auto inv = static_cast<float>(1.0 / static_cast<double>(scale));
  bool found_inf = false;
  grads.for_each([inv, &found_inf](const std::string&, auto& t) {
    T* d = t.data();
    for (Eigen::Index i = 0; i < t.size(); ++i) {
      d[i] *= static_cast<T>(inv);
      found_inf = found_inf || !std::isfinite(d[i]);
    }
  });
  return found_inf;
}

template bool unscale_gradients<float>(Params<float>&, float);
template bool unscale_gradients<double>(Params<double>&, float);

}  // namespace lpemu::train
