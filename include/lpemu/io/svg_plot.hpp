// A tiny dependency-free SVG line plot (error-vs-K plots of datapaths, DESIGN.md "Outputs").
#pragma once

#include <string>
#include <vector>

namespace lpemu::io {

/// One line of a plot: points (x[i], y[i]); non-finite or non-positive values on a log axis are skipped.
struct PlotSeries {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;
};

/// Axes, labels and size of a line plot.
struct PlotSpec {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = true;
  bool log_y = true;
  int width = 720;
  int height = 480;
};

/// The SVG document of a line plot with a legend.
std::string svg_line_plot(const PlotSpec& spec, const std::vector<PlotSeries>& series);

}  // namespace lpemu::io
