// Hardware targets: dense peak rate per format class, memory bandwidth and capacity, clock and
// units, each number with its source (data/hardware/*.toml).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lpemu::cost {

/// One dense peak rate of a target.
struct Rate {
  double tflops = 0;  ///< dense TFLOP/s (TOP/s for integers), 1 MAC = 2 ops
  std::string source;
  double macs_per_clock_per_unit = 0;  ///< 0 if not published
  std::string macs_source;
  bool unverified = false;
  std::string note;
  std::string derived_from;              ///< proposed targets: how the MAC model derived it
  std::string datapath;                  ///< the datapath record this class runs ("": generic_<class>)
  double achieved_tflops = 0;            ///< best measured dense GEMM rate of this class (0: none published)
  std::string achieved_source;           ///< where that measurement is published
  double attention_forward_tflops = 0;   ///< best measured fused-attention forward rate (0: none published)
  double attention_backward_tflops = 0;  ///< best measured fused-attention backward rate (0: none published)
  std::string attention_source;          ///< where those measurements are published

  friend bool operator==(const Rate&, const Rate&) = default;
};

/// How a proposed target derives from a real one ([derive]): the MAC area of `base`'s
/// `budget_class` (priced as `budget_format` on datapath `datapath`) spent on MACs of each format.
struct TargetDerivation {
  std::string base, budget_class, budget_format, datapath;
  std::map<std::string, std::string> rate_formats;  ///< rate class -> format ([derive.rates.CLASS] format)

  friend bool operator==(const TargetDerivation&, const TargetDerivation&) = default;
};

/// A real or proposed accelerator.
struct Target {
  std::string name, display_name, vendor, kind, source, origin;
  double bandwidth_gb_s = 0;  ///< peak DRAM/HBM bandwidth, 1e9 bytes/s
  std::string bandwidth_source;
  double achieved_bandwidth_gb_s = 0;  ///< measured bandwidth of a streaming kernel (0: none published)
  std::string achieved_bandwidth_source;
  double capacity_gb = 0;  ///< 1e9 bytes
  std::string capacity_source;
  int units = 0;  ///< 0 if not published
  std::string unit_name, units_source;
  double clock_mhz = 0;  ///< 0 if not published
  std::string clock_source;
  bool compute_unverified = false;
  std::string compute_note;
  std::map<std::string, Rate> rates;       ///< by rate class (fp8, bf16, ...)
  std::optional<TargetDerivation> derive;  ///< kind "proposed": what the rates derive from

  /// Every field equal (`origin` included: compare records read from the same place).
  friend bool operator==(const Target&, const Target&) = default;

  /// The rate for `rate_class`, or nullptr if the target lacks it.
  const Rate* find_rate(std::string_view rate_class) const;
  /// Dense peak in op/s for `rate_class`; throws UnknownNameError if absent.
  double peak_ops(std::string_view rate_class) const;
  /// The datapath record that runs `rate_class`: the rate's `datapath`, else "generic_<class>".
  std::string datapath_for(std::string_view rate_class) const;
  /// Fraction of the `rate_class` peak its best measured GEMM reaches (achieved_tflops / tflops;
  /// 1 where no measurement is published or the class is absent).
  double gemm_efficiency(std::string_view rate_class) const;
  /// Fraction of the peak DRAM bandwidth that memory-bound kernels reach (achieved_bandwidth_gb_s /
  /// bandwidth_gb_s; 1 where no measurement is published).
  double memory_efficiency() const;
  /// Fraction of the `rate_class` peak a fused attention kernel reaches in its forward (or, with
  /// `backward`, its backward) pass, from the class's attention_*_tflops; where the direction has no
  /// published measurement, the other direction's, then the class's GEMM efficiency.
  double attention_efficiency(std::string_view rate_class, bool backward) const;
  /// units x MACs/clock/unit x 2 x clock, in TFLOP/s; nullopt if any factor is unpublished.
  std::optional<double> rebuilt_tflops(std::string_view rate_class) const;
};

/// The hardware TOML document of `t`, the exact inverse of Catalog::parse_target_toml: reading it
/// (through a catalog holding the same base targets, formats and datapaths) gives a target equal
/// to `t`. A proposed target is written as its [derive] recipe, a product as its figures;
/// `origin` is not written. Throws SpecError for a proposed target without its derivation.
std::string to_toml(const Target& t);

}  // namespace lpemu::cost
