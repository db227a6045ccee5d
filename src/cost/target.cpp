#include "lpemu/cost/target.hpp"

#include "lpemu/error.hpp"

namespace lpemu::cost {

const Rate* Target::find_rate(std::string_view rate_class) const {
  const auto it = rates.find(std::string(rate_class));
  return it == rates.end() ? nullptr : &it->second;
}

double Target::peak_ops(std::string_view rate_class) const {
  const Rate* r = find_rate(rate_class);
  if (r == nullptr) {
    std::string have;
    for (const auto& [k, v] : rates) have += (have.empty() ? "" : ", ") + k;
    throw UnknownNameError("target '" + name + "' has no published " + std::string(rate_class) +
                           " rate (it has: " + have + ")");
  }
  return r->tflops * 1e12;
}

std::string Target::datapath_for(std::string_view rate_class) const {
  const Rate* r = find_rate(rate_class);
  return r != nullptr && !r->datapath.empty() ? r->datapath : "generic_" + std::string(rate_class);
}

double Target::gemm_efficiency(std::string_view rate_class) const {
  const Rate* r = find_rate(rate_class);
  return r != nullptr && r->achieved_tflops > 0 ? r->achieved_tflops / r->tflops : 1.0;
}

double Target::memory_efficiency() const {
  return achieved_bandwidth_gb_s > 0 ? achieved_bandwidth_gb_s / bandwidth_gb_s : 1.0;
}

double Target::attention_efficiency(std::string_view rate_class, bool backward) const {
  const Rate* r = find_rate(rate_class);
  if (r == nullptr) return 1.0;
  const double mine = backward ? r->attention_backward_tflops : r->attention_forward_tflops;
  const double other = backward ? r->attention_forward_tflops : r->attention_backward_tflops;
  if (mine > 0) return mine / r->tflops;
  if (other > 0) return other / r->tflops;
  return gemm_efficiency(rate_class);
}

std::optional<double> Target::rebuilt_tflops(std::string_view rate_class) const {
  const Rate* r = find_rate(rate_class);
  if (r == nullptr || units == 0 || clock_mhz == 0 || r->macs_per_clock_per_unit == 0) return std::nullopt;
  // peak = units x MACs/clock/unit x 2 ops/MAC x clock
  return units * r->macs_per_clock_per_unit * 2.0 * clock_mhz * 1e6 / 1e12;
}

}  // namespace lpemu::cost
