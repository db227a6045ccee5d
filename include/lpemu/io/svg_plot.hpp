// Dependency-free SVG charts (line and scatter plots) for reports.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace lpemu::io {

/// One data series; non-finite points are skipped.
struct Series {
  std::string label;
  std::vector<double> x;
  std::vector<double> y;
  bool lines = true;                     ///< join points with lines
  bool markers = true;                   ///< draw a marker at each point
  std::vector<std::string> point_labels;  ///< optional text beside each point
};

/// A chart: axes, titles and series.
struct Plot {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = false;
  bool log_y = false;
  std::vector<Series> series;
  std::vector<std::string> x_tick_labels;  ///< optional: categorical ticks at x = 0, 1, ...
};

/// The chart as an SVG document.
std::string render_svg(const Plot& plot);
/// Writes the chart to `file`; throws IoError.
void write_svg(const std::filesystem::path& file, const Plot& plot);

}  // namespace lpemu::io
