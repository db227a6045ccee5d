#include "lpemu/io/svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "lpemu/error.hpp"
#include "lpemu/io/output.hpp"

namespace lpemu::io {
namespace {

constexpr double kW = 760;
constexpr double kH = 460;
constexpr double kLeft = 80;
constexpr double kRight = 190;  // legend column
constexpr double kTop = 40;
constexpr double kBottom = 60;
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                               "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string esc(const std::string& s) {
  std::string o;
  for (const char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double map(double v, double a, double b) const {
    const double t = log ? (std::log10(v) - lo) / (hi - lo) : (v - lo) / (hi - lo);
    return a + t * (b - a);
  }
  bool ok(double v) const { return std::isfinite(v) && (!log || v > 0); }
};

Axis make_axis(const std::vector<double>& vals, bool log) {
  Axis a;
  a.log = log;
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (const double v : vals) {
    if (!std::isfinite(v) || (log && v <= 0)) continue;
    const double t = log ? std::log10(v) : v;
    lo = std::min(lo, t);
    hi = std::max(hi, t);
  }
  if (!std::isfinite(lo)) {
    lo = 0;
    hi = 1;
  }
  if (hi - lo < 1e-12) {
    lo -= 0.5;
    hi += 0.5;
  }
  const double pad = (hi - lo) * 0.05;
  a.lo = lo - pad;
  a.hi = hi + pad;
  return a;
}

}  // namespace

std::string render_svg(const Plot& plot) {
  std::vector<double> xs;
  std::vector<double> ys;
  for (const auto& s : plot.series) {
    xs.insert(xs.end(), s.x.begin(), s.x.end());
    ys.insert(ys.end(), s.y.begin(), s.y.end());
  }
  const Axis ax = make_axis(xs, plot.log_x);
  const Axis ay = make_axis(ys, plot.log_y);
  const double x0 = kLeft, x1 = kW - kRight, y0 = kH - kBottom, y1 = kTop;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH << "\" viewBox=\"0 0 " << kW
    << ' ' << kH << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << (x0 + x1) / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << esc(plot.title)
    << "</text>\n";
  // Grid and ticks.
  for (int i = 0; i <= 5; ++i) {
    const double ty = ay.lo + (ay.hi - ay.lo) * i / 5;
    const double py = y0 + (y1 - y0) * i / 5;
    o << "<line x1=\"" << x0 << "\" y1=\"" << py << "\" x2=\"" << x1 << "\" y2=\"" << py
      << "\" stroke=\"#ddd\"/>\n<text x=\"" << x0 - 6 << "\" y=\"" << py + 4 << "\" text-anchor=\"end\">"
      << num(ay.log ? std::pow(10.0, ty) : ty) << "</text>\n";
  }
  if (!plot.x_tick_labels.empty()) {
    for (std::size_t i = 0; i < plot.x_tick_labels.size(); ++i) {
      const double px = ax.map(static_cast<double>(i), x0, x1);
      o << "<text x=\"" << px << "\" y=\"" << y0 + 18 << "\" text-anchor=\"middle\">" << esc(plot.x_tick_labels[i])
        << "</text>\n";
    }
  } else {
    for (int i = 0; i <= 5; ++i) {
      const double tx = ax.lo + (ax.hi - ax.lo) * i / 5;
      const double px = x0 + (x1 - x0) * i / 5;
      o << "<line x1=\"" << px << "\" y1=\"" << y0 << "\" x2=\"" << px << "\" y2=\"" << y1
        << "\" stroke=\"#eee\"/>\n<text x=\"" << px << "\" y=\"" << y0 + 18 << "\" text-anchor=\"middle\">"
        << num(ax.log ? std::pow(10.0, tx) : tx) << "</text>\n";
    }
  }
  o << "<rect x=\"" << x0 << "\" y=\"" << y1 << "\" width=\"" << x1 - x0 << "\" height=\"" << y0 - y1
    << "\" fill=\"none\" stroke=\"black\"/>\n";
  o << "<text x=\"" << (x0 + x1) / 2 << "\" y=\"" << kH - 18 << "\" text-anchor=\"middle\">" << esc(plot.x_label)
    << "</text>\n";
  o << "<text transform=\"translate(18," << (y0 + y1) / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
    << esc(plot.y_label) << "</text>\n";
  // Series and legend.
  for (std::size_t s = 0; s < plot.series.size(); ++s) {
    const auto& se = plot.series[s];
    const char* color = kColors[s % (sizeof kColors / sizeof kColors[0])];
    std::string path;
    for (std::size_t i = 0; i < se.x.size() && i < se.y.size(); ++i) {
      if (!ax.ok(se.x[i]) || !ay.ok(se.y[i])) continue;
      const double px = ax.map(se.x[i], x0, x1);
      const double py = ay.map(se.y[i], y0, y1);
      path += (path.empty() ? "M" : " L") + num(px) + "," + num(py);
      if (se.markers) o << "<circle cx=\"" << px << "\" cy=\"" << py << "\" r=\"3.5\" fill=\"" << color << "\"/>\n";
      if (i < se.point_labels.size()) {
        o << "<text x=\"" << px + 5 << "\" y=\"" << py - 5 << "\" font-size=\"10\">" << esc(se.point_labels[i])
          << "</text>\n";
      }
    }
    if (se.lines && !path.empty()) {
      o << "<path d=\"" << path << "\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.8\"/>\n";
    }
    const double ly = kTop + 14 + 18 * static_cast<double>(s);
    o << "<rect x=\"" << x1 + 14 << "\" y=\"" << ly - 9 << "\" width=\"12\" height=\"12\" fill=\"" << color
      << "\"/>\n<text x=\"" << x1 + 32 << "\" y=\"" << ly + 1 << "\">" << esc(se.label) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

void write_svg(const std::filesystem::path& file, const Plot& plot) {
  write_file_atomic(file, render_svg(plot), OutputPolicy{true, {}});  // the caller owns the folder
}

}  // namespace lpemu::io
