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

/// One variant of `base` (read from `origin`), by the datapath layer's named changes: fused
/// terms (datapath::with_fused_terms), alignment bits (with_alignment_bits; an exact base becomes
/// "truncate"), accumulator format (with_accumulator: its fraction bits and exponent floor go with
/// the old accumulator) and promotion every N products into fp32, RNE (with_promotion; none for 0),
/// renamed and described; its TOML (datapath::to_toml under a comment) and the record read back
/// from it with `formats`. Throws SpecError/UnknownNameError for an invalid variant.
GeneratedDatapath datapath_variant(const datapath::Datapath& base, std::string_view origin,
                                   const DatapathVariant& v, const format::Registry& formats);

/// Every variant of `exp`'s study, built from its base in `datapaths` and parsed back with
/// `formats`; empty without a study. Errors name the experiment's [grid.datapath] table.
std::vector<GeneratedDatapath> study_datapaths(const Experiment& exp,
                                               const datapath::DatapathRegistry& datapaths,
                                               const format::Registry& formats);

}  // namespace lpemu::experiment
