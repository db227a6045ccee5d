// Private pieces shared by sweep.cpp and report.cpp.
#pragma once

#include <string>

#include "lpemu/experiment/sweep.hpp"
#include "lpemu/io/hdf5.hpp"

namespace lpemu::experiment {

/// Writes a plan's result under `prefix` ("" for the file root) of an open HDF5 file.
void write_plan_into(io::H5File& f, const std::string& prefix, const PlanResult& r,
                     const std::string& fingerprint);

}  // namespace lpemu::experiment

namespace lpemu::experiment {

/// Writes results.h5, results.csv, report.md and the plots of `dir` from loaded plan results
/// (in index order).
SweepFiles write_report_files(const std::filesystem::path& dir, const std::string& name,
                              const std::string& model, const std::string& fingerprint,
                              const std::vector<PlanResult>& plans);

}  // namespace lpemu::experiment
