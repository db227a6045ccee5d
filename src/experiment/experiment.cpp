#include "lpemu/experiment/experiment.hpp"

#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "io/toml_util.hpp"
#include "lpemu/detail/named_registry.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/sha256.hpp"

namespace lpemu::experiment {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const fs::path& origin, const toml::node* n, const std::string& field, const std::string& value,
                       const std::string& expected) {
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

std::string get_string(const toml::table& t, const fs::path& origin, const std::string& key, const std::string& prefix,
                       const std::string& def, bool required = false) {
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

fs::path resolve_input(const fs::path& origin, const std::string& p) {
  if (p.empty()) return {};
  const fs::path path(p);
  return path.is_absolute() ? path : (origin.parent_path() / path).lexically_normal();
}

}  // namespace

std::string Experiment::fingerprint() const {
  std::ostringstream s;
  s << "cost=" << cost.target << "|" << cost.shape << "|" << cost.phase << "|" << cost.batch << "|" << cost.context
    << "\nmodel=" << model << "\nreference=" << reference << "\nmax_tokens=" << max_tokens
    << "\nattribution=" << attribution << "\n";
  if (!text.empty() && fs::exists(text)) s << "text=" << io::sha256_file(text) << "\n";
  if (!tokens.empty() && fs::exists(tokens)) s << "tokens=" << io::sha256_file(tokens) << "\n";
  if (!activations.empty() && fs::exists(activations)) s << "activations=" << io::sha256_file(activations) << "\n";
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
    if (src->contains("text")) fail(origin, src->get("tokens"), "source.tokens", "(with source.text)", "text or tokens, not both");
    x.tokens = resolve_input(origin, get_string(*src, origin, "tokens", "source.", "", true));
    if (!fs::exists(x.tokens)) {
      fail(origin, src->get("tokens"), "source.tokens", '"' + x.tokens.string() + '"', "an existing .npy file of token ids");
    }
  } else {
    x.text = resolve_input(origin, get_string(*src, origin, "text", "source.", "", true));
    if (!fs::exists(x.text)) fail(origin, src->get("text"), "source.text", '"' + x.text.string() + '"', "an existing text file");
  }
  x.activations = resolve_input(origin, get_string(*src, origin, "activations", "source.", ""));
  if (!x.activations.empty() && !fs::exists(x.activations)) {
    fail(origin, src->get("activations"), "source.activations", '"' + x.activations.string() + '"',
         "an existing HDF5 file");
  }
  if (const toml::node* n = src->get("max_tokens")) {
    if (!n->is_integer() || *n->value<std::int64_t>() < 0) fail(origin, n, "source.max_tokens", show(*n), "an integer ≥ 0");
    x.max_tokens = static_cast<int>(*n->value<std::int64_t>());
  }
  if (const toml::table* o = t["output"].as_table()) {
    check_keys(*o, origin, "output.", {"dir"});
    x.out_dir = get_string(*o, origin, "dir", "output.", "");
  }
  if (x.out_dir.empty()) x.out_dir = fs::path("out") / x.name;
  if (const toml::table* o = t["options"].as_table()) {
    check_keys(*o, origin, "options.", {"reference", "attribution"});
    x.reference = get_string(*o, origin, "reference", "options.", "fp32");
    if (const toml::node* n = o->get("attribution")) {
      if (!n->is_boolean()) fail(origin, n, "options.attribution", show(*n), "true or false");
      x.attribution = *n->value<bool>();
    }
  }
  if (const toml::table* c = t["cost"].as_table()) {
    check_keys(*c, origin, "cost.", {"target", "shape", "phase", "batch", "context"});
    x.cost.target = get_string(*c, origin, "target", "cost.", "", true);
    x.cost.shape = get_string(*c, origin, "shape", "cost.", x.model);
    x.cost.phase = get_string(*c, origin, "phase", "cost.", "decode");
    if (x.cost.phase != "decode" && x.cost.phase != "prefill") {
      fail(origin, c->get("phase"), "cost.phase", '"' + x.cost.phase + '"', "\"decode\" or \"prefill\"");
    }
    for (const auto& [key, dst] : {std::pair<const char*, long long*>{"batch", &x.cost.batch}, {"context", &x.cost.context}}) {
      if (const toml::node* n = c->get(key)) {
        if (!n->is_integer() || *n->value<std::int64_t>() < 1) {
          fail(origin, n, std::string("cost.") + key, show(*n), "an integer >= 1");
        }
        *dst = *n->value<std::int64_t>();
      }
    }
  }
  std::set<std::string> labels;
  const auto add_plan = [&](PlanSpec p, const toml::node* n) {
    if (!labels.insert(p.label).second) fail(origin, n, "plan.label", '"' + p.label + '"', "a label not used before");
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
        fail(origin, pt, "plan", "a table", "either plan = \"NAME or file\" or an inline plan ([plan.roles], ...), not both");
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
    check_keys(*g, origin, "grid.", {"formats", "roles", "gemms", "keep", "keep_format", "label"});
    const auto formats = get_strings(*g, origin, "formats", "grid.");
    auto roles = get_strings(*g, origin, "roles", "grid.");
    auto gemms = get_strings(*g, origin, "gemms", "grid.");
    const auto keep = get_strings(*g, origin, "keep", "grid.");  // e.g. ["first", "last"]
    const std::string keep_format = get_string(*g, origin, "keep_format", "grid.", "bf16");
    if (formats.empty()) fail(origin, g, "grid.formats", "(missing)", "a non-empty array of format names");
    if (roles.empty()) roles = {"weights", "linear_input"};
    if (gemms.empty()) gemms = {"eigen"};
    for (const auto& gemm : gemms) {
      for (const auto& f : formats) {
        PlanSpec p;
        p.label = f + (gemm == "eigen" ? std::string() : "+" + gemm);
        std::ostringstream s;
        s << "name = \"" << p.label << "\"\n";
        s << "[roles]\n";
        if (gemm != "eigen") s << "gemm = \"" << gemm << "\"\n";
        for (const auto& r : roles) s << r << " = \"" << f << "\"\n";
        if (!keep.empty()) {
          s << "[[override]]\nlayers = [";
          for (std::size_t i = 0; i < keep.size(); ++i) s << (i ? ", " : "") << '"' << keep[i] << '"';
          s << "]\n";
          for (const auto& r : roles) s << r << " = \"" << keep_format << "\"\n";
        }
        p.inline_toml = s.str();
        add_plan(std::move(p), g);
      }
    }
  }
  if (x.plans.empty()) fail(origin, &t, "plan", "(missing)", "at least one [[plan]] or a [grid]");
  return x;
}

Experiment load_experiment(const fs::path& file) { return parse_experiment_toml(lpemu::detail::read_spec_file(file, "experiment"), file); }

}  // namespace lpemu::experiment
