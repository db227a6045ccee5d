// `lpemu dot`, `lpemu datapath-error`, `lpemu datapath list|show` and their `lpemu.call` commands
// ("dot", "datapath-error", "datapath list", "datapath show"): bit-exact dot products of a case
// file, error versus K, and the known datapaths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "lpemu/app/fields.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/experiment/datapath_error.hpp"

namespace lpemu::app {

/// A case file to run through a datapath.
struct DotRequest {
  std::string datapath;  ///< datapath name
  std::string cases;     ///< CSV of a, b, c [, scale_a, scale_b, row, expected_result]
  std::string inputs;    ///< override the datapath's input format (a and b)
  std::string out;       ///< also write the results CSV here
  bool force = false;    ///< replace an existing `out`
};

/// One case's result.
struct DotRow {
  std::string a, b, c, scale_a, scale_b;  ///< the case's fields as written
  std::uint64_t d = 0;                    ///< the datapath's result code
  double d_value = 0;                     ///< its value
  std::string exact;                      ///< the exact dot product (25 significant digits)
  std::optional<bool> match;              ///< d == expected_result, when the file has that column
};

/// A case file's results.
struct DotResult {
  std::string datapath, cases, out;
  bool scaled = false;    ///< the file has scale columns
  bool expected = false;  ///< the file has expected_result
  std::vector<DotRow> rows;
  std::size_t mismatches = 0;  ///< rows whose d differs from expected_result
};

/// Runs every case of the file; writes `out` if given. Differences from expected_result are
/// counted, not thrown; bad cases throw SpecError naming file, line and column.
DotResult dot(experiment::Context& ctx, const DotRequest& request);
/// The results CSV (a,b,c[,scale_a,scale_b],d,d_value,exact[,match]), as `lpemu dot` prints it.
std::string dot_csv(const DotResult& r);
/// The result's one serialised form (`lpemu dot --json`).
Fields fields(const DotResult& r);
/// A request from named fields (datapath, cases, inputs, out, force).
DotRequest dot_request(const Fields& f);

/// Datapaths to measure against the exact dot product.
struct DatapathErrorRequest {
  std::vector<std::string> datapath{"h100_e4m3_fp32", "h100_e4m3_fp32_promote128", "ideal"};
  std::vector<std::size_t> k{16, 64, 256, 1024, 4096};  ///< dot-product lengths
  std::string dist = "normal";                          ///< normal | uniform | lognormal
  int trials = 100;                                     ///< random dot products per K
  std::uint64_t seed = 1;
  std::string inputs;  ///< override the input format of every datapath
  std::string out;     ///< directory for datapath_error.csv and datapath_error.svg
};

/// Mean and max relative error per datapath and K, and the files written.
struct DatapathErrorReport {
  experiment::DatapathErrorResult result;
  std::vector<std::filesystem::path> files;
};

/// Runs the experiment; throws SpecError for bad datapaths, distributions or counts.
DatapathErrorReport datapath_error(experiment::Context& ctx, const DatapathErrorRequest& request);
/// The report's one serialised form (`lpemu datapath-error --json`).
Fields fields(const DatapathErrorReport& r);
/// A request from named fields (datapath, k, dist, trials, seed, inputs, out).
DatapathErrorRequest datapath_error_request(const Fields& f);

/// `datapath list` takes no fields.
struct DatapathListRequest {};
/// Every datapath's name and one-line summary.
struct DatapathListResult {
  std::vector<std::pair<std::string, std::string>> datapaths;  ///< (name, summary), by name
};
/// Lists the context's datapaths.
DatapathListResult datapath_list(experiment::Context& ctx, const DatapathListRequest& request);
/// The result's one serialised form (`lpemu datapath list --json`).
Fields fields(const DatapathListResult& r);
/// A request from named fields (none).
DatapathListRequest datapath_list_request(const Fields& f);

/// Which datapath to show.
struct DatapathShowRequest {
  std::string name;
};
/// One datapath's record.
struct DatapathShowResult {
  std::string name, origin, description, source, summary;
  std::vector<std::string> open;  ///< parameters the sources leave open
};
/// Describes one datapath; UnknownNameError naming the closest names.
DatapathShowResult datapath_show(experiment::Context& ctx, const DatapathShowRequest& request);
/// The result's one serialised form (`lpemu datapath show --json`).
Fields fields(const DatapathShowResult& r);
/// A request from named fields (name).
DatapathShowRequest datapath_show_request(const Fields& f);

}  // namespace lpemu::app
