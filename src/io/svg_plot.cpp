#include "lpemu/io/svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace lpemu::io {
namespace {

const char* const kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace

std::string svg_line_plot(const PlotSpec& spec, const std::vector<PlotSeries>& series) {
  const double left = 80, right = 200, top = 40, bottom = 60;
  const double w = spec.width, h = spec.height;
  const double pw = w - left - right, ph = h - top - bottom;
  auto tx = [&](double v) { return spec.log_x ? std::log10(v) : v; };
  auto ty = [&](double v) { return spec.log_y ? std::log10(v) : v; };
  auto ok = [](double v, bool log) { return std::isfinite(v) && (!log || v > 0); };
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : series) {
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!ok(s.x[i], spec.log_x) || !ok(s.y[i], spec.log_y)) continue;
      x0 = std::min(x0, tx(s.x[i]));
      x1 = std::max(x1, tx(s.x[i]));
      y0 = std::min(y0, ty(s.y[i]));
      y1 = std::max(y1, ty(s.y[i]));
    }
  }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (spec.log_y) y0 = std::floor(y0), y1 = std::ceil(y1);
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 + 1;
  auto px = [&](double v) { return left + (tx(v) - x0) / (x1 - x0) * pw; };
  auto py = [&](double v) { return top + ph - (ty(v) - y0) / (y1 - y0) * ph; };

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << w / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << escape(spec.title)
    << "</text>\n"
    << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"black\"/>\n";
  // Ticks: integer powers of ten on log axes, 5 even steps otherwise.
  auto ticks = [](double lo, double hi, bool log) {
    std::vector<double> t;
    if (log) {
      const double step = std::max(1.0, std::ceil((hi - lo) / 8));
      for (double e = std::ceil(lo); e <= hi + 1e-9; e += step) t.push_back(e);
    } else {
      for (int i = 0; i <= 5; ++i) t.push_back(lo + (hi - lo) * i / 5);
    }
    return t;
  };
  for (const double t : ticks(x0, x1, spec.log_x)) {
    const double v = spec.log_x ? std::pow(10.0, t) : t;
    const double x = px(v);
    o << "<line x1=\"" << x << "\" y1=\"" << top + ph << "\" x2=\"" << x << "\" y2=\"" << top
      << "\" stroke=\"#ddd\"/><text x=\"" << x << "\" y=\"" << top + ph + 16 << "\" text-anchor=\"middle\">"
      << num(v) << "</text>\n";
  }
  for (const double t : ticks(y0, y1, spec.log_y)) {
    const double v = spec.log_y ? std::pow(10.0, t) : t;
    const double y = py(v);
    o << "<line x1=\"" << left << "\" y1=\"" << y << "\" x2=\"" << left + pw << "\" y2=\"" << y
      << "\" stroke=\"#ddd\"/><text x=\"" << left - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << num(v)
      << "</text>\n";
  }
  o << "<text x=\"" << left + pw / 2 << "\" y=\"" << h - 18 << "\" text-anchor=\"middle\">" << escape(spec.x_label)
    << "</text>\n<text transform=\"translate(18," << top + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
    << escape(spec.y_label) << "</text>\n";
  for (std::size_t s = 0; s < series.size(); ++s) {
    const char* colour = kColours[s % (sizeof kColours / sizeof kColours[0])];
    o << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\" points=\"";
    for (std::size_t i = 0; i < series[s].x.size() && i < series[s].y.size(); ++i) {
      if (!ok(series[s].x[i], spec.log_x) || !ok(series[s].y[i], spec.log_y)) continue;
      o << px(series[s].x[i]) << "," << py(series[s].y[i]) << " ";
    }
    o << "\"/>\n";
    const double ly = top + 16 + 18 * static_cast<double>(s);
    o << "<line x1=\"" << left + pw + 12 << "\" y1=\"" << ly - 4 << "\" x2=\"" << left + pw + 36 << "\" y2=\""
      << ly - 4 << "\" stroke=\"" << colour << "\" stroke-width=\"2\"/><text x=\"" << left + pw + 42 << "\" y=\""
      << ly << "\">" << escape(series[s].name) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace lpemu::io
