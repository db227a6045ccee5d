// The datapath-error experiment (lpemu datapath-error): random dot products of growing length,
// each datapath's result against the exact one.
#include "lpemu/experiment/datapath_error.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <sstream>

#include <tbb/parallel_for.h>

#include "lpemu/datapath/dot.hpp"
#include "lpemu/datapath/exact.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/figures.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/io/svg_plot.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::experiment {
namespace {

double draw(std::mt19937_64& rng, const std::string& dist) {
  if (dist == "uniform") return std::uniform_real_distribution<double>(-1.0, 1.0)(rng);
  if (dist == "lognormal") {
    const double m = std::lognormal_distribution<double>(0.0, 1.0)(rng);
    return (rng() & 1) != 0 ? -m : m;
  }
  return std::normal_distribution<double>(0.0, 1.0)(rng);
}

// Relative error of `got` against `exact`; a NaN/Inf result of a finite exact value is unbounded.
double relative_error(double got, double exact) {
  if (!std::isfinite(got)) return std::numeric_limits<double>::infinity();
  if (exact == 0.0) return got == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::fabs(got - exact) / std::fabs(exact);
}

void check_config(const DatapathErrorConfig& c) {
  const auto& dists = datapath_error_distributions();
  if (std::find(dists.begin(), dists.end(), c.dist) == dists.end()) {
    throw SpecError("datapath-error: dist '" + c.dist + "': expected normal, uniform or lognormal");
  }
  if (c.trials < 1 || c.trials > kMaxDatapathErrorTrials) {
    throw SpecError("datapath-error: trials = " + std::to_string(c.trials) + ": expected an integer in 1.." +
                    std::to_string(kMaxDatapathErrorTrials));
  }
  if (c.ks.empty()) throw SpecError("datapath-error: k is empty: expected at least one dot-product length");
  double sum_k = 0;
  for (const std::size_t k : c.ks) {
    if (k < 1 || k > kMaxDatapathErrorK) {
      throw SpecError("datapath-error: k = " + std::to_string(k) + ": expected an integer in 1.." +
                      std::to_string(kMaxDatapathErrorK));
    }
    sum_k += static_cast<double>(k);
  }
  if (sum_k * c.trials > kMaxDatapathErrorWork) {
    throw SpecError("datapath-error: trials x sum of k = " + std::to_string(c.trials) + " x " +
                    io::format_number(sum_k, io::NumberStyle::shortest) + ": expected at most 2^28 (" +
                    io::format_number(kMaxDatapathErrorWork, io::NumberStyle::shortest) +
                    ") products per datapath; use fewer trials or shorter k");
  }
  for (const auto& dp : c.datapaths) {
    if (dp.scale_application != datapath::ScaleApplication::none) {
      throw SpecError("datapath '" + dp.name +
                      "' is block-scaled: datapath-error does not draw block scales yet");
    }
  }
}

}  // namespace

const std::vector<std::string>& datapath_error_distributions() {
  static const std::vector<std::string> names{"normal", "uniform", "lognormal"};
  return names;
}

DatapathErrorResult datapath_error(const DatapathErrorConfig& config) {
  check_config(config);
  const auto& dps = config.datapaths;
  const auto& ks = config.ks;
  const int trials = config.trials;
  DatapathErrorResult r{config, std::vector<std::vector<double>>(dps.size(), std::vector<double>(ks.size())),
                        std::vector<std::vector<double>>(dps.size(), std::vector<double>(ks.size()))};
  for (std::size_t ki = 0; ki < ks.size(); ++ki) {
    const std::size_t k = ks[ki];
    std::vector<std::vector<double>> err(dps.size(), std::vector<double>(static_cast<std::size_t>(trials)));
    std::vector<std::vector<double>> exact(dps.size(), std::vector<double>(static_cast<std::size_t>(trials)));
    tbb::parallel_for(0, trials, [&](int t) {
      // Each trial's stream depends only on (seed, K, trial): thread count cannot change results.
      std::mt19937_64 rng(config.seed * 0x9E3779B97F4A7C15ULL + k * 1000003ULL +
                          static_cast<std::uint64_t>(t));
      std::vector<double> x(k), y(k);
      for (std::size_t i = 0; i < k; ++i) x[i] = draw(rng, config.dist), y[i] = draw(rng, config.dist);
      for (std::size_t d = 0; d < dps.size(); ++d) {
        std::vector<std::uint64_t> a(k), b(k);
        for (std::size_t i = 0; i < k; ++i) {
          a[i] = format::encode(dps[d].a, x[i]);
          b[i] = format::encode(dps[d].b, y[i]);
        }
        const std::uint64_t c0 = 0;
        const double got = format::decode(dps[d].output(),
                                          datapath::dot(dps[d], a, b, c0, {}, static_cast<std::uint64_t>(t)));
        const double ex = datapath::exact_dot(dps[d], a, b, c0).to_double();
        exact[d][static_cast<std::size_t>(t)] = ex;
        err[d][static_cast<std::size_t>(t)] = relative_error(got, ex);
      }
    });
    for (std::size_t d = 0; d < dps.size(); ++d) {
      for (int t = 0; t < trials; ++t) {
        if (std::isnan(exact[d][static_cast<std::size_t>(t)])) {
          const bool unsigned_in = !dps[d].a.is_signed || !dps[d].b.is_signed;
          throw SpecError("datapath-error: datapath '" + dps[d].name + "' inputs '" + dps[d].a.name +
                          "' x '" + dps[d].b.name + "', K = " + std::to_string(k) + ", trial " +
                          std::to_string(t) + ": the exact dot product of the encoded draws is NaN (" +
                          (unsigned_in ? "an unsigned input format encodes negative draws as NaN"
                                       : "an input format encodes a draw as NaN") +
                          "); expected input formats that represent every " + config.dist + " draw");
        }
      }
      double s = 0, m = 0;
      for (const double e : err[d]) s += e, m = std::max(m, e);
      r.mean[d][ki] = s / trials;
      r.max[d][ki] = m;
    }
  }
  return r;
}

std::string datapath_error_table(const DatapathErrorResult& r) {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf, "relative error |d - exact| / |exact|, %s inputs, %d trials, mean (max)\n",
                r.config.dist.c_str(), r.config.trials);
  out += buf;
  std::snprintf(buf, sizeof buf, "%-8s", "K");
  out += buf;
  for (const auto& dp : r.config.datapaths) {
    std::snprintf(buf, sizeof buf, "  %-28s", dp.name.c_str());
    out += buf;
  }
  out += "\n";
  for (std::size_t ki = 0; ki < r.config.ks.size(); ++ki) {
    std::snprintf(buf, sizeof buf, "%-8zu", r.config.ks[ki]);
    out += buf;
    for (std::size_t d = 0; d < r.config.datapaths.size(); ++d) {
      char cell[64];
      std::snprintf(cell, sizeof cell, "%.3e (%.2e)", r.mean[d][ki], r.max[d][ki]);
      std::snprintf(buf, sizeof buf, "  %-28s", cell);
      out += buf;
    }
    out += "\n";
  }
  return out;
}

void write_datapath_error_csv(std::ostream& out, const DatapathErrorResult& r) {
  out << "datapath,k,dist,trials,mean_rel_error,max_rel_error\n";
  for (std::size_t d = 0; d < r.config.datapaths.size(); ++d) {
    for (std::size_t ki = 0; ki < r.config.ks.size(); ++ki) {
      char line[256];
      std::snprintf(line, sizeof line, "%s,%zu,%s,%d,%.17g,%.17g\n", r.config.datapaths[d].name.c_str(),
                    r.config.ks[ki], r.config.dist.c_str(), r.config.trials, r.mean[d][ki], r.max[d][ki]);
      out << line;
    }
  }
}

std::vector<std::filesystem::path> write_datapath_error_files(const std::filesystem::path& dir,
                                                              const DatapathErrorResult& r) {
  io::create_output_dir(dir);
  const std::filesystem::path csv = dir / "datapath_error.csv";
  const std::filesystem::path svg = dir / "datapath_error.svg";
  io::AtomicFile o(csv.string(), io::OutputPolicy{true, {}});  // the folder is the caller's own
  write_datapath_error_csv(o.stream(), r);
  std::vector<std::string> names;
  for (const auto& dp : r.config.datapaths) names.push_back(dp.name);
  io::write_svg(svg.string(), datapath_error_plot(names, r.config.ks, r.mean, r.config.dist));
  o.commit();
  return {csv, svg};
}

}  // namespace lpemu::experiment
