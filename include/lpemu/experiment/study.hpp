// Accumulator studies ([grid.datapath] of an experiment): datapath records generated from a base
// record by changing its fused terms, alignment bits, accumulator format or promotion interval.
// Each variant is a real record (TOML text parsed back by lpemu::datapath), so it is emulated by
// the engine and priced by the cost model under the same name.
#pragma once

#include <string>
#include <vector>

#include "lpemu/datapath/datapath.hpp"
#include "lpemu/experiment/experiment.hpp"

namespace lpemu::experiment {

/// A generated datapath record and its TOML text.
struct GeneratedDatapath {
  datapath::Datapath datapath;
  std::string toml;
};

/// The base record's TOML with one variant's fields replaced: block.fused_terms; alignment
/// fraction_bits (an exact base becomes "truncate"); accumulator.format (its fraction_bits and
/// alignment.exponent_floor, which belong to the old accumulator, are dropped); promotion every N
/// products into fp32 (RNE), or none for 0.
std::string datapath_variant_toml(std::string_view base_toml, std::string_view origin,
                                  const DatapathVariant& v);

/// Every variant of `exp`'s study, built from its base in `datapaths` and parsed back with
/// `formats`; empty without a study. Errors name the experiment's [grid.datapath] table.
std::vector<GeneratedDatapath> study_datapaths(const Experiment& exp,
                                               const datapath::DatapathRegistry& datapaths,
                                               const format::Registry& formats);

}  // namespace lpemu::experiment
