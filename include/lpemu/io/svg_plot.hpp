// Dependency-free SVG figures for reports: line/scatter plots, bar charts with panels and heat
// maps. Every figure is laid out first (tick values, text boxes, marks, series styles) and then
// drawn from that layout, so tests can check the geometry the SVG is made of: ticks at 1-2-5
// steps or decades, no overlapping text, a distinct (colour, marker, dash) per series, nothing
// outside the canvas. Colours are the Okabe-Ito colour-blind-safe palette (Okabe & Ito, "Color
// Universal Design", 2008) and viridis for heat maps (van der Walt & Smith, matplotlib, 2015).
#pragma once

#include <cstddef>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

namespace lpemu::io {

/// One data series; points that cannot be drawn (non-finite, or ≤ 0 on a log axis) are left
/// out and named in a note under the axes.
struct Series {
  std::string label;
  std::vector<double> x;
  std::vector<double> y;
  bool lines = true;                      ///< join points with lines
  bool markers = true;                    ///< draw a marker at each point
  std::vector<std::string> point_labels;  ///< optional text beside each point (placed without overlap)
};

/// A line or scatter chart: axes, titles and series.
struct Plot {
  std::string title;
  std::string x_label;  ///< axis title with its unit
  std::string y_label;  ///< axis title with its unit
  bool log_x = false;
  bool log_y = false;
  std::vector<Series> series;
  std::vector<std::string> x_tick_labels;  ///< optional: categorical ticks at x = 0, 1, ...
  std::vector<std::string> notes;          ///< lines printed under the axes
};

/// One panel of a bar chart: a value per category on its own axis (NaN: no value, no bar).
struct BarPanel {
  std::string x_label;  ///< axis title with its unit
  std::vector<double> values;
  bool log = false;
};

/// Horizontal bars, one row per category, one or more panels side by side sharing the rows.
struct BarChart {
  std::string title;
  std::vector<std::string> categories;
  std::vector<BarPanel> panels;
  std::vector<std::string> classes;  ///< optional class per category: bar colour and legend entry
  std::vector<std::string> notes;
};

/// A matrix of values drawn as coloured cells (row-major, NaN = not measured).
struct HeatMap {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<std::string> rows;
  std::vector<std::string> cols;
  std::vector<double> values;  ///< rows.size() * cols.size()
  std::string value_label;     ///< colour-bar title with its unit
  bool log = false;            ///< colour by log10 of the value (values ≤ 0 shown as not measured)
  double clip_hi = std::numeric_limits<double>::quiet_NaN();  ///< if set: larger values share the top colour
  std::vector<std::string> notes;
};

/// An axis-aligned rectangle in SVG user units (y grows downwards).
struct Box {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  /// True if the two boxes share interior area.
  bool overlaps(const Box& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
};

/// How a series is drawn: indices into the palette, the marker shapes and the dash patterns.
struct Style {
  int color = 0, marker = 0, dash = 0;
};

/// A laid-out figure: its SVG and the geometry it was drawn from.
struct Figure {
  std::string svg;
  double width = 0, height = 0;
  std::vector<Box> texts;       ///< every text element's estimated extent
  std::vector<Box> marks;       ///< markers, bars, cells, legend samples
  std::vector<double> x_ticks;  ///< tick values on the x (or bar value) axis
  std::vector<double> y_ticks;  ///< tick values on the y (or colour-bar) axis
  bool log_x = false, log_y = false;
  std::vector<Style> styles;  ///< one per series or class, in order
  std::vector<std::string> notes;
};

/// Tick values covering [lo, hi]: multiples of a 1-2-5 step, or on a log axis powers of ten
/// (every 1, 2, 5, ... decades; 1-2-5 within a decade when the range spans less than two).
std::vector<double> nice_ticks(double lo, double hi, bool log);
/// The style of the i-th series: every i below 42 gets a distinct (colour, marker) pair and
/// the dash changes every 7 series.
Style series_style(std::size_t i);
/// Indices of the points no other point beats on both x and y (lower is better on y; on x when
/// `x_lower_better`), sorted by x; points with a non-finite coordinate are left out.
std::vector<std::size_t> pareto_front(const std::vector<double>& x, const std::vector<double>& y,
                                      bool x_lower_better = true);

/// Lays out and draws a line or scatter chart.
Figure layout(const Plot& plot);
/// Lays out and draws a bar chart.
Figure layout(const BarChart& chart);
/// Lays out and draws a heat map.
Figure layout(const HeatMap& map);

/// Text with <, >, & and " escaped for XML and HTML (SVG text, attributes, report.html).
std::string xml_escape(const std::string& s);

/// The chart as an SVG document.
std::string render_svg(const Plot& plot);
/// Writes a figure's SVG to `file`; throws IoError.
void write_svg(const std::filesystem::path& file, const Figure& figure);
/// Writes the chart to `file`; throws IoError.
void write_svg(const std::filesystem::path& file, const Plot& plot);

}  // namespace lpemu::io
