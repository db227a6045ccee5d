// Figures the commands draw from data they already hold (the sweep's figures are built by its
// report). All go through the one plotting module, lpemu/io/svg_plot.hpp.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "lpemu/cost/workload.hpp"
#include "lpemu/experiment/sweep.hpp"
#include "lpemu/io/svg_plot.hpp"

namespace lpemu::experiment {

/// Where the time, DRAM bytes and MAC energy of one phase go, op by op (all instances of an op
/// summed), bars coloured by the op's bound; call after cost::roofline() filled the ops.
io::BarChart cost_breakdown_chart(const cost::Workload& w, const std::string& title);

/// Attribution of one plan as a layer × quantisation-point heat map: each cell the mean KL with
/// only that point quantised, only in that block (rows: blocks, then the LM head).
io::HeatMap layer_attribution_heatmap(const PlanResult& plan);
/// The same attribution as bars: one row per block (and the LM head), one panel per point.
io::BarChart layer_attribution_bars(const PlanResult& plan);

/// Mean relative error of each datapath against K: `err[d][k]` for datapath `names[d]` at
/// `ks[k]`, inputs drawn from distribution `dist`.
io::Plot datapath_error_plot(const std::vector<std::string>& names, const std::vector<std::size_t>& ks,
                             const std::vector<std::vector<double>>& err, const std::string& dist);

}  // namespace lpemu::experiment
