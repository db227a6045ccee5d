// `lpemu replay` and `lpemu.call("replay", ...)`: recorded linear-layer inputs fed through a
// precision plan's quantisers and GEMMs, one error row per linear layer.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "lpemu/app/fields.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/experiment/evaluation.hpp"

namespace lpemu::app {

/// What to replay.
struct ReplayRequest {
  std::string model = "stories260K";  ///< the model the activations were recorded from (unused for
                                      ///< model-independent /linear files)
  std::string plan = "fp32";
  std::filesystem::path activations;  ///< recorded activations .h5
};

/// One row per linear layer.
struct ReplayReport {
  std::string model, plan;
  std::vector<experiment::ReplayRow> rows;
};

/// Replays the recorded inputs under the plan; throws lpemu::Error for bad input.
ReplayReport replay(experiment::Context& ctx, const ReplayRequest& request);

/// The report's one serialised form (`lpemu replay --json`).
Fields fields(const ReplayReport& r);

/// A request from named fields (model, plan, activations).
ReplayRequest replay_request(const Fields& f);

}  // namespace lpemu::app
