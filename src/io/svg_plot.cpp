#include "lpemu/io/svg_plot.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>

#include "lpemu/error.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::io {
namespace {

constexpr double kFont = 12;       // body text size
constexpr double kTitleFont = 14;  // figure title size
constexpr double kSmallFont = 10;  // point labels, cell values
constexpr double kPlotW = 560;     // plot area of a chart
constexpr double kPlotH = 340;
constexpr double kPad = 12;

// Okabe & Ito (2008) colour-blind-safe palette, yellow left out (unreadable on white).
constexpr std::array<const char*, 7> kColors = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                "#E69F00", "#56B4E9", "#000000"};
constexpr int kMarkers = 6;  // circle, square, triangle up, diamond, triangle down, plus
constexpr std::array<const char*, 4> kDashes = {"", "7 3", "2 2.5", "8 3 2 3"};
// viridis at 9 evenly spaced stops (matplotlib's _cm_listed.py table).
constexpr std::array<std::array<double, 3>, 9> kViridis = {{{0.267, 0.005, 0.329},
                                                            {0.278, 0.175, 0.483},
                                                            {0.230, 0.322, 0.546},
                                                            {0.173, 0.449, 0.558},
                                                            {0.128, 0.567, 0.551},
                                                            {0.153, 0.683, 0.502},
                                                            {0.360, 0.785, 0.388},
                                                            {0.678, 0.864, 0.190},
                                                            {0.993, 0.906, 0.144}}};

std::string fmt(double v) { return format_number(v, NumberStyle::trimmed, 2); }

std::size_t glyphs(const std::string& s) {
  std::size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Estimated advance of DejaVu Sans / Helvetica-like fonts: 0.62 em per glyph is an upper bound
// for digits and lower-case text.
double text_width(const std::string& s, double size) { return 0.62 * size * static_cast<double>(glyphs(s)); }

std::string superscript(int k) {
  static const char* const kSup[] = {"⁰", "¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹"};
  std::string o = k < 0 ? "⁻" : "";
  const std::string digits = std::to_string(k < 0 ? -k : k);
  for (const char c : digits) o += kSup[c - '0'];
  return o;
}

// A 1-2-5 step at least `raw`.
double nice_step(double raw) {
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw * (1 - 1e-9)) return m * p;
  }
  return 10 * p;
}

// Label of a tick value on an axis whose ticks are `ticks`.
std::string tick_label(double v, const std::vector<double>& ticks, bool log) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  double amax = 0;
  for (const double t : ticks) amax = std::max(amax, std::fabs(t));
  double amin = amax;
  for (const double t : ticks) {
    if (t != 0) amin = std::min(amin, std::fabs(t));
  }
  const bool sci = amax >= 1e5 || amin < 1e-3;
  char buf[48];
  if (sci) {
    const int k = static_cast<int>(std::floor(std::log10(a) + 1e-9));
    const double m = v / std::pow(10.0, k);
    const std::string pow10 = "10" + superscript(k);
    if (std::fabs(std::fabs(m) - 1) < 1e-9) return (m < 0 ? "−" : "") + pow10;
    std::snprintf(buf, sizeof buf, "%g", m);
    return std::string(buf) + "×" + pow10;
  }
  if (log) {
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }
  double step = ticks.size() > 1 ? std::fabs(ticks[1] - ticks[0]) : a;
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

struct Axis {
  double lo = 0, hi = 1;  // in plotted units (log10 of the value on a log axis)
  bool log = false;
  std::vector<double> ticks;
  double t(double v) const { return log ? std::log10(v) : v; }
  double frac(double v) const { return (t(v) - lo) / (hi - lo); }
  bool ok(double v) const { return std::isfinite(v) && (!log || v > 0); }
};

Axis make_axis(const std::vector<double>& vals, bool log, bool include_zero = false) {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (const double v : vals) {
    if (!std::isfinite(v) || (log && v <= 0)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (!std::isfinite(lo)) {
    lo = log ? 1 : 0;
    hi = log ? 10 : 1;
  }
  if (include_zero && !log) {
    lo = std::min(lo, 0.0);
    hi = std::max(hi, 0.0);
  }
  Axis a;
  a.log = log;
  a.ticks = nice_ticks(lo, hi, log);
  a.lo = a.t(std::min(lo, a.ticks.front()));
  a.hi = a.t(std::max(hi, a.ticks.back()));
  if (a.hi - a.lo <= 0) a.hi = a.lo + 1;
  return a;
}

// SVG path of marker `m` of half-size r centred at (x, y).
std::string marker_path(int m, double x, double y, double r) {
  std::ostringstream o;
  switch (m) {
    case 0:
      o << "M" << fmt(x - r) << "," << fmt(y) << " a" << fmt(r) << "," << fmt(r) << " 0 1,0 " << fmt(2 * r)
        << ",0 a" << fmt(r) << "," << fmt(r) << " 0 1,0 " << fmt(-2 * r) << ",0Z";
      break;
    case 1: {
      const double s = r * 0.88;
      o << "M" << fmt(x - s) << "," << fmt(y - s) << " h" << fmt(2 * s) << " v" << fmt(2 * s) << " h"
        << fmt(-2 * s) << "Z";
      break;
    }
    case 2:
      o << "M" << fmt(x) << "," << fmt(y - r * 1.15) << " L" << fmt(x + r) << "," << fmt(y + r * 0.8) << " L"
        << fmt(x - r) << "," << fmt(y + r * 0.8) << "Z";
      break;
    case 3:
      o << "M" << fmt(x) << "," << fmt(y - r * 1.2) << " L" << fmt(x + r) << "," << fmt(y) << " L" << fmt(x)
        << "," << fmt(y + r * 1.2) << " L" << fmt(x - r) << "," << fmt(y) << "Z";
      break;
    case 4:
      o << "M" << fmt(x) << "," << fmt(y + r * 1.15) << " L" << fmt(x + r) << "," << fmt(y - r * 0.8) << " L"
        << fmt(x - r) << "," << fmt(y - r * 0.8) << "Z";
      break;
    default:
      o << "M" << fmt(x - r) << "," << fmt(y) << " h" << fmt(2 * r) << " M" << fmt(x) << "," << fmt(y - r)
        << " v" << fmt(2 * r);
  }
  return o.str();
}

// Builds an SVG while recording the boxes of what it draws.
class Canvas {
 public:
  Figure fig;
  std::ostringstream body;

  void text(double x, double y, const std::string& s, double size, const char* anchor = "start",
            const std::string& extra = "") {
    if (s.empty()) return;
    const double w = text_width(s, size);
    if (anchor[0] == 'm')
      x = std::max(x, 4 + w / 2);  // a centred title wider than its axes stays on the canvas
    const double x0 = anchor[0] == 's' ? x : anchor[0] == 'm' ? x - w / 2 : x - w;
    fig.texts.push_back({x0, y - 0.8 * size, x0 + w, y + 0.25 * size});
    body << "<text x=\"" << fmt(x) << "\" y=\"" << fmt(y) << "\""
         << (anchor[0] == 's' ? "" : " text-anchor=\"") << (anchor[0] == 's' ? "" : anchor)
         << (anchor[0] == 's' ? "" : "\"");
    if (size != kFont) body << " font-size=\"" << fmt(size) << "\"";
    body << extra << ">" << xml_escape(s) << "</text>\n";
  }

  // Text rotated -90° whose centre is (x, y).
  void vtext(double x, double y, const std::string& s, double size) {
    if (s.empty()) return;
    const double w = text_width(s, size);
    fig.texts.push_back({x - 0.8 * size, y - w / 2, x + 0.25 * size, y + w / 2});
    body << "<text transform=\"translate(" << fmt(x) << "," << fmt(y)
         << ") rotate(-90)\" text-anchor=\"middle\">" << xml_escape(s) << "</text>\n";
  }

  void line(double x0, double y0, double x1, double y1, const char* stroke, double width = 1) {
    body << "<line x1=\"" << fmt(x0) << "\" y1=\"" << fmt(y0) << "\" x2=\"" << fmt(x1) << "\" y2=\""
         << fmt(y1) << "\" stroke=\"" << stroke << "\""
         << (width != 1 ? " stroke-width=\"" + fmt(width) + "\"" : "") << "/>\n";
  }

  void rect(const Box& b, const std::string& fill, const char* stroke = "none") {
    fig.marks.push_back(b);
    body << "<rect x=\"" << fmt(b.x0) << "\" y=\"" << fmt(b.y0) << "\" width=\"" << fmt(b.x1 - b.x0)
         << "\" height=\"" << fmt(b.y1 - b.y0) << "\" fill=\"" << fill << "\" stroke=\"" << stroke
         << "\"/>\n";
  }

  void marker(const Style& st, double x, double y, double r = 4) {
    fig.marks.push_back({x - r - 1, y - r - 1, x + r + 1, y + r + 1});
    const char* c = kColors[static_cast<std::size_t>(st.color)];
    if (st.marker == kMarkers - 1) {
      body << "<path d=\"" << marker_path(st.marker, x, y, r) << "\" fill=\"none\" stroke=\"" << c
           << "\" stroke-width=\"2\"/>\n";
    } else {
      body << "<path d=\"" << marker_path(st.marker, x, y, r) << "\" fill=\"" << c
           << "\" stroke=\"white\" stroke-width=\"0.6\"/>\n";
    }
  }

  // Notes under the figure, wrapped to `width`, starting at baseline y; returns the next y.
  double notes(const std::vector<std::string>& ns, double x, double y, double width) {
    for (const auto& n : ns) {
      std::string line;
      std::istringstream words(n);
      std::string w;
      while (words >> w) {
        const std::string next = line.empty() ? w : line + " " + w;
        if (!line.empty() && text_width(next, kSmallFont + 1) > width) {
          text(x, y, line, kSmallFont + 1, "start", " fill=\"#444\"");
          y += 15;
          line = w;
        } else {
          line = next;
        }
      }
      text(x, y, line, kSmallFont + 1, "start", " fill=\"#444\"");
      y += 15;
      fig.notes.push_back(n);
    }
    return y;
  }

  void finish(double w, double h) {
    for (const auto* boxes : {&fig.texts, &fig.marks}) {
      for (const Box& b : *boxes) {
        w = std::max(w, b.x1 + 4);
        h = std::max(h, b.y1 + 4);
      }
    }
    fig.width = std::ceil(w);
    fig.height = std::ceil(h);
    std::ostringstream o;
    o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << fig.width << "\" height=\"" << fig.height
      << "\" viewBox=\"0 0 " << fig.width << ' ' << fig.height
      << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"" << kFont << "\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << body.str() << "</svg>\n";
    fig.svg = o.str();
  }
};

// Tries the places around a point for a label box; returns false if none is free.
bool place_label(const Box& area, double px, double py, double w, double h, const std::vector<Box>& taken,
                 Box* out) {
  for (const double d : {1.0, 2.0, 3.5}) {
    const double g = 6 * d;
    const std::array<std::pair<double, double>, 8> offs = {{{g, -h / 2},
                                                            {-g - w, -h / 2},
                                                            {-w / 2, -g - h},
                                                            {-w / 2, g},
                                                            {g * 0.7, -g * 0.7 - h},
                                                            {g * 0.7, g * 0.7},
                                                            {-g * 0.7 - w, -g * 0.7 - h},
                                                            {-g * 0.7 - w, g * 0.7}}};
    for (const auto& [dx, dy] : offs) {
      const Box b{px + dx, py + dy, px + dx + w, py + dy + h};
      if (b.x0 < area.x0 || b.x1 > area.x1 || b.y0 < area.y0 || b.y1 > area.y1) continue;
      if (std::none_of(taken.begin(), taken.end(), [&](const Box& t) { return t.overlaps(b); })) {
        *out = b;
        return true;
      }
    }
  }
  return false;
}

std::string viridis(double t) {
  t = std::clamp(t, 0.0, 1.0) * (kViridis.size() - 1);
  const auto i = std::min<std::size_t>(static_cast<std::size_t>(t), kViridis.size() - 2);
  const double f = t - static_cast<double>(i);
  char buf[16];
  int c[3];
  for (int k = 0; k < 3; ++k) {
    const auto kk = static_cast<std::size_t>(k);
    c[k] = static_cast<int>(std::lround(255 * (kViridis[i][kk] * (1 - f) + kViridis[i + 1][kk] * f)));
  }
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", c[0], c[1], c[2]);
  return buf;
}

std::string short_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, bool log) {
  if (!(lo <= hi) || !std::isfinite(lo) || !std::isfinite(hi)) throw Error("nice_ticks: bad range");
  std::vector<double> t;
  if (log) {
    if (lo <= 0) throw Error("nice_ticks: a log axis needs a positive range, got " + std::to_string(lo));
    const int a = static_cast<int>(std::floor(std::log10(lo) + 1e-12));
    int b = static_cast<int>(std::ceil(std::log10(hi) - 1e-12));
    if (b == a) ++b;
    if (b - a >= 2) {
      int step = 1;
      for (const int s : {1, 2, 5, 10, 20, 50}) {
        step = s;
        if ((b - a) / s <= 7) break;
      }
      const int first = static_cast<int>(std::floor(static_cast<double>(a) / step)) * step;
      const int last = static_cast<int>(std::ceil(static_cast<double>(b) / step)) * step;
      for (int k = first; k <= last; k += step) t.push_back(std::pow(10.0, k));
      return t;
    }
    // Less than two decades: 1, 2, 5 times powers of ten, trimmed to the data.
    for (int k = a; k <= b; ++k) {
      for (const double m : {1.0, 2.0, 5.0}) t.push_back(m * std::pow(10.0, k));
    }
    std::size_t i0 = 0;
    while (i0 + 1 < t.size() && t[i0 + 1] <= lo * (1 + 1e-12)) ++i0;
    std::size_t i1 = t.size() - 1;
    while (i1 > i0 + 1 && t[i1 - 1] >= hi * (1 - 1e-12)) --i1;
    return {t.begin() + static_cast<std::ptrdiff_t>(i0), t.begin() + static_cast<std::ptrdiff_t>(i1) + 1};
  }
  if (hi - lo < 1e-12 * std::max(1.0, std::fabs(hi))) {
    const double w = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= w;
    hi += w;
  }
  const double step = nice_step((hi - lo) / 5);
  const double first = std::floor(lo / step + 1e-9);
  const double last = std::ceil(hi / step - 1e-9);
  for (double k = first; k <= last; k += 1) t.push_back(k * step == 0 ? 0.0 : k * step);
  return t;
}

Style series_style(std::size_t i) {
  return {static_cast<int>(i % kColors.size()), static_cast<int>(i % kMarkers),
          static_cast<int>((i / kColors.size()) % kDashes.size())};
}

std::vector<std::size_t> pareto_front(const std::vector<double>& x, const std::vector<double>& y,
                                      bool x_lower_better) {
  std::vector<std::size_t> idx;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (std::isfinite(x[i]) && std::isfinite(y[i])) idx.push_back(i);
  }
  const double sx = x_lower_better ? 1 : -1;
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
    return sx * x[a] < sx * x[b] || (x[a] == x[b] && y[a] < y[b]);
  });
  std::vector<std::size_t> front;
  double best = std::numeric_limits<double>::infinity();
  for (const auto i : idx) {
    if (y[i] < best) {
      front.push_back(i);
      best = y[i];
    }
  }
  std::stable_sort(front.begin(), front.end(), [&](std::size_t a, std::size_t b) { return x[a] < x[b]; });
  return front;
}

Figure layout(const Plot& plot) {
  Canvas c;
  std::vector<double> xs, ys;
  std::vector<std::string> dropped;
  for (const auto& s : plot.series) {
    std::vector<std::string> bad;
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      const bool okx = std::isfinite(s.x[i]) && (!plot.log_x || s.x[i] > 0);
      const bool oky = std::isfinite(s.y[i]) && (!plot.log_y || s.y[i] > 0);
      if (okx && oky) {
        xs.push_back(s.x[i]);
        ys.push_back(s.y[i]);
      } else {
        const std::string who =
            i < s.point_labels.size()
                ? s.point_labels[i]
                : s.label + " at " + (okx ? "x = " + short_num(s.x[i]) : "point " + std::to_string(i));
        bad.push_back(who + " (" + (okx ? "y" : "x") + " = " + short_num(okx ? s.y[i] : s.x[i]) + ")");
      }
    }
    for (auto& b : bad) dropped.push_back(std::move(b));
  }
  const bool categorical = !plot.x_tick_labels.empty();
  if (categorical) {
    xs.push_back(0);
    xs.push_back(static_cast<double>(plot.x_tick_labels.size() - 1));
  }
  Axis ax = make_axis(xs, plot.log_x && !categorical);
  const Axis ay = make_axis(ys, plot.log_y);
  if (categorical) {
    ax.ticks.clear();
    for (std::size_t i = 0; i < plot.x_tick_labels.size(); ++i) ax.ticks.push_back(static_cast<double>(i));
    ax.lo = -0.5;
    ax.hi = static_cast<double>(plot.x_tick_labels.size()) - 0.5;
  }
  c.fig.x_ticks = ax.ticks;
  c.fig.y_ticks = ay.ticks;
  c.fig.log_x = ax.log;
  c.fig.log_y = ay.log;

  std::vector<std::string> ylabels;
  double ytw = 0;
  for (const double v : ay.ticks) {
    ylabels.push_back(tick_label(v, ay.ticks, ay.log));
    ytw = std::max(ytw, text_width(ylabels.back(), kFont));
  }
  const double x0 = kPad + 16 + 8 + ytw + 6;
  const double x1 = x0 + kPlotW;
  const double y1 = kPad + kTitleFont + 14;
  const double y0 = y1 + kPlotH;
  const Box area{x0, y1, x1, y0};
  auto px = [&](double v) { return x0 + ax.frac(v) * (x1 - x0); };
  auto py = [&](double v) { return y0 - ay.frac(v) * (y0 - y1); };

  // Legend geometry, to size the canvas.
  const bool legend = plot.series.size() > 1 || (plot.series.size() == 1 && !plot.series[0].label.empty());
  double legend_w = 0;
  if (legend) {
    for (const auto& s : plot.series) legend_w = std::max(legend_w, text_width(s.label, kFont));
    legend_w += 40;
  }
  const double width = x1 + 16 + legend_w + kPad;
  c.text(x0 + kPlotW / 2, kPad + kTitleFont, plot.title, kTitleFont, "middle", " font-weight=\"bold\"");

  // Grid, ticks and tick labels.
  for (std::size_t i = 0; i < ay.ticks.size(); ++i) {
    const double y = py(ay.ticks[i]);
    if (y < y1 - 0.5 || y > y0 + 0.5) continue;
    c.line(x0, y, x1, y, "#e4e4e4");
    c.line(x0 - 4, y, x0, y, "black");
    c.text(x0 - 7, y + 4, ylabels[i], kFont, "end");
  }
  Box last_label{-1e9, 0, -1e9, 0};
  for (std::size_t i = 0; i < ax.ticks.size(); ++i) {
    const double x = px(ax.ticks[i]);
    if (x < x0 - 0.5 || x > x1 + 0.5) continue;
    if (!categorical) c.line(x, y0, x, y1, "#e4e4e4");
    c.line(x, y0, x, y0 + 4, "black");
    const std::string lab = categorical ? plot.x_tick_labels[i] : tick_label(ax.ticks[i], ax.ticks, ax.log);
    const double w = text_width(lab, kFont);
    const Box b{x - w / 2 - 3, y0 + 8, x + w / 2 + 3, y0 + 22};
    if (b.overlaps(last_label)) continue;  // thin crowded categorical labels
    c.text(x, y0 + 18, lab, kFont, "middle");
    last_label = b;
  }
  // Minor ticks at 2..9 within decades on log axes.
  for (const Axis* a : {static_cast<const Axis*>(&ax), &ay}) {
    if (!a->log || a->ticks.size() < 2 || a->ticks[1] / a->ticks[0] > 10.5) continue;
    for (int k = static_cast<int>(std::floor(a->lo)); k < static_cast<int>(std::ceil(a->hi)); ++k) {
      for (int m = 2; m <= 9; ++m) {
        const double v = m * std::pow(10.0, k);
        const double f = a->frac(v);
        if (f < 0 || f > 1) continue;
        if (a == &ax) {
          c.line(px(v), y0, px(v), y0 + 2.5, "black");
        } else {
          c.line(x0 - 2.5, py(v), x0, py(v), "black");
        }
      }
    }
  }
  c.body << "<rect x=\"" << fmt(x0) << "\" y=\"" << fmt(y1) << "\" width=\"" << fmt(kPlotW) << "\" height=\""
         << fmt(kPlotH) << "\" fill=\"none\" stroke=\"black\"/>\n";
  c.text(x0 + kPlotW / 2, y0 + 40, plot.x_label, kFont, "middle");
  c.vtext(kPad + 12, (y0 + y1) / 2, plot.y_label, kFont);

  // Series: lines under markers, labels last.
  std::vector<std::pair<std::size_t, std::size_t>> to_label;
  for (std::size_t s = 0; s < plot.series.size(); ++s) {
    const auto& se = plot.series[s];
    const Style st = series_style(s);
    c.fig.styles.push_back(st);
    std::string path;
    for (std::size_t i = 0; i < se.x.size() && i < se.y.size(); ++i) {
      if (!ax.ok(se.x[i]) || !ay.ok(se.y[i])) continue;
      path += (path.empty() ? "M" : " L") + fmt(px(se.x[i])) + "," + fmt(py(se.y[i]));
    }
    if (se.lines && !path.empty()) {
      c.body << "<path d=\"" << path << "\" fill=\"none\" stroke=\""
             << kColors[static_cast<std::size_t>(st.color)] << "\" stroke-width=\"1.8\"";
      if (st.dash) c.body << " stroke-dasharray=\"" << kDashes[static_cast<std::size_t>(st.dash)] << "\"";
      c.body << "/>\n";
    }
  }
  for (std::size_t s = 0; s < plot.series.size(); ++s) {
    const auto& se = plot.series[s];
    for (std::size_t i = 0; i < se.x.size() && i < se.y.size(); ++i) {
      if (!ax.ok(se.x[i]) || !ay.ok(se.y[i])) continue;
      if (se.markers) c.marker(c.fig.styles[s], px(se.x[i]), py(se.y[i]));
      if (i < se.point_labels.size() && !se.point_labels[i].empty()) to_label.emplace_back(s, i);
    }
  }
  std::vector<std::string> unplaced;
  for (const auto& [s, i] : to_label) {
    const auto& lab = plot.series[s].point_labels[i];
    const double w = text_width(lab, kSmallFont);
    std::vector<Box> taken = c.fig.texts;
    taken.insert(taken.end(), c.fig.marks.begin(), c.fig.marks.end());
    Box b;
    if (place_label(area, px(plot.series[s].x[i]), py(plot.series[s].y[i]), w, kSmallFont * 1.05, taken,
                    &b)) {
      c.text(b.x0, b.y0 + 0.8 * kSmallFont, lab, kSmallFont, "start", " fill=\"#222\"");
    } else {
      unplaced.push_back(lab);
    }
  }

  // Legend: line sample with dash, marker, label.
  double ly = y1 + 12;
  if (legend) {
    for (std::size_t s = 0; s < plot.series.size(); ++s) {
      const Style st = c.fig.styles[s];
      const double lx = x1 + 16;
      if (plot.series[s].lines) {
        c.body << "<line x1=\"" << fmt(lx) << "\" y1=\"" << fmt(ly) << "\" x2=\"" << fmt(lx + 28)
               << "\" y2=\"" << fmt(ly) << "\" stroke=\"" << kColors[static_cast<std::size_t>(st.color)]
               << "\" stroke-width=\"1.8\"";
        if (st.dash) c.body << " stroke-dasharray=\"" << kDashes[static_cast<std::size_t>(st.dash)] << "\"";
        c.body << "/>\n";
      }
      if (plot.series[s].markers) c.marker(st, lx + 14, ly);
      c.text(lx + 34, ly + 4, plot.series[s].label, kFont);
      ly += 18;
    }
  }
  std::vector<std::string> notes = plot.notes;
  if (!dropped.empty()) {
    std::string n = std::string("Not drawn (") +
                    (plot.log_x || plot.log_y ? "zero, negative or non-finite on a log axis" : "non-finite") +
                    "): ";
    for (std::size_t i = 0; i < dropped.size(); ++i) n += (i ? "; " : "") + dropped[i];
    notes.push_back(n + ".");
  }
  if (!unplaced.empty()) {
    std::string n = "Labels left off for lack of room: ";
    for (std::size_t i = 0; i < unplaced.size(); ++i) n += (i ? ", " : "") + unplaced[i];
    notes.push_back(n + ".");
  }
  const double after = c.notes(notes, x0, std::max(y0 + 62, ly + 8), width - x0 - kPad);
  c.finish(width, std::max(after, ly) + kPad - 4);
  return c.fig;
}

Figure layout(const BarChart& chart) {
  Canvas c;
  constexpr double kRow = 20;
  constexpr double kPanelW = 230;
  double cat_w = 0;
  for (const auto& s : chart.categories) cat_w = std::max(cat_w, text_width(s, kFont));
  std::vector<std::string> classes;
  for (const auto& k : chart.classes) {
    if (std::find(classes.begin(), classes.end(), k) == classes.end()) classes.push_back(k);
  }
  for (std::size_t k = 0; k < classes.size(); ++k) c.fig.styles.push_back(series_style(k));
  const double top = kPad + kTitleFont + 16;
  const double xl = kPad + cat_w + 10;
  const double n = static_cast<double>(chart.categories.size());
  const double bottom = top + n * kRow;
  std::vector<std::string> dropped;
  double x = xl;
  double panel_x1 = xl;
  for (const auto& p : chart.panels) {
    std::vector<double> v;
    for (std::size_t i = 0; i < p.values.size() && i < chart.categories.size(); ++i) {
      if (std::isfinite(p.values[i]) && (!p.log || p.values[i] > 0)) {
        v.push_back(p.values[i]);
      } else if (!std::isnan(p.values[i])) {
        dropped.push_back(chart.categories[i] + " (" + p.x_label + " = " + short_num(p.values[i]) + ")");
      }
    }
    const Axis a = make_axis(v, p.log, true);
    if (c.fig.x_ticks.empty()) {
      c.fig.x_ticks = a.ticks;
      c.fig.log_x = a.log;
    }
    auto px = [&](double val) { return x + a.frac(val) * kPanelW; };
    const double base = a.log ? x : px(0);
    Box prev{-1e9, 0, -1e9, 0};
    for (const double t : a.ticks) {
      const double tx = px(t);
      if (tx < x - 0.5 || tx > x + kPanelW + 0.5) continue;
      c.line(tx, top, tx, bottom, "#e4e4e4");
      c.line(tx, bottom, tx, bottom + 4, "black");
      const std::string lab = tick_label(t, a.ticks, a.log);
      const double w = text_width(lab, kFont);
      const Box b{tx - w / 2 - 3, bottom + 8, tx + w / 2 + 3, bottom + 22};
      if (b.overlaps(prev) || b.x0 < x - 14 || b.x1 > x + kPanelW + 14) continue;
      c.text(tx, bottom + 18, lab, kFont, "middle");
      prev = b;
    }
    for (std::size_t i = 0; i < p.values.size() && i < chart.categories.size(); ++i) {
      if (!a.ok(p.values[i])) continue;
      const double y = top + static_cast<double>(i) * kRow + 3;
      const double e = px(p.values[i]);
      std::size_t k = 0;
      if (i < chart.classes.size()) {
        k = static_cast<std::size_t>(std::find(classes.begin(), classes.end(), chart.classes[i]) -
                                     classes.begin());
      }
      const Style st = series_style(k);
      c.rect({std::min(base, e), y, std::max(base, e) + (e == base ? 1 : 0), y + kRow - 6},
             kColors[static_cast<std::size_t>(st.color)]);
    }
    c.body << "<rect x=\"" << fmt(x) << "\" y=\"" << fmt(top) << "\" width=\"" << fmt(kPanelW)
           << "\" height=\"" << fmt(n * kRow) << "\" fill=\"none\" stroke=\"black\"/>\n";
    c.text(x + kPanelW / 2, bottom + 38, p.x_label, kFont, "middle");
    panel_x1 = x + kPanelW;
    x += kPanelW + 36;
  }
  for (std::size_t i = 0; i < chart.categories.size(); ++i) {
    c.text(xl - 6, top + static_cast<double>(i) * kRow + kRow / 2 + 4, chart.categories[i], kFont, "end");
  }
  c.text((kPad + panel_x1) / 2, kPad + kTitleFont, chart.title, kTitleFont, "middle",
         " font-weight=\"bold\"");
  double width = panel_x1 + kPad;
  double ly = top + 10;
  if (!classes.empty()) {
    double lw = 0;
    for (const auto& k : classes) lw = std::max(lw, text_width(k, kFont));
    for (std::size_t k = 0; k < classes.size(); ++k) {
      c.rect({panel_x1 + 16, ly - 6, panel_x1 + 28, ly + 6},
             kColors[static_cast<std::size_t>(c.fig.styles[k].color)]);
      c.text(panel_x1 + 34, ly + 4, classes[k], kFont);
      ly += 18;
    }
    width = panel_x1 + 34 + lw + kPad;
  }
  std::vector<std::string> notes = chart.notes;
  if (!dropped.empty()) {
    std::string s = "Not drawn (non-finite, or zero or negative on a log axis): ";
    for (std::size_t i = 0; i < dropped.size(); ++i) s += (i ? "; " : "") + dropped[i];
    notes.push_back(s + ".");
  }
  const double after = c.notes(notes, kPad, bottom + 60, width - 2 * kPad);
  c.finish(width, std::max(after, ly) + kPad - 4);
  return c.fig;
}

Figure layout(const HeatMap& map) {
  Canvas c;
  const std::size_t nr = map.rows.size(), nc = map.cols.size();
  if (map.values.size() != nr * nc) {
    throw Error("heat map '" + map.title + "': " + std::to_string(map.values.size()) + " values for " +
                std::to_string(nr) + " x " + std::to_string(nc) + " cells");
  }
  std::vector<double> ok;
  const bool clip = std::isfinite(map.clip_hi);
  for (const double v : map.values) {
    if (std::isfinite(v) && (!map.log || v > 0)) ok.push_back(clip ? std::min(v, map.clip_hi) : v);
  }
  const Axis a = make_axis(ok, map.log);
  c.fig.y_ticks = a.ticks;
  c.fig.log_y = a.log;
  double row_w = 0, cell_w = 44;
  for (const auto& r : map.rows) row_w = std::max(row_w, text_width(r, kFont));
  for (const auto& col : map.cols) cell_w = std::max(cell_w, text_width(col, kFont) + 10);
  for (const double v : map.values) cell_w = std::max(cell_w, text_width(short_num(v), kSmallFont) + 8);
  constexpr double kCellH = 20;
  const double top = kPad + kTitleFont + 14 + 22;
  const double xl = kPad + 20 + row_w + 8;
  const double gw = cell_w * static_cast<double>(nc);
  const double gh = kCellH * static_cast<double>(nr);
  c.text(xl + gw / 2, kPad + kTitleFont, map.title, kTitleFont, "middle", " font-weight=\"bold\"");
  for (std::size_t j = 0; j < nc; ++j) {
    c.text(xl + (static_cast<double>(j) + 0.5) * cell_w, top - 6, map.cols[j], kFont, "middle");
  }
  bool missing = false;
  for (std::size_t i = 0; i < nr; ++i) {
    const double y = top + static_cast<double>(i) * kCellH;
    c.text(xl - 6, y + kCellH / 2 + 4, map.rows[i], kFont, "end");
    for (std::size_t j = 0; j < nc; ++j) {
      const double v = map.values[i * nc + j];
      const Box b{xl + static_cast<double>(j) * cell_w, y, xl + static_cast<double>(j + 1) * cell_w,
                  y + kCellH};
      if (!a.ok(v)) {
        missing = true;
        c.rect(b, "#f2f2f2", "white");
        continue;
      }
      const double f = clip && v >= map.clip_hi ? 1.0 : std::min(1.0, a.frac(v));
      c.rect(b, viridis(f), "white");
      c.text((b.x0 + b.x1) / 2, y + kCellH / 2 + 3.5, short_num(v), kSmallFont, "middle",
             f > 0.6 ? " fill=\"black\"" : " fill=\"white\"");
    }
  }
  c.text(xl + gw / 2, top + gh + 18, map.x_label, kFont, "middle");
  c.vtext(kPad + 8, top + gh / 2, map.y_label, kFont);
  // Colour bar with the value axis.
  const double bx = xl + gw + 20;
  const double bh = std::max(gh, 120.0);
  constexpr int kSteps = 32;
  for (int s = 0; s < kSteps; ++s) {
    const double f0 = static_cast<double>(s) / kSteps;
    c.body << "<rect x=\"" << fmt(bx) << "\" y=\"" << fmt(top + bh * (1 - f0 - 1.0 / kSteps))
           << "\" width=\"14\" height=\"" << fmt(bh / kSteps + 0.5) << "\" fill=\""
           << viridis(f0 + 0.5 / kSteps) << "\"/>\n";
  }
  c.fig.marks.push_back({bx, top, bx + 14, top + bh});
  double tw = 0;
  for (const double t : a.ticks) {
    const double f = a.frac(t);
    if (f < -1e-9 || f > 1 + 1e-9) continue;
    const double y = top + bh * (1 - f);
    c.line(bx + 14, y, bx + 18, y, "black");
    const std::string lab = tick_label(t, a.ticks, a.log);
    c.text(bx + 21, y + 4, lab, kFont);
    tw = std::max(tw, text_width(lab, kFont));
  }
  c.vtext(bx + 21 + tw + 16, top + bh / 2, map.value_label, kFont);
  const double width = bx + 21 + tw + 22 + kPad;
  std::vector<std::string> notes = map.notes;
  if (clip) notes.push_back("Cells at or above " + short_num(map.clip_hi) + " take the top colour.");
  if (missing)
    notes.push_back("Grey cells: not measured" +
                    std::string(map.log ? " or zero (no place on the log colour scale)." : "."));
  const double after = c.notes(notes, kPad, top + std::max(gh + 28, bh) + 18, width - 2 * kPad);
  c.finish(width, after + kPad - 4);
  return c.fig;
}

std::string xml_escape(const std::string& s) {
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

std::string render_svg(const Plot& plot) { return layout(plot).svg; }

void write_svg(const std::filesystem::path& file, const Figure& figure) {
  write_file_atomic(file, figure.svg, OutputPolicy{true, {}});  // the caller owns the folder
}

void write_svg(const std::filesystem::path& file, const Plot& plot) { write_svg(file, layout(plot)); }

}  // namespace lpemu::io
