// Private pieces of the sweep report shared by report.cpp, report_figures.cpp, report_md.cpp and
// report_html.cpp: the ranking, the table columns and the figures.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "lpemu/experiment/sweep.hpp"
#include "lpemu/io/svg_plot.hpp"

namespace lpemu::experiment::report {

/// `v` with `digits` significant digits; "nan", "inf" and "-inf" for non-finite values.
std::string num(double v, int digits = 6);

/// Plan indices ordered by mean KL (best first), ties in plan order.
std::vector<std::size_t> ranked(const std::vector<PlanResult>& plans);

/// True if any plan was priced by the cost model.
bool has_cost(const std::vector<PlanResult>& plans);

/// Plans on the Pareto front of mean KL against MAC area (the front the table marks).
std::vector<std::size_t> area_front(const std::vector<PlanResult>& plans);

/// One column of the ranked table, shared by report.md and report.html.
struct Column {
  std::string header;
  bool numeric = true;  ///< right-aligned, sorted as a number in the HTML table
  /// The cell of plan `p` ranked `rank` (1-based); `on_front` says if it is on the Pareto front.
  std::function<std::string(const PlanResult& p, std::size_t rank, bool on_front)> cell;
  /// The sort key of a numeric cell (NaN sorts last).
  std::function<double(const PlanResult& p, std::size_t rank)> key;
};

/// The ranked table's columns for these plans (cost columns only when priced).
std::vector<Column> ranked_columns(const std::vector<PlanResult>& plans);

/// "layers/3/residual_input" -> "in 3"; "final_residual" -> "final".
std::string short_residual_name(const std::string& residual_name);

/// A figure of the report, the file it is written to and how to read it.
struct NamedFigure {
  std::string file;     ///< e.g. "kl_vs_bits.svg"
  std::string caption;  ///< one sentence: what it shows
  std::string how_to_read;
  io::Figure figure;
  std::string group;  ///< "": a main figure; else the per-plan section it belongs to (e.g. "per-op cost")
};

/// Every figure of a sweep report, in the order the report shows them.
std::vector<NamedFigure> sweep_figures(const std::vector<PlanResult>& plans);

/// Writes report.md (the ranked table, cost, residual, attribution and replay tables, figures) to `file`.
void write_markdown(const std::filesystem::path& file, const std::string& name, const std::string& model,
                    const std::string& fingerprint, const std::vector<PlanResult>& plans,
                    const std::vector<NamedFigure>& figures);

/// Writes report.html (self-contained: inline CSS, SVG and script) to `file`.
void write_html(const std::filesystem::path& file, const std::string& name, const std::string& model,
                const std::string& fingerprint, const std::vector<PlanResult>& plans,
                const std::vector<NamedFigure>& figures);

}  // namespace lpemu::experiment::report
