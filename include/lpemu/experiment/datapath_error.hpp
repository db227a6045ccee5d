// The datapath-error experiment: relative error of dot-product datapaths against the exact dot
// product, as a function of the length K, over random inputs. Results depend only on the
// configuration (seed, K, trial), never on the thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "lpemu/datapath/datapath.hpp"

namespace lpemu::experiment {

// Limits of one datapath-error run (it holds 2 K doubles and codes per trial and thread, and its
// time grows with trials x ΣK x datapaths): K <= 2^20, trials <= 10^6, trials x ΣK <= 2^28.
/// The longest dot product.
inline constexpr std::size_t kMaxDatapathErrorK = std::size_t{1} << 20;
/// The most trials per K.
inline constexpr int kMaxDatapathErrorTrials = 1000000;
/// Products per datapath of one run: trials x ΣK.
inline constexpr double kMaxDatapathErrorWork = 268435456.0;

/// What datapath_error() measures.
struct DatapathErrorConfig {
  std::vector<datapath::Datapath> datapaths;             ///< unscaled datapaths (inputs already chosen)
  std::vector<std::size_t> ks{16, 64, 256, 1024, 4096};  ///< dot-product lengths
  std::string dist = "normal";                           ///< input distribution: normal | uniform | lognormal
  int trials = 100;                                      ///< random dot products per K
  std::uint64_t seed = 1;                                ///< random seed
};

/// Relative error |d − exact| / |exact| per (datapath, K): a trial whose datapath result is NaN or
/// Inf while the exact result is finite counts as infinite error.
struct DatapathErrorResult {
  DatapathErrorConfig config;
  std::vector<std::vector<double>> mean;  ///< mean[d][k]: mean relative error
  std::vector<std::vector<double>> max;   ///< max[d][k]: largest relative error
};

/// Names of the input distributions datapath_error() draws from.
const std::vector<std::string>& datapath_error_distributions();

/// Runs the experiment; throws SpecError for a block-scaled datapath, an unknown distribution, a
/// non-positive trial count, or inputs the datapath's input formats cannot represent (NaN codes).
DatapathErrorResult datapath_error(const DatapathErrorConfig& config);

/// The results as a text table (mean and, in parentheses, max per datapath and K).
std::string datapath_error_table(const DatapathErrorResult& r);

/// Writes the CSV (datapath,k,dist,trials,mean_rel_error,max_rel_error) to `out`.
void write_datapath_error_csv(std::ostream& out, const DatapathErrorResult& r);

/// Writes datapath_error.csv and datapath_error.svg into `dir` (created if missing); returns both paths.
std::vector<std::filesystem::path> write_datapath_error_files(const std::filesystem::path& dir,
                                                              const DatapathErrorResult& r);

}  // namespace lpemu::experiment
