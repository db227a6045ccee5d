// End-to-end test of the sweep report (label cli): `lpemu sweep` on a small experiment writes
// report.html beside report.md, self-contained (inline SVG and CSS, nothing fetched), and headless
// Chromium (Debian `chromium`, installed by `make test`) loads it with no console message and
// produces a screenshot. A page with a deliberate script error shows the console check can fail.
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <catch2/catch.hpp>

#include "support/test_support.hpp"

namespace {

namespace fs = std::filesystem;

using lpemu::test::Run;
using lpemu::test::run_lpemu;
using lpemu::test::run_lpemu_merged;
using lpemu::test::Scratch;
using lpemu::test::slurp;

std::string chromium() {
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (fs::exists(c)) return c;
  }
  return "";
}

// Loads `page` in headless Chromium; returns Chromium's stderr (console messages are logged there
// as "CONSOLE") and leaves the screenshot at `png`.
std::string load_in_chromium(const fs::path& page, const fs::path& png, const fs::path& work) {
  lpemu::test::RunOptions o;
  o.timeout_s = 180;
  const Run r =
      lpemu::test::run_shell(chromium() +
                                 " --headless --disable-gpu --no-sandbox --no-first-run --disable-extensions"
                                 " --user-data-dir=" +
                                 (work / "profile").string() +
                                 " --enable-logging=stderr --v=0 --window-size=1280,2400 "
                                 "--virtual-time-budget=5000 --screenshot=" +
                                 png.string() + " file://" + fs::absolute(page).string(),
                             o);
  INFO("chromium exit status " << r.status << "\n" << r.err);
  CHECK(r.status == 0);
  return r.err;
}

bool is_png(const fs::path& p) {
  const std::string s = slurp(p);
  return s.size() > 1000 && s.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0;
}

TEST_CASE(
    "lpemu sweep writes a self-contained report.html that headless Chromium loads without console errors",
    "[cli][report]") {
  REQUIRE_FALSE(chromium().empty());  // Debian `chromium`: `make test` installs it (Makefile TEST_PACKAGES)
  const Scratch scratch("report_html");
  const fs::path& work = scratch.dir;
  const std::string data = lpemu::test::source_path("data/models/stories260K");
  const fs::path exp = work / "small.toml";
  std::ofstream(exp)
      << "name = \"small\"\n[source]\nmodel = \"stories260K\"\ntext = \"" << data
      << "/paragraph.txt\"\nactivations = \"" << data << "/activations.h5\"\nmax_tokens = 24\n"
      << "[options]\nreference = \"fp32\"\nattribution = true\n"
      << "[cost]\ntarget = \"h100_sxm\"\nshape = \"llama3_8b\"\nphase = \"decode\"\nbatch = 8\n"
      << "context = 4096\n[[plan]]\nlabel = \"fp32\"\nplan = \"fp32\"\n"
      << "[grid]\nformats = [\"mxfp8_e4m3\", \"mxfp4\"]\nroles = [\"weights\", \"linear_input\"]\n"
      << "[grid.native]\nmxfp8_e4m3 = \"b200_mxfp8_fp32\"\nmxfp4 = \"b200_mxfp4_fp32\"\n";
  const fs::path out = work / "out";
  const Run sweep = run_lpemu_merged("sweep " + exp.string() + " --out " + out.string());
  REQUIRE(sweep.status == 0);
  const fs::path html = out / "report.html";
  REQUIRE(fs::exists(html));
  CHECK(sweep.out.find(fs::absolute(html).string()) != std::string::npos);
  const std::string page = slurp(html);

  // Self-contained: every figure inline, nothing to fetch.
  for (const char* f : {"kl_vs_bits", "kl_vs_cost", "kl_vs_tokens_per_s", "kl_vs_energy", "residual_sqnr",
                        "attribution_heatmap", "attribution_bars", "replay_sqnr_heatmap"}) {
    INFO(f);
    const fs::path svg = out / (std::string(f) + ".svg");
    REQUIRE(fs::exists(svg));
    CHECK(page.find(slurp(svg)) != std::string::npos);
  }
  const std::regex external(R"((src|href)\s*=\s*"(?!data:|#))");
  CHECK_FALSE(std::regex_search(page, external));
  std::string without_svg_ns =
      std::regex_replace(page, std::regex(R"(xmlns="http://www\.w3\.org/2000/svg")"), "");
  CHECK(without_svg_ns.find("http://") == std::string::npos);
  CHECK(without_svg_ns.find("https://") == std::string::npos);
  // The ranked table: a row per plan (5), sortable numeric cells.
  std::size_t rows = 0;
  for (auto at = page.find("<tr><td class=\"num\" data-key="); at != std::string::npos;
       at = page.find("<tr><td class=\"num\" data-key=", at + 1)) {
    ++rows;
  }
  CHECK(rows == 5);
  // The sanitizer stage stops here: Chromium is not the code under test, and the release stage
  // loads the same page.
  if (lpemu::test::kSanitized) return;

  const fs::path png = work / "report.png";
  const std::string log = load_in_chromium(html, png, work);
  INFO(log);
  CHECK(log.find("CONSOLE") == std::string::npos);
  CHECK(is_png(png));

  // Control: the same check sees a script error.
  const fs::path bad = work / "bad.html";
  std::ofstream(bad)
      << "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><link rel=\"icon\" href=\"data:,\">"
         "<title>x</title></head><body><p>x</p><script>undefined_function();</script></body></html>\n";
  const std::string bad_log = load_in_chromium(bad, work / "bad.png", work);
  CHECK(bad_log.find("CONSOLE") != std::string::npos);
}

TEST_CASE("lpemu cost --plot draws each phase's per-op breakdown", "[cli][report]") {
  const Scratch scratch("cost_plot");
  const fs::path& work = scratch.dir;
  const Run r = run_lpemu_merged("cost --target h100_sxm --model llama3_8b --plan fp8 --phase both --plot " +
                                 (work / "figs").string());
  REQUIRE(r.status == 0);
  for (const char* ph : {"prefill", "decode"}) {
    const std::string svg = slurp(work / "figs" / ("cost_" + std::string(ph) + ".svg"));
    INFO(ph);
    CHECK(svg.rfind("<svg", 0) == 0);
    CHECK(svg.find("Where " + std::string(ph) + " time goes") != std::string::npos);
    CHECK(svg.find("attn.sdpa") != std::string::npos);
  }
  CHECK(r.out.find("cost_decode.svg") != std::string::npos);
}

TEST_CASE("a sweep's cluster-level cost equals lpemu cost --system for the same plan and job",
          "[cli][report]") {
  const Scratch scratch("sweep_cluster");
  const fs::path& work = scratch.dir;
  const std::string data = lpemu::test::source_path("data/models/stories260K");
  std::ofstream(work / "e.toml")
      << "name = \"cluster\"\n[source]\nmodel = \"stories260K\"\ntext = \"" << data
      << "/paragraph.txt\"\nmax_tokens = 16\n[cost]\nsystem = \"dgx_h100\"\n"
         "shape = \"llama3_70b\"\nphase = \"train\"\ndevices = 1024\n"
         "parallel = \"tp=8,pp=4,sp=1,zero=1\"\ncontext = 8192\nglobal_batch = 512\n"
         "comm = \"fp8_e4m3\"\n[grid]\nformats = [\"bf16\", \"fp8_e4m3\"]\n";
  REQUIRE(
      run_lpemu_merged("sweep " + (work / "e.toml").string() + " --out " + (work / "out").string()).status ==
      0);
  const std::string csv = slurp(work / "out" / "results.csv");
  for (const char* idx : {"0000", "0001"}) {
    INFO(idx);
    const Run cost = run_lpemu(
        "cost --system dgx_h100 --model llama3_70b --phase train --devices 1024 "
        "--parallel tp=8,pp=4,sp=1,zero=1 --context 8192 --global-batch 512 --comm fp8_e4m3 --json --plan " +
        (work / "out" / "plans" / (std::string(idx) + ".toml")).string());
    INFO(cost.err);
    REQUIRE(cost.status == 0);
    const std::string j = cost.out;
    const std::regex step("\"step_s\":([0-9.eE+-]+)"), tps("\"tokens_per_s\":([0-9.eE+-]+)");
    std::smatch ms, mt;
    REQUIRE(std::regex_search(j, ms, step));
    REQUIRE(std::regex_search(j, mt, tps));
    const std::string plan = std::string(idx) == "0000" ? "bf16" : "fp8_e4m3";
    const std::regex row(std::to_string(std::stoi(idx)) + "," + plan + ",cluster_step_s,([0-9.eE+-]+)");
    const std::regex row_t(std::to_string(std::stoi(idx)) + "," + plan +
                           ",cluster_tokens_per_s,([0-9.eE+-]+)");
    std::smatch cs, ct;
    REQUIRE(std::regex_search(csv, cs, row));
    REQUIRE(std::regex_search(csv, ct, row_t));
    // results.csv prints 9 significant digits.
    CHECK(std::stod(cs[1]) == Approx(std::stod(ms[1])).epsilon(1e-8));
    CHECK(std::stod(ct[1]) == Approx(std::stod(mt[1])).epsilon(1e-8));
  }
  const std::string md = slurp(work / "out" / "report.md");
  CHECK(md.find("cluster step s") != std::string::npos);
  CHECK(md.find("tp=8,pp=4,dp=32,sp=1,zero=1") != std::string::npos);
}

}  // namespace
