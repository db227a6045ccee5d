#include "lpemu/experiment/experiment.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "io/toml.hpp"

#include "io/toml_util.hpp"
#include "lpemu/cost/parallel.hpp"
#include "lpemu/cost/workload.hpp"
#include "lpemu/detail/named_registry.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/sha256.hpp"

namespace lpemu::experiment {
namespace {

namespace fs = std::filesystem;

using io::detail::TableReader;

fs::path resolve_input(const fs::path& origin, const std::string& p) {
  if (p.empty()) return {};
  const fs::path path(p);
  return path.is_absolute() ? path : (origin.parent_path() / path).lexically_normal();
}

}  // namespace

std::string datapath_variant_name(const std::string& base, const DatapathVariant& v) {
  std::string n = base;
  if (v.fused_terms >= 0) n += ".n" + std::to_string(v.fused_terms);
  if (v.fraction_bits >= 0) n += ".f" + std::to_string(v.fraction_bits);
  if (!v.accumulator.empty()) n += ".acc_" + v.accumulator;
  if (v.promote_every >= 0) n += ".p" + std::to_string(v.promote_every);
  return n;
}

std::string Experiment::fingerprint() const {
  std::ostringstream s;
  s << "cost=" << cost.target << "|" << cost.shape << "|" << cost.cluster.phase << "|" << cost.cluster.batch
    << "|" << cost.cluster.context;
  if (!cost.core.empty()) s << "|core=" << cost.core;
  if (const ClusterSetup& c = cost.cluster; !c.system.empty()) {
    s << "|" << c.system << "|" << c.devices << "|" << c.parallel << "|" << c.search << "|" << c.global_batch
      << "|" << c.micro_batch << "|" << c.recompute << "|" << c.gradients << "|" << c.optimizer_states << "|"
      << c.master_weights << "|" << c.comm;
  }
  s << "\nmodel=" << model << "\nreference=" << reference << "\nmax_tokens=" << max_tokens
    << "\nattribution=" << attribution << "\n";
  if (layer_attribution_all || !layer_attribution.empty()) {
    s << "layer_attribution=" << layer_attribution_all;
    for (const auto& l : layer_attribution) s << "|" << l;
    s << "\n";
  }
  if (!text.empty() && fs::exists(text)) s << "text=" << io::sha256_file(text) << "\n";
  if (!tokens.empty() && fs::exists(tokens)) s << "tokens=" << io::sha256_file(tokens) << "\n";
  if (!activations.empty() && fs::exists(activations))
    s << "activations=" << io::sha256_file(activations) << "\n";
  if (train) {
    s << "train=" << train->shape << "|" << train->steps << "|" << train->batch << "|" << train->seq << "|"
      << train->warmup << "|" << train->optimizer << "|" << train->lr << "|" << train->clip_norm << "|"
      << train->weight_decay << "|" << train->reference;
    for (const auto v : train->seeds) s << "|" << v;
    s << "\n";
  }
  for (const auto& p : plans) s << "plan " << p.label << "|" << p.plan << "|" << p.inline_toml << "\n";
  return io::sha256_hex(s.str());
}

Experiment parse_experiment_toml(std::string_view text, const fs::path& origin) {
  const std::string file = origin.string();
  const toml::table t = io::detail::parse(text, file);
  const TableReader top(t, file);
  top.only({"name", "description", "source", "output", "options", "cost", "plan", "grid", "train"});
  Experiment x;
  x.origin = origin;
  x.name = top.required_str("name");
  x.description = top.str("description");
  if (!top.has("source")) top.fail("source", "a [source] table with model and text");
  const TableReader src = top.sub("source");
  src.only({"model", "text", "tokens", "activations", "max_tokens"});
  x.model = src.str("model", "stories260K");
  if (src.has("tokens")) {
    // Token ids instead of a text, for any tokenizer the user trusts.
    if (src.has("text")) src.fail("tokens", "(with source.text)", "text or tokens, not both");
    x.tokens = resolve_input(origin, src.required_str("tokens"));
    if (!fs::is_regular_file(x.tokens)) {  // a device or FIFO would hang the fingerprint's hash
      src.fail("tokens", '"' + x.tokens.string() + '"', "an existing .npy file of token ids");
    }
  } else {
    x.text = resolve_input(origin, src.required_str("text"));
    if (!fs::is_regular_file(x.text)) {  // a device or FIFO (/dev/zero) would hang the fingerprint's hash
      src.fail("text", '"' + x.text.string() + '"', "an existing regular text file");
    }
  }
  x.activations = resolve_input(origin, src.str("activations"));
  if (!x.activations.empty() && !fs::is_regular_file(x.activations)) {
    src.fail("activations", '"' + x.activations.string() + '"', "an existing HDF5 file");
  }
  x.max_tokens =
      static_cast<int>(src.integer("max_tokens", 0, 0, std::numeric_limits<int>::max(), "an integer ≥ 0"));
  const TableReader out = top.sub("output");
  out.only({"dir"});
  x.out_dir = out.str("dir");
  if (x.out_dir.empty()) x.out_dir = fs::path("out") / x.name;
  const TableReader opt = top.sub("options");
  opt.only({"reference", "attribution", "layer_attribution"});
  x.reference = opt.str("reference", "fp32");
  x.attribution = opt.boolean("attribution", false);
  if (const toml::node* n = opt.node("layer_attribution")) {
    const char* want = "true, false or an array of plan labels";
    if (n->is_boolean()) {
      x.layer_attribution_all = *n->value<bool>();
    } else if (n->is_array()) {
      x.layer_attribution = opt.strings("layer_attribution");
    } else {
      opt.fail("layer_attribution", want);
    }
  }
  if (top.has("cost")) {
    const TableReader c = top.sub("cost");
    c.only({"target", "shape", "core", "phase", "batch", "context", "system", "devices", "parallel", "search",
            "global_batch", "micro_batch", "recompute", "gradients", "optimizer_states", "master_weights",
            "comm"});
    ClusterSetup& cl = x.cost.cluster;
    cl.system = c.str("system");
    // With a system, its device is the target unless one is named.
    x.cost.target = cl.system.empty() ? c.required_str("target") : c.str("target");
    x.cost.shape = c.str("shape", x.model);
    x.cost.core = c.str("core");
    cl.phase = c.str("phase", "decode");
    const auto job_phase = [](const std::string& name) -> std::optional<cost::JobPhase> {
      try {
        return cost::parse_job_phase(name);
      } catch (const SpecError&) {
        return std::nullopt;
      }
    };
    if (const auto ph = job_phase(cl.phase); !ph || (*ph == cost::JobPhase::train && cl.system.empty())) {
      c.fail("phase", cl.system.empty() ? "\"decode\" or \"prefill\" (\"train\" needs cost.system)"
                                        : "\"decode\", \"prefill\" or \"train\"");
    }
    cl.parallel = c.str("parallel");
    cl.recompute = c.str("recompute", "selective");
    try {
      cost::parse_recompute(cl.recompute);
    } catch (const SpecError&) {
      c.fail("recompute", "none, selective or full");
    }
    cl.gradients = c.str("gradients", "fp32");
    cl.optimizer_states = c.str("optimizer_states", "fp32");
    cl.master_weights = c.str("master_weights", "fp32");
    cl.comm = c.str("comm");
    cl.search = c.boolean("search", false);
    for (const char* key : {"devices", "parallel", "search", "global_batch", "micro_batch", "recompute",
                            "gradients", "optimizer_states", "master_weights", "comm"}) {
      if (cl.system.empty() && c.has(key)) c.fail(key, "cost.system to be set as well");
    }
    constexpr long long kMax = std::numeric_limits<std::int64_t>::max();
    cl.batch = c.integer("batch", cl.batch, 1, kMax, "an integer >= 1");
    cl.context = c.integer("context", cl.context, 1, kMax, "an integer >= 1");
    cl.devices = c.integer("devices", cl.devices, 1, kMax, "an integer >= 1");
    cl.global_batch = c.integer("global_batch", cl.global_batch, 1, kMax, "an integer >= 1");
    cl.micro_batch = c.integer("micro_batch", cl.micro_batch, 1, kMax, "an integer >= 1");
    if (cl.search && cl.devices < 1) c.fail("search", "true", "cost.devices: the devices to search on");
    // The layout is checked here, before any plan runs, as pricing will read it: its syntax and
    // ranges, and (without a search) the device count it implies.
    if (!cl.parallel.empty() || c.has("devices")) {
      try {
        const std::string layout = cl.parallel.empty() ? "tp=1" : cl.parallel;
        const bool train = cl.phase == "train";
        const cost::Parallel par =
            cost::parse_parallel(layout, train && !cl.search && c.has("devices") ? cl.devices : 0);
        if (!train && c.has("devices") && par.devices() != cl.devices) {
          throw SpecError("parallel " + par.str() + " uses " + std::to_string(par.devices()) +
                          " devices; cost.devices is " + std::to_string(cl.devices));
        }
      } catch (const SpecError& e) {
        c.fail(cl.parallel.empty() ? "devices" : "parallel",
               std::string("a layout that pricing can use (") + e.what() + ")");
      }
    }
  }
  if (top.has("train")) {
    const TableReader tr = top.sub("train");
    tr.only({"shape", "steps", "batch", "seq", "warmup", "optimizer", "lr", "clip_norm", "weight_decay",
             "seeds", "reference", "val_fraction", "eval_every", "sqnr_every"});
    TrainSetup ts;
    ts.shape = tr.required_str("shape");
    constexpr int kMaxInt = std::numeric_limits<int>::max();
    ts.steps = static_cast<int>(tr.integer("steps", ts.steps, 1, kMaxInt, "an integer >= 1"));
    ts.batch = static_cast<int>(tr.integer("batch", ts.batch, 1, kMaxInt, "an integer >= 1"));
    ts.seq = static_cast<int>(tr.integer("seq", ts.seq, 1, kMaxInt, "an integer >= 1"));
    ts.warmup = static_cast<int>(tr.integer("warmup", ts.warmup, 0, kMaxInt, "an integer >= 0"));
    ts.optimizer = tr.str("optimizer", ts.optimizer);
    if (ts.optimizer != "sgd" && ts.optimizer != "adamw") tr.fail("optimizer", "\"sgd\" or \"adamw\"");
    ts.lr = tr.number("lr", ts.lr, 0.0, 1e9, "a learning rate >= 0");
    ts.clip_norm = tr.number("clip_norm", ts.clip_norm, 0.0, 1e300, "a norm >= 0 (0: no clipping)");
    ts.weight_decay = tr.number("weight_decay", ts.weight_decay, 0.0, 1e9, "a weight decay >= 0");
    if (tr.has("seeds"))
      ts.seeds = tr.integers<std::uint64_t>("seeds", 0, std::numeric_limits<std::int64_t>::max());
    if (ts.seeds.empty()) tr.fail("seeds", "a non-empty array of seeds");
    ts.reference = tr.str("reference", "fp32");
    ts.val_fraction =
        tr.number("val_fraction", ts.val_fraction, 0.0, 0.5, "a share of the windows in [0, 0.5]");
    ts.eval_every = static_cast<int>(tr.integer("eval_every", ts.eval_every, 1, kMaxInt, "an integer >= 1"));
    ts.sqnr_every = static_cast<int>(tr.integer("sqnr_every", ts.sqnr_every, 0, kMaxInt, "an integer >= 0"));
    if (x.tokens.empty())
      src.fail("tokens", "(none)", "source.tokens: the training tokens (.npy) of a [train] experiment");
    x.train = std::move(ts);
  }
  std::set<std::string> labels;
  const auto add_plan = [&](PlanSpec p, const toml::node* n) {
    if (!labels.insert(p.label).second)
      io::detail::fail(file, n, "plan.label", '"' + p.label + '"', "a label not used before");
    x.plans.push_back(std::move(p));
  };
  for (const TableReader& pr : top.tables("plan")) {
    PlanSpec p;
    p.plan = pr.str("plan");
    toml::table body = *pr.table();
    body.erase("label");
    body.erase("plan");
    if (p.plan.empty() == body.empty()) {
      io::detail::fail(file, pr.table(), "plan", "a table",
                       "either plan = \"NAME or file\" or an inline plan ([plan.roles], ...), not both");
    }
    p.label = pr.str("label", p.plan);
    if (p.label.empty()) pr.fail("label", "a label for an inline plan");
    if (!body.empty()) {
      std::ostringstream s;
      s << body;
      p.inline_toml = engine::named_plan_toml(s.str(), file, p.label);
    }
    add_plan(std::move(p), pr.table());
  }
  if (top.has("grid")) {
    const TableReader gr = top.sub("grid");
    const toml::table* g = gr.table();
    gr.only({"formats", "roles", "gemms", "native", "others", "keep", "keep_format", "keep_gemm", "label",
             "datapath"});
    const auto formats = gr.strings("formats");
    auto roles = gr.strings("roles");
    auto gemms = gr.strings("gemms");
    const auto keep = gr.strings("keep");  // e.g. ["first", "last", "head"]
    const std::string keep_format = gr.str("keep_format", "bf16");
    const std::string keep_gemm = gr.str("keep_gemm", "eigen");
    if (formats.empty()) gr.fail("formats", "a non-empty array of format names");
    if (roles.empty()) roles = {"weights", "linear_input"};
    if (gemms.empty()) gemms = {"eigen"};
    // [grid.native]: format -> the datapath(s) that would run it, beside `gemms`.
    std::map<std::string, std::vector<std::string>> native;
    if (gr.has("native")) {
      if (!gr.node("native")->is_table())
        gr.fail("native", "a table of format = \"datapath\" (or [\"d1\", ...])");
      const TableReader nt = gr.sub("native");
      nt.only({formats.begin(), formats.end()}, "a format listed in grid.formats");
      for (const auto& [k, v] : *nt.table()) {
        const std::string f(k.str());
        if (v.is_string()) {
          native[f].push_back(*v.value<std::string>());
        } else {
          native[f] = nt.strings(f);
        }
      }
    }
    // [grid.others]: role = format, applied to every generated plan (e.g. attention internals).
    std::vector<std::pair<std::string, std::string>> others;
    if (gr.has("others")) {
      if (!gr.node("others")->is_table()) gr.fail("others", "a table of role = \"format\"");
      const TableReader ot = gr.sub("others");
      for (const auto& [k, v] : *ot.table()) {
        if (!v.is_string()) ot.fail(k.str(), "a format name");
        others.emplace_back(std::string(k.str()), *v.value<std::string>());
      }
    }
    std::vector<std::string> keep_layers;
    bool keep_head = false;
    for (const auto& k : keep) {
      if (k == "head") {
        keep_head = true;  // the LM head and its input in keep_format too
      } else {
        keep_layers.push_back(k);
      }
    }
    // Role and layer names become the plan's own types here; format and datapath names are checked
    // where the plan is read (parse_plan_toml, at sweep time).
    const auto role_list = [&](const std::vector<std::string>& names, std::string_view key) {
      std::vector<engine::Role> list;
      for (const auto& n : names) {
        try {
          list.push_back(engine::parse_role(n));
        } catch (const SpecError& e) {
          gr.fail(key, '"' + n + '"', std::string("a role: ") + e.what());
        }
      }
      return list;
    };
    const std::vector<engine::Role> grid_roles = role_list(roles, "roles");
    std::vector<std::pair<engine::Role, std::string>> other_roles;
    for (const auto& [r, of] : others) {
      try {
        other_roles.emplace_back(engine::parse_role(r), of);
      } catch (const SpecError& e) {
        gr.sub("others").fail(r, '"' + of + '"', std::string("a role: ") + e.what());
      }
    }
    std::vector<int> keep_indices;
    for (const auto& k : keep_layers) {
      try {
        keep_indices.push_back(engine::parse_layer(k));
      } catch (const SpecError& e) {
        gr.fail("keep", '"' + k + '"', "\"first\", \"last\", \"head\" or a layer index");
      }
    }
    const auto add = [&](const std::string& f, const std::string& gemm) {
      PlanSpec p;
      p.label = f + (gemm == "eigen" ? std::string() : "+" + gemm);
      engine::PrecisionPlan plan;
      plan.name = p.label;
      for (const auto& [r, of] : other_roles) plan = engine::with_role_format(std::move(plan), r, of);
      for (const auto r : grid_roles) plan = engine::with_role_format(std::move(plan), r, f);
      if (keep_head) {
        plan = engine::with_role_format(std::move(plan), engine::Role::lm_head, keep_format);
        plan = engine::with_role_format(std::move(plan), engine::Role::lm_head_input, keep_format);
      }
      // The datapath runs the blocks' linear layers (the LM head stays on fp32 accumulation).
      if (gemm != "eigen") plan = engine::with_block_gemm(std::move(plan), gemm);
      if (!keep_indices.empty()) {
        plan = engine::with_layers(std::move(plan), keep_indices, grid_roles, keep_format,
                                   gemm != "eigen" ? std::optional<std::string>(keep_gemm) : std::nullopt);
      }
      p.inline_toml = engine::to_toml(plan);
      add_plan(std::move(p), g);
    };
    for (const auto& gemm : gemms) {
      for (const auto& f : formats) add(f, gemm);
    }
    for (const auto& f : formats) {
      const auto it = native.find(f);
      if (it == native.end()) continue;
      for (const auto& d : it->second) {
        if (std::find(gemms.begin(), gemms.end(), d) == gemms.end()) add(f, d);
      }
    }
    if (gr.has("datapath")) {
      if (!gr.node("datapath")->is_table()) gr.fail("datapath", "a table [grid.datapath]");
      const TableReader dr = gr.sub("datapath");
      const toml::table* dt = dr.table();
      dr.only({"base", "fused_terms", "fraction_bits", "accumulator", "promote_every", "formats"});
      DatapathStudy st;
      st.base = dr.required_str("base");
      st.fused_terms = dr.integers("fused_terms", 1, 64);
      st.fraction_bits = dr.integers("fraction_bits", 0, 100);
      st.accumulator = dr.strings("accumulator");
      st.promote_every = dr.integers("promote_every", 0, 1 << 24);
      st.formats = dr.strings("formats");
      if (st.formats.empty()) st.formats = formats;
      if (st.fused_terms.empty() && st.fraction_bits.empty() && st.accumulator.empty() &&
          st.promote_every.empty()) {
        gr.fail("datapath", "(no axis)",
                "at least one of fused_terms, fraction_bits, accumulator, promote_every");
      }
      const auto axis = [](const auto& v, auto none) {
        return v.empty() ? std::vector<decltype(none)>{none} : v;
      };
      for (const int nt : axis(st.fused_terms, -1)) {
        for (const int fb : axis(st.fraction_bits, -1)) {
          for (const std::string& acc : axis(st.accumulator, std::string())) {
            for (const int pe : axis(st.promote_every, -1)) {
              DatapathVariant v{"", nt, fb, pe, acc};
              v.name = datapath_variant_name(st.base, v);
              x.variants.push_back(v);
              for (const auto& f : st.formats) add(f, v.name);
            }
          }
        }
      }
      st.origin = file + ":" + std::to_string(dt->source().begin.line);
      x.study = std::move(st);
    }
  }
  if (x.plans.empty()) top.fail("plan", "at least one [[plan]] or a [grid]");
  for (const auto& l : x.layer_attribution) {
    if (labels.count(l) == 0) {
      std::vector<std::string> known;
      for (const auto& p : x.plans) known.push_back(p.label);
      opt.fail("layer_attribution", '"' + l + '"',
               "a plan label of this experiment (" + lpemu::detail::join_names(known) + ")" +
                   lpemu::detail::closest_names_hint(l, known));
    }
  }
  return x;
}

Experiment load_experiment(const fs::path& file) {
  return parse_experiment_toml(lpemu::detail::read_spec_file(file, "experiment"), file);
}

}  // namespace lpemu::experiment
