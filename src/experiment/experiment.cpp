#include "lpemu/experiment/experiment.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "io/toml.hpp"

#include "io/toml_util.hpp"
#include "lpemu/detail/named_registry.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/sha256.hpp"

namespace lpemu::experiment {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const fs::path& origin, const toml::node* n, const std::string& field,
                       const std::string& value, const std::string& expected) {
  io::detail::fail(origin.string(), n, field, value, expected);
}

using io::detail::show;

void check_keys(const toml::table& t, const fs::path& origin, const std::string& where_in,
                const std::set<std::string, std::less<>>& allowed) {
  for (const auto& [k, v] : t) {
    if (allowed.count(k.str()) == 0) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      fail(origin, &v, where_in + std::string(k.str()), show(v), "one of: " + list);
    }
  }
}

std::string get_string(const toml::table& t, const fs::path& origin, const std::string& key,
                       const std::string& prefix, const std::string& def, bool required = false) {
  const toml::node* n = t.get(key);
  if (n == nullptr) {
    if (required) fail(origin, &t, prefix + key, "(missing)", "a string");
    return def;
  }
  if (!n->is_string()) fail(origin, n, prefix + key, show(*n), "a string");
  return *n->value<std::string>();
}

std::vector<std::string> get_strings(const toml::table& t, const fs::path& origin, const std::string& key,
                                     const std::string& prefix) {
  std::vector<std::string> out;
  const toml::node* n = t.get(key);
  if (n == nullptr) return out;
  const toml::array* a = n->as_array();
  if (a == nullptr) fail(origin, n, prefix + key, show(*n), "an array of strings");
  for (const auto& e : *a) {
    if (!e.is_string()) fail(origin, &e, prefix + key, show(e), "an array of strings");
    out.push_back(*e.value<std::string>());
  }
  return out;
}

std::vector<int> get_ints(const toml::table& t, const fs::path& origin, const std::string& key,
                          const std::string& prefix, long lo, long hi) {
  std::vector<int> out;
  const toml::node* n = t.get(key);
  if (n == nullptr) return out;
  const toml::array* a = n->as_array();
  const std::string what = "an array of integers in " + std::to_string(lo) + ".." + std::to_string(hi);
  if (a == nullptr) fail(origin, n, prefix + key, show(*n), what);
  for (const auto& e : *a) {
    const auto v = e.value<std::int64_t>();
    if (!e.is_integer() || !v || *v < lo || *v > hi) fail(origin, &e, prefix + key, show(e), what);
    out.push_back(static_cast<int>(*v));
  }
  return out;
}

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
  s << "cost=" << cost.target << "|" << cost.shape << "|" << cost.phase << "|" << cost.batch << "|"
    << cost.context;
  if (!cost.system.empty()) {
    s << "|" << cost.system << "|" << cost.devices << "|" << cost.parallel << "|" << cost.search << "|"
      << cost.global_batch << "|" << cost.micro_batch << "|" << cost.recompute << "|" << cost.gradients << "|"
      << cost.optimizer_states << "|" << cost.master_weights << "|" << cost.comm;
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
  for (const auto& p : plans) s << "plan " << p.label << "|" << p.plan << "|" << p.inline_toml << "\n";
  return io::sha256_hex(s.str());
}

Experiment parse_experiment_toml(std::string_view text, const fs::path& origin) {
  const toml::table t = io::detail::parse(text, origin.string());
  check_keys(t, origin, "", {"name", "description", "source", "output", "options", "cost", "plan", "grid"});
  Experiment x;
  x.origin = origin;
  x.name = get_string(t, origin, "name", "", "", true);
  x.description = get_string(t, origin, "description", "", "");
  const toml::table* src = t["source"].as_table();
  if (src == nullptr) fail(origin, &t, "source", "(missing)", "a [source] table with model and text");
  check_keys(*src, origin, "source.", {"model", "text", "tokens", "activations", "max_tokens"});
  x.model = get_string(*src, origin, "model", "source.", "stories260K");
  if (src->contains("tokens")) {
    // Token ids instead of a text, for any tokenizer the user trusts.
    if (src->contains("text"))
      fail(origin, src->get("tokens"), "source.tokens", "(with source.text)", "text or tokens, not both");
    x.tokens = resolve_input(origin, get_string(*src, origin, "tokens", "source.", "", true));
    if (!fs::is_regular_file(x.tokens)) {  // a device or FIFO would hang the fingerprint's hash
      fail(origin, src->get("tokens"), "source.tokens", '"' + x.tokens.string() + '"',
           "an existing .npy file of token ids");
    }
  } else {
    x.text = resolve_input(origin, get_string(*src, origin, "text", "source.", "", true));
    if (!fs::is_regular_file(x.text)) {  // a device or FIFO (/dev/zero) would hang the fingerprint's hash
      fail(origin, src->get("text"), "source.text", '"' + x.text.string() + '"',
           "an existing regular text file");
    }
  }
  x.activations = resolve_input(origin, get_string(*src, origin, "activations", "source.", ""));
  if (!x.activations.empty() && !fs::is_regular_file(x.activations)) {
    fail(origin, src->get("activations"), "source.activations", '"' + x.activations.string() + '"',
         "an existing HDF5 file");
  }
  if (const toml::node* n = src->get("max_tokens")) {
    if (!n->is_integer() || *n->value<std::int64_t>() < 0)
      fail(origin, n, "source.max_tokens", show(*n), "an integer ≥ 0");
    x.max_tokens = static_cast<int>(*n->value<std::int64_t>());
  }
  if (const toml::table* o = t["output"].as_table()) {
    check_keys(*o, origin, "output.", {"dir"});
    x.out_dir = get_string(*o, origin, "dir", "output.", "");
  }
  if (x.out_dir.empty()) x.out_dir = fs::path("out") / x.name;
  if (const toml::table* o = t["options"].as_table()) {
    check_keys(*o, origin, "options.", {"reference", "attribution", "layer_attribution"});
    x.reference = get_string(*o, origin, "reference", "options.", "fp32");
    if (const toml::node* n = o->get("attribution")) {
      if (!n->is_boolean()) fail(origin, n, "options.attribution", show(*n), "true or false");
      x.attribution = *n->value<bool>();
    }
    if (const toml::node* n = o->get("layer_attribution")) {
      const char* want = "true, false or an array of plan labels";
      if (n->is_boolean()) {
        x.layer_attribution_all = *n->value<bool>();
      } else if (const toml::array* a = n->as_array()) {
        for (const auto& e : *a) {
          if (!e.is_string()) fail(origin, &e, "options.layer_attribution", show(e), want);
          x.layer_attribution.push_back(*e.value<std::string>());
        }
      } else {
        fail(origin, n, "options.layer_attribution", show(*n), want);
      }
    }
  }
  if (const toml::table* c = t["cost"].as_table()) {
    check_keys(*c, origin, "cost.",
               {"target", "shape", "phase", "batch", "context", "system", "devices", "parallel", "search",
                "global_batch", "micro_batch", "recompute", "gradients", "optimizer_states", "master_weights",
                "comm"});
    x.cost.system = get_string(*c, origin, "system", "cost.", "");
    // With a system, its device is the target unless one is named.
    x.cost.target = get_string(*c, origin, "target", "cost.", "", x.cost.system.empty());
    x.cost.shape = get_string(*c, origin, "shape", "cost.", x.model);
    x.cost.phase = get_string(*c, origin, "phase", "cost.", "decode");
    if (x.cost.phase != "decode" && x.cost.phase != "prefill" &&
        (x.cost.phase != "train" || x.cost.system.empty())) {
      fail(origin, c->get("phase"), "cost.phase", '"' + x.cost.phase + '"',
           x.cost.system.empty() ? "\"decode\" or \"prefill\" (\"train\" needs cost.system)"
                                 : "\"decode\", \"prefill\" or \"train\"");
    }
    x.cost.parallel = get_string(*c, origin, "parallel", "cost.", "");
    x.cost.recompute = get_string(*c, origin, "recompute", "cost.", "selective");
    if (x.cost.recompute != "none" && x.cost.recompute != "selective" && x.cost.recompute != "full") {
      fail(origin, c->get("recompute"), "cost.recompute", '"' + x.cost.recompute + '"',
           "none, selective or full");
    }
    x.cost.gradients = get_string(*c, origin, "gradients", "cost.", "fp32");
    x.cost.optimizer_states = get_string(*c, origin, "optimizer_states", "cost.", "fp32");
    x.cost.master_weights = get_string(*c, origin, "master_weights", "cost.", "fp32");
    x.cost.comm = get_string(*c, origin, "comm", "cost.", "");
    if (const toml::node* n = c->get("search")) {
      if (!n->is_boolean()) fail(origin, n, "cost.search", show(*n), "true or false");
      x.cost.search = *n->value<bool>();
    }
    for (const char* key : {"devices", "parallel", "search", "global_batch", "micro_batch", "recompute",
                            "gradients", "optimizer_states", "master_weights", "comm"}) {
      if (x.cost.system.empty() && c->get(key) != nullptr) {
        fail(origin, c->get(key), std::string("cost.") + key, show(*c->get(key)),
             "cost.system to be set as well");
      }
    }
    for (const auto& [key, dst] : {std::pair<const char*, long long*>{"batch", &x.cost.batch},
                                   {"context", &x.cost.context},
                                   {"devices", &x.cost.devices},
                                   {"global_batch", &x.cost.global_batch},
                                   {"micro_batch", &x.cost.micro_batch}}) {
      if (const toml::node* n = c->get(key)) {
        if (!n->is_integer() || *n->value<std::int64_t>() < 1) {
          fail(origin, n, std::string("cost.") + key, show(*n), "an integer >= 1");
        }
        *dst = *n->value<std::int64_t>();
      }
    }
    if (x.cost.search && x.cost.devices < 1) {
      fail(origin, c->get("search"), "cost.search", "true", "cost.devices: the devices to search on");
    }
  }
  std::set<std::string> labels;
  const auto add_plan = [&](PlanSpec p, const toml::node* n) {
    if (!labels.insert(p.label).second)
      fail(origin, n, "plan.label", '"' + p.label + '"', "a label not used before");
    x.plans.push_back(std::move(p));
  };
  if (const toml::node* pn = t.get("plan")) {
    const toml::array* arr = pn->as_array();
    if (arr == nullptr) fail(origin, pn, "plan", show(*pn), "an array of tables ([[plan]])");
    for (const auto& e : *arr) {
      const toml::table* pt = e.as_table();
      if (pt == nullptr) fail(origin, &e, "plan", show(e), "a table");
      PlanSpec p;
      p.plan = get_string(*pt, origin, "plan", "plan.", "");
      toml::table body = *pt;
      body.erase("label");
      body.erase("plan");
      if (p.plan.empty() == body.empty()) {
        fail(origin, pt, "plan", "a table",
             "either plan = \"NAME or file\" or an inline plan ([plan.roles], ...), not both");
      }
      p.label = get_string(*pt, origin, "label", "plan.", p.plan);
      if (p.label.empty()) fail(origin, pt, "plan.label", "(missing)", "a label for an inline plan");
      if (!body.empty()) {
        body.insert_or_assign("name", p.label);
        std::ostringstream s;
        s << body;
        p.inline_toml = s.str();
      }
      add_plan(std::move(p), pt);
    }
  }
  if (const toml::table* g = t["grid"].as_table()) {
    check_keys(*g, origin, "grid.",
               {"formats", "roles", "gemms", "native", "others", "keep", "keep_format", "keep_gemm", "label",
                "datapath"});
    const auto formats = get_strings(*g, origin, "formats", "grid.");
    auto roles = get_strings(*g, origin, "roles", "grid.");
    auto gemms = get_strings(*g, origin, "gemms", "grid.");
    const auto keep = get_strings(*g, origin, "keep", "grid.");  // e.g. ["first", "last", "head"]
    const std::string keep_format = get_string(*g, origin, "keep_format", "grid.", "bf16");
    const std::string keep_gemm = get_string(*g, origin, "keep_gemm", "grid.", "eigen");
    if (formats.empty()) fail(origin, g, "grid.formats", "(missing)", "a non-empty array of format names");
    if (roles.empty()) roles = {"weights", "linear_input"};
    if (gemms.empty()) gemms = {"eigen"};
    // [grid.native]: format -> the datapath(s) that would run it, beside `gemms`.
    std::map<std::string, std::vector<std::string>> native;
    if (const toml::node* n = g->get("native")) {
      const toml::table* nt = n->as_table();
      if (nt == nullptr)
        fail(origin, n, "grid.native", show(*n), "a table of format = \"datapath\" (or [\"d1\", ...])");
      for (const auto& [k, v] : *nt) {
        const std::string f(k.str());
        if (std::find(formats.begin(), formats.end(), f) == formats.end()) {
          fail(origin, &v, "grid.native." + f, show(v), "a format listed in grid.formats");
        }
        if (v.is_string()) {
          native[f].push_back(*v.value<std::string>());
        } else {
          native[f] = get_strings(*nt, origin, f, "grid.native.");
        }
      }
    }
    // [grid.others]: role = format, applied to every generated plan (e.g. attention internals).
    std::vector<std::pair<std::string, std::string>> others;
    if (const toml::node* n = g->get("others")) {
      const toml::table* ot = n->as_table();
      if (ot == nullptr) fail(origin, n, "grid.others", show(*n), "a table of role = \"format\"");
      for (const auto& [k, v] : *ot) {
        if (!v.is_string()) fail(origin, &v, "grid.others." + std::string(k.str()), show(v), "a format name");
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
    const auto add = [&](const std::string& f, const std::string& gemm) {
      PlanSpec p;
      p.label = f + (gemm == "eigen" ? std::string() : "+" + gemm);
      std::ostringstream s;
      s << "name = \"" << p.label << "\"\n";
      s << "[roles]\n";
      for (const auto& [r, of] : others) s << r << " = \"" << of << "\"\n";
      for (const auto& r : roles) s << r << " = \"" << f << "\"\n";
      if (keep_head) s << "lm_head = \"" << keep_format << "\"\nlm_head_input = \"" << keep_format << "\"\n";
      // The datapath runs the blocks' linear layers (the LM head stays on fp32 accumulation).
      if (gemm != "eigen") s << "[[override]]\ngemm = \"" << gemm << "\"\n";
      if (!keep_layers.empty()) {
        s << "[[override]]\nlayers = [";
        for (std::size_t i = 0; i < keep_layers.size(); ++i)
          s << (i ? ", " : "") << '"' << keep_layers[i] << '"';
        s << "]\n";
        for (const auto& r : roles) s << r << " = \"" << keep_format << "\"\n";
        if (gemm != "eigen") s << "gemm = \"" << keep_gemm << "\"\n";
      }
      p.inline_toml = s.str();
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
    if (const toml::node* n = g->get("datapath")) {
      const toml::table* dt = n->as_table();
      if (dt == nullptr) fail(origin, n, "grid.datapath", show(*n), "a table [grid.datapath]");
      check_keys(*dt, origin, "grid.datapath.",
                 {"base", "fused_terms", "fraction_bits", "accumulator", "promote_every", "formats"});
      DatapathStudy st;
      st.base = get_string(*dt, origin, "base", "grid.datapath.", "", true);
      st.fused_terms = get_ints(*dt, origin, "fused_terms", "grid.datapath.", 1, 64);
      st.fraction_bits = get_ints(*dt, origin, "fraction_bits", "grid.datapath.", 0, 100);
      st.accumulator = get_strings(*dt, origin, "accumulator", "grid.datapath.");
      st.promote_every = get_ints(*dt, origin, "promote_every", "grid.datapath.", 0, 1 << 24);
      st.formats = get_strings(*dt, origin, "formats", "grid.datapath.");
      if (st.formats.empty()) st.formats = formats;
      if (st.fused_terms.empty() && st.fraction_bits.empty() && st.accumulator.empty() &&
          st.promote_every.empty()) {
        fail(origin, dt, "grid.datapath", "(no axis)",
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
      st.origin = origin.string() + ":" + std::to_string(dt->source().begin.line);
      x.study = std::move(st);
    }
  }
  if (x.plans.empty()) fail(origin, &t, "plan", "(missing)", "at least one [[plan]] or a [grid]");
  for (const auto& l : x.layer_attribution) {
    if (labels.count(l) == 0) {
      const toml::node* n = t["options"]["layer_attribution"].node();
      std::string known;
      for (const auto& p : x.plans) known += (known.empty() ? "" : ", ") + p.label;
      fail(origin, n, "options.layer_attribution", '"' + l + '"',
           "a plan label of this experiment (" + known + ")");
    }
  }
  return x;
}

Experiment load_experiment(const fs::path& file) {
  return parse_experiment_toml(lpemu::detail::read_spec_file(file, "experiment"), file);
}

}  // namespace lpemu::experiment
