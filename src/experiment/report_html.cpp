// report.html: the sweep report as one self-contained page (inline CSS, SVG and a few lines of
// script to sort the table; no network access), to forward as it is.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "experiment/proposal_detail.hpp"
#include "experiment/report_detail.hpp"

namespace lpemu::experiment::report {
namespace {

std::string html(const std::string& s) { return io::xml_escape(s); }

constexpr const char* kStyle = R"(
body{font-family:"DejaVu Sans",Helvetica,Arial,sans-serif;margin:2em auto;max-width:1600px;padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ccc}
dl.inputs{display:grid;grid-template-columns:max-content auto;gap:.2em 1.2em}dl.inputs dt{font-weight:bold}
dl.inputs dd{margin:0;font-family:monospace}
table{border-collapse:collapse;font-size:.82em;margin:1em 0}th,td{padding:.2em .4em;border-bottom:1px solid #e2e2e2}
th{background:#f4f4f4;position:sticky;top:0;cursor:pointer;user-select:none;text-align:left}
th.num,td.num{text-align:right;font-variant-numeric:tabular-nums}td{white-space:nowrap}
.scroll{overflow-x:auto}th[aria-sort=ascending]::after{content:" ▲"}
th[aria-sort=descending]::after{content:" ▼"}tr:hover td{background:#fafae8}
figure{margin:2em 0}figure svg{max-width:100%;height:auto}figcaption{max-width:60em}
figcaption b{display:block}.note{color:#555;font-size:.92em}
)";

// Sorts a table by the clicked column: numeric cells by data-key, others as text.
constexpr const char* kScript = R"(
document.querySelectorAll("table.sortable").forEach(function (table) {
  var heads = table.querySelectorAll("th");
  heads.forEach(function (th, col) {
    th.addEventListener("click", function () {
      var asc = th.getAttribute("aria-sort") !== "ascending";
      heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var numeric = th.classList.contains("num");
      rows.sort(function (a, b) {
        var x = a.cells[col], y = b.cells[col];
        if (numeric) {
          var u = parseFloat(x.dataset.key), v = parseFloat(y.dataset.key);
          if (isNaN(u)) return isNaN(v) ? 0 : 1;
          if (isNaN(v)) return -1;
          return asc ? u - v : v - u;
        }
        return asc ? x.textContent.localeCompare(y.textContent) : y.textContent.localeCompare(x.textContent);
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
)";

std::string key_attr(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return num(v, 17);
}

}  // namespace

void write_html(const std::filesystem::path& file, const std::string& name, const std::string& model,
                const std::string& fingerprint, const std::vector<PlanResult>& plans,
                const std::vector<NamedFigure>& figures) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    << "<link rel=\"icon\" href=\"data:,\">\n<title>lpemu sweep report: " << html(name) << "</title>\n<style>"
    << kStyle << "</style>\n</head>\n<body>\n";
  o << "<h1>Sweep report: " << html(name) << "</h1>\n";
  o << "<p>What each number format and datapath costs in accuracy on a real model, and what it saves in "
       "hardware. Made by lpemu from the experiment's plan results; every figure and number below is in "
       "<code>results.h5</code> beside this file.</p>\n";
  o << "<h2>Experiment</h2>\n<dl class=\"inputs\">\n";
  auto item = [&](const std::string& k, const std::string& v) {
    o << "<dt>" << html(k) << "</dt><dd>" << html(v) << "</dd>\n";
  };
  item("experiment", name);
  item("model", model);
  item("fingerprint", fingerprint);
  item("plans", std::to_string(plans.size()));
  if (!plans.empty()) {
    item("tokens scored", std::to_string(plans.front().eval.tokens.size()));
    item("reference perplexity", num(plans.front().eval.ref_perplexity, 6));
    if (has_cost(plans)) item("cost target", plans.front().cost.target);
  }
  o << "</dl>\n";
  o << "<h2>How to read this</h2>\n<ul>\n"
       "<li><b>Mean KL</b> is KL(reference ‖ plan) of the next-token distribution, averaged over the scored "
       "tokens, in nats: 0 means the plan predicts exactly what the reference predicts. The table is ranked "
       "by it.</li>\n"
       "<li><b>Δ perplexity</b> and <b>top-1 agree</b> say the same in terms of the model's task; "
       "<b>SQNR</b> is "
       "10·log10(signal power / error power) in dB (higher is better, +inf is exact).</li>\n"
       "<li><b>Cost columns</b> come from lpemu's cost model: tokens/s and J/token from a roofline of the "
       "priced "
       "workload on the target, MAC area relative to a bf16 MAC on the same datapath (45 nm constants: "
       "compare "
       "plans, not absolute values). ★ marks the Pareto front of mean KL against MAC area.</li>\n"
       "<li>Click a column heading to sort the table by it. The numbers in the scatter plots are the ranks "
       "in "
       "this table.</li>\n</ul>\n";

  o << "<h2>Plans ranked by mean KL</h2>\n<div class=\"scroll\"><table class=\"sortable\" "
       "id=\"ranked\">\n<thead><tr>";
  const auto columns = ranked_columns(plans);
  for (const auto& c : columns)
    o << "<th" << (c.numeric ? " class=\"num\"" : "") << ">" << html(c.header) << "</th>";
  o << "</tr></thead>\n<tbody>\n";
  const auto order = ranked(plans);
  const auto front = has_cost(plans) ? area_front(plans) : std::vector<std::size_t>{};
  for (std::size_t k = 0; k < order.size(); ++k) {
    const auto& p = plans[order[k]];
    const bool on_front = std::find(front.begin(), front.end(), order[k]) != front.end();
    o << "<tr>";
    for (const auto& c : columns) {
      if (c.numeric) {
        o << "<td class=\"num\" data-key=\"" << key_attr(c.key(p, k + 1)) << "\">";
      } else {
        o << "<td>";
      }
      o << html(c.cell(p, k + 1, on_front)) << "</td>";
    }
    o << "</tr>\n";
  }
  o << "</tbody>\n</table></div>\n";
  for (const auto& p : plans) {
    if (!p.cost.note.empty())
      o << "<p class=\"note\">" << html(p.label) << ": not priced: " << html(p.cost.note) << "</p>\n";
  }

  o << "<h2>Figures</h2>\n";
  const auto figure = [&](const NamedFigure& f) {
    const auto dot = f.file.rfind('.');
    o << "<figure id=\"" << html(f.file.substr(0, dot)) << "\">\n";
    // Inline SVG: the document's own <svg> element, without the XML prolog (there is none).
    o << f.figure.svg;
    o << "<figcaption><b>" << html(f.caption) << "</b> " << html(f.how_to_read) << " <span class=\"note\">("
      << html(f.file) << ")</span></figcaption>\n</figure>\n";
  };
  std::vector<std::string> groups;
  for (const auto& f : figures) {
    if (f.group.empty()) {
      figure(f);
    } else if (std::find(groups.begin(), groups.end(), f.group) == groups.end()) {
      groups.push_back(f.group);
    }
  }
  // Per-plan figures: one collapsed section per kind, one entry per plan (click to open).
  for (const auto& g : groups) {
    o << "<h3>Per plan: " << html(g) << "</h3>\n";
    for (const auto& f : figures) {
      if (f.group != g) continue;
      o << "<details><summary>" << html(f.caption) << "</summary>\n";
      figure(f);
      o << "</details>\n";
    }
  }
  o << "<h2>Files beside this report</h2>\n<ul>\n<li><code>report.md</code>: the same tables in "
       "Markdown</li>\n"
       "<li><code>results.h5</code>: everything (per-token NLL and KL, per-layer errors, replay, "
       "attribution)</li>\n"
       "<li><code>results.csv</code>: one row per plan × metric</li>\n<li><code>*.svg</code>: the "
       "figures</li>\n"
       "<li><code>plans/NNNN.h5</code>: one file per plan</li>\n</ul>\n";
  o << "<script>" << kScript << "</script>\n</body>\n</html>\n";
  detail::write_text(file, o.str());
}

}  // namespace lpemu::experiment::report
