#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "lpemu/cost/catalog.hpp"
#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/pricing.hpp"
#include "lpemu/experiment/sweep.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/io/hdf5.hpp"
#include "support/test_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace lpemu;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Fixture {
  test::Scratch scratch;
  fs::path dir = scratch.dir;
  engine::QuantizerFactory quantizers =
      engine::QuantizerFactory::with_element_formats(format::Registry::builtin());
  engine::GemmFactory gemms = engine::GemmFactory::builtin();
  experiment::Toolbox tools;

  explicit Fixture(const std::string& name) : scratch(name) {
    tools.quantizers = &quantizers;
    tools.gemms = &gemms;
    tools.search_dirs = {test::source_path("")};
  }

  fs::path write(const std::string& file, const std::string& text) const {
    std::ofstream(dir / file) << text;
    return dir / file;
  }

  std::string experiment_text(int max_tokens = 48) const {
    return "name = \"t\"\n[source]\nmodel = \"" + test::source_path("data/models/stories260K/model.h5") +
           "\"\ntext = \"" + test::source_path("data/models/stories260K/paragraph.txt") +
           "\"\nmax_tokens = " + std::to_string(max_tokens) +
           "\n[options]\nattribution = true\n"
           "[[plan]]\nlabel = \"ref\"\nplan = \"fp32\"\n"
           "[[plan]]\nlabel = \"bf16-weights\"\n[plan.roles]\nweights = \"bf16\"\n"
           "[grid]\nformats = [\"fp8_e4m3\"]\nroles = [\"weights\", \"linear_input\"]\n";
  }
};

TEST_CASE("a small sweep writes every output and agrees with a direct evaluation", "[experiment][unit]") {
  Fixture fx("lpemu_sweep_small");
  const auto exp = experiment::load_experiment(fx.write("e.toml", fx.experiment_text()));
  REQUIRE(exp.plans.size() == 3);
  CHECK(exp.plans[2].label == "fp8_e4m3");
  experiment::SweepOptions opt;
  opt.out = fx.dir / "out";
  std::vector<experiment::Progress> progress;
  opt.on_progress = [&](const experiment::Progress& p) { progress.push_back(p); };
  const auto files = experiment::run_sweep(exp, fx.tools, opt);
  REQUIRE(progress.size() == 3);
  CHECK(progress.back().done == 3);
  for (const auto& f : {files.results_h5, files.results_csv, files.report_md}) CHECK(fs::file_size(f) > 0);
  std::vector<std::string> plots;
  for (const auto& f : files.plots) plots.push_back(f.filename().string());
  CHECK(plots == std::vector<std::string>{"kl_vs_bits.svg", "residual_sqnr.svg", "attribution_heatmap.svg",
                                          "attribution_bars.svg"});
  CHECK(slurp(files.plots[0]).rfind("<svg", 0) == 0);
  CHECK(fs::file_size(files.report_html) > 0);

  // The fp8 plan's numbers equal a direct experiment::evaluate of the same plan.
  const engine::Model model = engine::load_model(test::source_path("data/models/stories260K/model.h5"));
  const auto plan = engine::parse_plan_toml(exp.plans[2].inline_toml, "grid", fx.quantizers, fx.gemms);
  std::vector<int> tokens =
      model.tokenizer.encode(slurp(test::source_path("data/models/stories260K/paragraph.txt")));
  tokens.resize(48);
  const auto direct =
      experiment::evaluate(model, plan, engine::builtin_plan("fp32"), tokens, fx.quantizers, fx.gemms);
  const auto stored = experiment::load_plan_result(fx.dir / "out" / "plans" / "0002.h5");
  CHECK(stored.eval.mean_kl == direct.mean_kl);
  CHECK(stored.eval.perplexity == direct.perplexity);
  CHECK(stored.eval.kl == direct.kl);
  CHECK(direct.mean_kl > 0);
  CHECK_FALSE(stored.attribution.empty());
  // The reference plan against itself has no error.
  CHECK(experiment::load_plan_result(fx.dir / "out" / "plans" / "0000.h5").eval.mean_kl == 0.0);

  const std::string csv = slurp(files.results_csv);
  CHECK_THAT(csv, Catch::StartsWith("plan_index,plan,metric,value\n"));
  CHECK_THAT(csv, Catch::Contains("2,fp8_e4m3,mean_kl,"));
  const std::string md = slurp(files.report_md);
  CHECK_THAT(md, Catch::Contains("| 1 | ref |"));
  CHECK_THAT(md, Catch::Contains("Most damaging quantisation points"));
  const io::H5File h5 = io::H5File::open(files.results_h5);
  CHECK(h5.attr_int("/", "n_plans") == 3);
  CHECK(h5.read_doubles("/plans/0002/kl") == direct.kl);
}

TEST_CASE("layer attribution quantises one point in one layer alone, for the plans named",
          "[experiment][unit]") {
  Fixture fx("lpemu_sweep_layers");
  std::string text = fx.experiment_text(24);
  text.replace(text.find("attribution = true\n"), 19,
               "attribution = true\nlayer_attribution = [\"bf16-weights\"]\n");
  const auto exp = experiment::load_experiment(fx.write("e.toml", text));
  experiment::SweepOptions opt;
  opt.out = fx.dir / "out";
  const auto files = experiment::run_sweep(exp, fx.tools, opt);
  const auto stored = experiment::load_plan_result(fx.dir / "out" / "plans" / "0001.h5");
  const engine::Model model = engine::load_model(test::source_path("data/models/stories260K/model.h5"));
  const int n = model.config.n_layers;
  // bf16 weights in every block: one entry per block, the LM head's weights are another role.
  REQUIRE(stored.layer_attribution.size() == static_cast<std::size_t>(n));
  std::vector<int> tokens =
      model.tokenizer.encode(slurp(test::source_path("data/models/stories260K/paragraph.txt")));
  tokens.resize(24);
  for (int l = 0; l < n; ++l) {
    const auto& a = stored.layer_attribution[static_cast<std::size_t>(l)];
    CHECK(a.role == "weights");
    CHECK(a.layer == l);
    // The same number from a hand-written plan: bf16 weights in block l only.
    const auto only = engine::parse_plan_toml(
        "name = \"only\"\n[[override]]\nlayers = [" + std::to_string(l) + "]\nweights = \"bf16\"\n", "test",
        fx.quantizers, fx.gemms);
    const auto direct =
        experiment::evaluate(model, only, engine::builtin_plan("fp32"), tokens, fx.quantizers, fx.gemms);
    CHECK(a.mean_kl == direct.mean_kl);
    CHECK(a.mean_kl > 0);
  }
  // Only the plan named gets it; its figures are written and embedded in report.html.
  CHECK(experiment::load_plan_result(fx.dir / "out" / "plans" / "0002.h5").layer_attribution.empty());
  std::vector<std::string> plots;
  for (const auto& f : files.plots) plots.push_back(f.filename().string());
  CHECK(std::count(plots.begin(), plots.end(), "attribution_layers_0001.svg") == 1);
  CHECK(std::count(plots.begin(), plots.end(), "attribution_layers_bars_0001.svg") == 1);
  CHECK(std::count(plots.begin(), plots.end(), "attribution_layers_0002.svg") == 0);
  const std::string html = slurp(files.report_html);
  CHECK_THAT(html, Catch::Contains("id=\"attribution_layers_0001\""));
  CHECK_THAT(html, Catch::Contains("<details>"));
  CHECK_THAT(slurp(files.results_csv),
             Catch::Contains("1,bf16-weights,layer_attribution_mean_kl/weights/0,"));

  // A label that is not a plan of the experiment is refused, naming the field and the labels.
  text.replace(text.find("[\"bf16-weights\"]"), 16, "[\"nope\"]");
  CHECK_THROWS_WITH(experiment::load_experiment(fx.write("bad.toml", text)),
                    Catch::Contains("options.layer_attribution") && Catch::Contains("\"nope\"") &&
                        Catch::Contains("ref, bf16-weights, fp8_e4m3"));
}

TEST_CASE("a sweep resumes, and refuses another experiment's results", "[experiment][unit]") {
  Fixture fx("lpemu_sweep_resume");
  const auto exp = experiment::load_experiment(fx.write("e.toml", fx.experiment_text(24)));
  experiment::SweepOptions opt;
  opt.out = fx.dir / "out";
  experiment::run_sweep(exp, fx.tools, opt);
  const std::string csv1 = slurp(fx.dir / "out" / "results.csv");
  std::size_t resumed = 0;
  opt.on_progress = [&](const experiment::Progress& p) { resumed += p.resumed ? 1 : 0; };
  experiment::run_sweep(exp, fx.tools, opt);
  CHECK(resumed == 3);
  CHECK(slurp(fx.dir / "out" / "results.csv") == csv1);

  const auto edited = experiment::load_experiment(fx.write("e2.toml", fx.experiment_text(25)));
  CHECK_THROWS_WITH(experiment::run_sweep(edited, fx.tools, opt), Catch::Contains("different experiment"));
}

TEST_CASE("shards merged give the single-run results", "[experiment][unit]") {
  Fixture fx("lpemu_sweep_shards");
  const auto exp = experiment::load_experiment(fx.write("e.toml", fx.experiment_text(24)));
  experiment::SweepOptions opt;
  opt.out = fx.dir / "single";
  const auto single = experiment::run_sweep(exp, fx.tools, opt);
  for (int s = 0; s < 2; ++s) {
    opt.out = fx.dir / ("shard" + std::to_string(s));
    opt.shard = s;
    opt.shards = 2;
    const auto part = experiment::run_sweep(exp, fx.tools, opt);
    CHECK(part.report_md.empty());  // a shard writes no summary
  }
  const auto merged = experiment::merge_sweeps({fx.dir / "shard0", fx.dir / "shard1"}, fx.dir / "merged");
  CHECK(slurp(merged.results_csv) == slurp(single.results_csv));
  CHECK(slurp(merged.report_md) == slurp(single.report_md));
  CHECK_THROWS_WITH(experiment::merge_sweeps({fx.dir / "shard0"}, fx.dir / "m2"),
                    Catch::Contains("in none of the"));
  opt.shard = 2;
  CHECK_THROWS_WITH(experiment::run_sweep(exp, fx.tools, opt), Catch::Contains("expected I/N"));
}

TEST_CASE("a sweep with a [cost] table prices each plan and marks the Pareto front", "[experiment][unit]") {
  Fixture fx("lpemu_sweep_cost");
  cost::Catalog catalog(format::Registry::builtin());
  fx.tools.costs = &catalog;
  const std::string text =
      "name = \"c\"\n[source]\nmodel = \"" + test::source_path("data/models/stories260K/model.h5") +
      "\"\ntext = \"" + test::source_path("data/models/stories260K/paragraph.txt") +
      "\"\nmax_tokens = 32\n[cost]\ntarget = \"h100_sxm\"\nshape = \"llama3_8b\"\nbatch = 8\ncontext = 4096\n"
      "[grid]\nformats = [\"bf16\", \"fp8_e4m3\"]\n";
  const auto exp = experiment::load_experiment(fx.write("e.toml", text));
  experiment::SweepOptions opt;
  opt.out = fx.dir / "out";
  const auto files = experiment::run_sweep(exp, fx.tools, opt);
  const auto bf16 = experiment::load_plan_result(fx.dir / "out" / "plans" / "0000.h5");
  const auto fp8 = experiment::load_plan_result(fx.dir / "out" / "plans" / "0001.h5");
  // The same numbers as pricing the plan file the sweep wrote beside its result (what `lpemu cost
  // --plan out/plans/0000.toml` prices).
  const auto plan0 =
      engine::load_plan((fx.dir / "out" / "plans" / "0000.toml").string(), fx.quantizers, fx.gemms);
  const auto priced = experiment::price_plan(plan0, catalog.shape("llama3_8b"), catalog.target("h100_sxm"),
                                             catalog, cost::Phase::decode, 8, 4096);
  CHECK(bf16.cost.tokens_per_s == priced.roofline.tokens_per_s());
  CHECK(bf16.cost.joules_per_token == priced.roofline.energy_per_token());
  CHECK(bf16.cost.mac_area_rel_bf16 == priced.mac_area_rel_bf16);
  CHECK(bf16.weight_bits == priced.workload.bits_per_weight);
  CHECK(bf16.weight_bits == 16);
  CHECK_THAT(bf16.cost.computed, Catch::Contains("bf16 x bf16 on h100_bf16_fp32"));
  // Decode at batch 8 is memory-bound: half the weight bytes, more tokens per second.
  CHECK(fp8.cost.tokens_per_s > bf16.cost.tokens_per_s);
  CHECK(fp8.cost.mac_area_rel_bf16 < 1.0);
  // The per-op breakdown stored with the plan is the priced workload's, op by op.
  REQUIRE(bf16.cost.ops.size() == priced.workload.ops.size());
  for (std::size_t i = 0; i < bf16.cost.ops.size(); ++i) {
    const auto& a = bf16.cost.ops[i];
    const auto& b = priced.workload.ops[i];
    INFO(b.name);
    CHECK(a.name == b.name);
    CHECK(a.count == b.count);
    CHECK(a.time_s == b.time_s);
    CHECK(a.bytes == b.bytes);
    CHECK(a.energy_j == b.energy_j);
    CHECK(a.compute_bound == b.compute_bound);
  }
  // 4 scatter plots + the residual plot, then one per-op cost chart per plan.
  REQUIRE(files.plots.size() == 7);
  CHECK(files.plots[5].filename() == "cost_ops_0000.svg");
  CHECK(files.plots[6].filename() == "cost_ops_0001.svg");
  CHECK_THAT(slurp(files.report_html), Catch::Contains("Per plan: per-op cost"));
  CHECK(files.plots[1].filename() == "kl_vs_cost.svg");
  CHECK(files.plots[2].filename() == "kl_vs_tokens_per_s.svg");
  CHECK(files.plots[3].filename() == "kl_vs_energy.svg");
  CHECK_THAT(slurp(files.plots[1]), Catch::Contains("Pareto front"));
  CHECK_THAT(slurp(files.results_csv), Catch::Contains("1,fp8_e4m3,cost_tokens_per_s,"));
  // Both are on the front: fp8 is cheaper, bf16 is more accurate.
  const std::string md = slurp(files.report_md);
  std::size_t stars = 0;
  for (auto at = md.find("| \u2605 |"); at != std::string::npos; at = md.find("| \u2605 |", at + 1)) ++stars;
  CHECK(stars == 2);
  CHECK_THAT(md, Catch::Contains("tokens/s | J/token | MAC area vs bf16 | Pareto |"));
}

TEST_CASE("cluster keys of [cost] need a system, and search needs devices", "[experiment][unit]") {
  Fixture fx("lpemu_sweep_cluster_keys");
  const std::string head = "name = \"x\"\n[source]\ntext = \"" +
                           test::source_path("data/models/stories260K/paragraph.txt") +
                           "\"\n[[plan]]\nplan = \"fp32\"\n[cost]\n";
  const auto parse = [&](const std::string& cost) {
    return experiment::parse_experiment_toml(head + cost, fx.dir / "k.toml");
  };
  CHECK_THROWS_WITH(
      parse("target = \"h100_sxm\"\ndevices = 8\n"),
      Catch::Contains("k.toml:8: field 'cost.devices' = 8: expected cost.system to be set as well"));
  CHECK_THROWS_WITH(parse("target = \"h100_sxm\"\nphase = \"train\"\n"),
                    Catch::Contains("cost.phase") && Catch::Contains("\"train\" needs cost.system"));
  CHECK_THROWS_WITH(parse("system = \"dgx_h100\"\nphase = \"train\"\nsearch = true\n"),
                    Catch::Contains("cost.search") && Catch::Contains("cost.devices"));
  CHECK_THROWS_WITH(parse("system = \"dgx_h100\"\nrecompute = \"most\"\n"),
                    Catch::Contains("cost.recompute") && Catch::Contains("none, selective or full"));
  const auto ok = parse(
      "system = \"dgx_h100\"\nshape = \"llama3_70b\"\nphase = \"train\"\ndevices = 1024\n"
      "parallel = \"tp=8,pp=4\"\nglobal_batch = 256\ncomm = \"fp8_e4m3\"\n");
  CHECK(ok.cost.target.empty());  // the system's device
  CHECK(ok.cost.cluster.devices == 1024);
  CHECK(ok.cost.cluster.global_batch == 256);
  CHECK(ok.cost.cluster.comm == "fp8_e4m3");
  // Cluster keys are part of the fingerprint: another job is another experiment.
  CHECK(ok.fingerprint() !=
        parse("system = \"dgx_h100\"\nshape = \"llama3_70b\"\nphase = \"train\"\ndevices = 512\n"
              "parallel = \"tp=8,pp=4\"\nglobal_batch = 256\ncomm = \"fp8_e4m3\"\n")
            .fingerprint());
}

TEST_CASE("bad experiment files get clear errors", "[experiment][unit]") {
  Fixture fx("lpemu_sweep_bad");
  const std::string text = test::source_path("data/models/stories260K/paragraph.txt");
  CHECK_THROWS_WITH(
      experiment::parse_experiment_toml(
          "name = \"x\"\n[source]\ntext = \"/nope.txt\"\n[[plan]]\nplan=\"fp32\"\n", fx.dir / "a.toml"),
      Catch::Contains(
          "a.toml:3: field 'source.text' = \"/nope.txt\": expected an existing regular text file"));
  CHECK_THROWS_WITH(
      experiment::parse_experiment_toml("name = \"x\"\nsauce = 1\n", fx.dir / "b.toml"),
      Catch::Contains("b.toml:2: field 'sauce' = 1: expected a known key (cost, description, grid,"));
  CHECK_THROWS_WITH(experiment::parse_experiment_toml("name = \"x\"\n[source]\ntext = \"" + text + "\"\n",
                                                      fx.dir / "c.toml"),
                    Catch::Contains("expected at least one [[plan]] or a [grid]"));
  CHECK_THROWS_WITH(
      experiment::parse_experiment_toml("name = \"x\"\n[source]\ntext = \"" + text +
                                            "\"\n[[plan]]\nplan = \"fp32\"\n[[plan]]\nplan = \"fp32\"\n",
                                        fx.dir / "d.toml"),
      Catch::Contains("expected a label not used before"));
  CHECK_THROWS_WITH(
      experiment::parse_experiment_toml("name = \"x\"\n[source]\ntext = \"" + text +
                                            "\"\n[[plan]]\nplan = \"fp32\"\n[plan.roles]\nweights=\"bf16\"\n",
                                        fx.dir / "e.toml"),
      Catch::Contains("not both"));
  // An unknown format inside an inline plan is reported when the plan is built.
  const auto exp = experiment::parse_experiment_toml(
      "name = \"x\"\n[source]\nmodel = \"" + test::source_path("data/models/stories260K/model.h5") +
          "\"\ntext = \"" + text +
          "\"\nmax_tokens = 8\n[[plan]]\nlabel = \"p\"\n[plan.roles]\nweights = \"fp9_e4m4\"\n",
      fx.dir / "f.toml");
  experiment::SweepOptions opt;
  opt.out = fx.dir / "out";
  CHECK_THROWS_WITH(experiment::run_sweep(exp, fx.tools, opt), Catch::Contains("fp9_e4m4"));
}

}  // namespace
