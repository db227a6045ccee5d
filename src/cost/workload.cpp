#include "lpemu/cost/workload.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <utility>

#include "lpemu/cost/catalog.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"

namespace lpemu::cost {
namespace {

constexpr lpemu::detail::EnumName<Phase> kPhaseNames[] = {{"prefill", Phase::prefill},
                                                          {"decode", Phase::decode}};
constexpr lpemu::detail::EnumName<JobPhase> kJobPhaseNames[] = {
    {"prefill", JobPhase::prefill}, {"decode", JobPhase::decode}, {"train", JobPhase::train}};

template <class E, std::size_t N>
E named(std::string_view text, const lpemu::detail::EnumName<E> (&table)[N]) {
  if (const auto v = lpemu::detail::enum_value(table, text)) return *v;
  throw SpecError("phase '" + std::string(text) + "': expected one of " +
                  lpemu::detail::join_names(lpemu::detail::enum_spellings(table)));
}

}  // namespace

std::string_view to_string(Phase p) { return lpemu::detail::enum_name(kPhaseNames, p); }
Phase parse_phase(std::string_view text) { return named(text, kPhaseNames); }
std::string_view to_string(JobPhase p) { return lpemu::detail::enum_name(kJobPhaseNames, p); }
JobPhase parse_job_phase(std::string_view text) { return named(text, kJobPhaseNames); }
Phase device_phase(JobPhase p) { return p == JobPhase::decode ? Phase::decode : Phase::prefill; }

namespace {

double bytes_of(const CostFormat& f, double elements) { return elements * f.bits_per_element() / 8.0; }

// How one operand pair on one datapath name is priced (Builder::price).
struct Priced {
  std::string datapath, rate_class, rate_note;
  double passes = 1, energy_per_mac_pj = 0, mac_area_fa = 0;
};

// Builds the ops of one phase; identical ops (same name, formats, datapath, flops and bytes) of
// different blocks are one op with a count, so a uniform plan lists each op once with count = n_layers.
struct Builder {
  const Target& target;
  const WorkloadResolver& cat;
  Workload& w;
  double area_macs = 0, macs = 0;
  std::string where = "model";  // "layer N" while building block N, "LM head" after: errors name it
  std::map<std::string, Priced> priced = {};       // operand formats and datapath name -> pricing
  std::map<std::string, CostFormat> formats = {};  // format name -> record

  void push(Op op) {
    macs += op.flops / 2.0 * op.passes;
    area_macs += op.flops / 2.0 * op.passes * op.mac_area_fa;
    for (Op& o : w.ops) {
      if (o.name == op.name && o.a_format == op.a_format && o.b_format == op.b_format &&
          o.datapath == op.datapath && o.flops == op.flops && o.bytes == op.bytes) {
        ++o.count;
        return;
      }
    }
    w.ops.push_back(std::move(op));
  }

  // Prices the MACs of an op whose operands are stored as `a` and `b` on the datapath `named` (the
  // plan's) or, if none, the target's datapath for the rate class the operands run on. A named
  // datapath computes in its own input formats, so those choose the rate class.
  void price(Op& op, const CostFormat& a, const CostFormat& b, const std::string& named) {
    // One choice per operand pair and datapath name in a workload: every block of a model repeats
    // them, and a parallelism search builds a workload per candidate.
    const std::string key = a.name + '\n' + b.name + '\n' + named;
    auto it = priced.find(key);
    if (it == priced.end()) it = priced.emplace(key, choose(op.name, a, b, named)).first;
    const Priced& p = it->second;
    op.datapath = p.datapath;
    op.rate_class = p.rate_class;
    op.passes = p.passes;
    op.rate_note = p.rate_note;
    op.energy_per_mac_pj = p.energy_per_mac_pj;
    op.mac_area_fa = p.mac_area_fa;
  }

  Priced choose(const std::string& op_name, const CostFormat& a, const CostFormat& b,
                const std::string& named) {
    Priced p;
    try {
      RateChoice rc;
      if (!named.empty() && named != "eigen") {
        const MacDatapath& dp = cat.datapath(named);  // (resolver)
        rc = choose_rate_class(dp.a.element, dp.b.element, target, dp.a.name, dp.b.name);
        p.datapath = dp.name;
      } else {
        rc = choose_rate_class(a.element, b.element, target, a.name, b.name);
        p.datapath = target.datapath_for(rc.rate_class);
      }
      p.rate_class = rc.rate_class;
      p.passes = rc.passes;
      p.rate_note = rc.note;
    } catch (const SpecError& e) {
      throw SpecError(where + " " + op_name + " (" + a.name + " x " + b.name + "): " + e.what());
    }
    if (!p.rate_note.empty() && std::find(w.notes.begin(), w.notes.end(), p.rate_note) == w.notes.end()) {
      w.notes.push_back(p.rate_note);
    }
    const MacCost mac = mac_cost(cat.datapath(p.datapath));
    p.energy_per_mac_pj = mac.energy_pj_45nm();
    p.mac_area_fa = mac.total_fa;
    return p;
  }

  // A format by name, resolved once per workload.
  const CostFormat& format(const std::string& name) {
    auto it = formats.find(name);
    if (it == formats.end()) it = formats.emplace(name, cat.format(name)).first;
    return it->second;
  }

  // y[m, n] = x[m, k] . W[k, n]: 2mkn flops; reads W once (+ tensor scale) and x, writes y.
  // `stored` weight matrices of this shape exist (experts), `read` of them are read (touched).
  void gemm(const std::string& name, double m, double k, double n, const GemmPlan& g,
            const std::string& out_format, double stored = 1, double read = 1) {
    const CostFormat& wf = format(g.weights);
    const CostFormat& xf = format(g.inputs);
    const CostFormat& of = format(out_format);
    Op op;
    op.name = name;
    op.kind = "gemm";
    op.flops = 2.0 * m * k * n;
    op.m = m;
    op.k = k;
    op.n = n;
    op.bytes =
        read * (bytes_of(wf, k * n) + wf.tensor_scale_bytes) + bytes_of(xf, m * k) + bytes_of(of, m * n);
    op.weight_copies = read;
    op.a_format = xf.name;
    op.b_format = wf.name;
    price(op, xf, wf, g.datapath);
    w.weight_bytes += stored * (bytes_of(wf, k * n) + wf.tensor_scale_bytes);
    push(std::move(op));
  }

  void attention(double flops, double bytes, const CostFormat& q, const CostFormat& kv,
                 const std::string& dp) {
    Op op;
    op.name = "attn.sdpa";
    op.kind = "attention";
    op.flops = flops;
    op.bytes = bytes;
    op.a_format = q.name;
    op.b_format = kv.name;
    price(op, q, kv, dp);
    push(std::move(op));
  }

  void memory(const std::string& name, double bytes, const std::string& fmt) {
    Op op;
    op.name = name;
    op.kind = "memory";
    op.bytes = bytes;
    op.b_format = fmt;
    push(std::move(op));
  }
};

// The wider of two formats, for attention operands that share one unit (queries and probabilities).
CostFormat wider(const CostFormat& x, const CostFormat& y) {
  if (x.element.is_float != y.element.is_float) return x.element.is_float ? x : y;
  return y.element.bits > x.element.bits ? y : x;
}

}  // namespace

long long ModelShape::parameters() const {
  const long long mlp = (gated_mlp ? 3 : 2) * dim * hidden_dim;
  const long long per_layer = 2 * dim * dim + 2 * dim * kv_dim() + mlps() * mlp + (moe() ? dim * experts : 0);
  return n_layers * per_layer + vocab_size * dim * (tied_embeddings ? 1 : 2);
}

long long ModelShape::active_parameters() const {
  return parameters() - n_layers * (mlps() - mlps_per_token()) * (gated_mlp ? 3 : 2) * dim * hidden_dim;
}

long long ModelShape::expert_parameters() const {
  return moe() ? n_layers * experts * (gated_mlp ? 3 : 2) * dim * hidden_dim : 0;
}

double experts_touched(long long experts, long long top_k, double tokens) {
  if (experts <= 0) return 1.0;
  const double e = static_cast<double>(experts);
  return e * (1.0 - std::pow(1.0 - static_cast<double>(top_k) / e, tokens));
}

LayerwisePlan LayerwisePlan::uniform(std::string name, const std::string& weights,
                                     const std::string& activations, const std::string& kv_cache,
                                     long long n_layers) {
  LayerwisePlan p;
  p.name = std::move(name);
  const GemmPlan g{weights, activations, ""};
  LayerPlan l{g, g, g, g, g, g, g, activations, activations, kv_cache, ""};
  p.layers.assign(static_cast<std::size_t>(std::max(0LL, n_layers)), l);
  p.lm_head = g;
  p.embedding = weights;  // the embedding table stored like the other weights
  return p;
}

WorkloadResolver WorkloadResolver::of(Catalog& cat) {
  return {[&cat](const std::string& n) { return cat.format(n); },
          [&cat](const std::string& n) -> const MacDatapath& { return cat.datapath(n); }};
}

double bits_per_weight(const ModelShape& s, const LayerwisePlan& p, Catalog& cat) {
  return bits_per_weight(s, p, WorkloadResolver::of(cat));
}

double bits_per_weight(const ModelShape& s, const LayerwisePlan& p, const WorkloadResolver& cat) {
  const double d = static_cast<double>(s.dim), kv = static_cast<double>(s.kv_dim());
  const double hid = static_cast<double>(s.hidden_dim), voc = static_cast<double>(s.vocab_size);
  double bits = 0, params = 0;
  const auto add = [&](const std::string& format, double n) {
    if (format == "fp32" || format == "fp64") return;  // unquantised
    bits += n * cat.format(format).bits_per_element();
    params += n;
  };
  for (const LayerPlan& l : p.layers) {
    add(l.q_proj.weights, d * d);
    add(l.k_proj.weights, d * kv);
    add(l.v_proj.weights, d * kv);
    add(l.o_proj.weights, d * d);
    const double e = static_cast<double>(s.mlps());  // every expert's weights
    if (s.gated_mlp) add(l.gate.weights, e * d * hid);
    add(l.up.weights, e * d * hid);
    add(l.down.weights, e * hid * d);
    if (s.moe()) add(l.gate.weights, d * e);  // the router
  }
  add(p.lm_head.weights, d * voc);
  if (params > 0) return bits / params;
  return p.embedding == "fp64" ? 64.0 : 32.0;  // nothing quantised: the unquantised width
}

namespace {

std::string listed_classes(const Target& target) {
  std::string have;
  for (const auto& [k, v] : target.rates) have += (have.empty() ? "" : ", ") + k;
  return have;
}

// Significand bits a split into pieces must carry: a float's hidden bit included, an integer's
// magnitude bits.
int needed_bits(const ElementWidth& w) { return w.is_float ? w.significand_bits : w.bits - 1; }

}  // namespace

RateChoice choose_rate_class(const ElementWidth& a, const ElementWidth& b, const Target& target,
                             std::string_view a_name, std::string_view b_name) {
  for (const auto& c : rate_classes()) {
    if (fits_class(a, c) && fits_class(b, c) && target.find_rate(c) != nullptr) return {c, 1.0, ""};
  }
  // No class accepts both: split each operand x = x_1 + x_2 + ... into pieces of a float class
  // whose exponent range holds it. Rounding each piece to nearest leaves a residual whose sign
  // carries one more bit, so a piece holds the class's significand + 1 bits; the products
  // x_i y_j with i + j < pieces (pieces (pieces + 1) / 2 of them) keep the full product to the last
  // piece's precision. Two pieces of TF32 are NVIDIA's 3xTF32 (Ootomo & Yokota, "Recovering
  // single precision accuracy from Tensor Cores while surpassing the FP32 theoretical peak
  // performance", IJHPCA 2022; CUTLASS's 3xTF32 GEMM); three of bfloat16 are bf16x6 (Henry, Tang
  // & Heinecke, "Leveraging the bfloat16 Artificial Intelligence Datatype For Higher-Precision
  // Computations", ARITH 2019), the multi-pass fp32 matmul XLA runs on TPUs.
  const int e = std::max(a.is_float ? a.exponent_bits : 0, b.is_float ? b.exponent_bits : 0);
  const int need = std::max(needed_bits(a), needed_bits(b));
  RateChoice best;
  double best_cost = 0;
  for (const auto& c : rate_classes()) {
    const int sig = class_significand_bits(c, e);
    if (sig == 0 || target.find_rate(c) == nullptr) continue;
    const int pieces = (need + sig) / (sig + 1);  // ceil(need / (sig + 1))
    const double passes = pieces * (pieces + 1) / 2.0;
    const double cost = passes / target.peak_ops(c);
    // Cheapest first; on a tie (TF32 is half the BF16 rate on most parts) the fewer passes.
    const bool tie = std::abs(cost - best_cost) <= 1e-9 * best_cost;
    if (best.rate_class.empty() || (cost < best_cost && !tie) || (tie && passes < best.passes)) {
      best = {c, passes, ""};
      best_cost = cost;
    }
  }
  if (best.rate_class.empty()) {
    throw SpecError(
        "target '" + target.name + "' has no rate class that accepts both " + std::string(a_name) + " and " +
        std::string(b_name) +
        ", nor one with their exponent range to split them into (it has: " + listed_classes(target) + ")");
  }
  char passes[32];
  std::snprintf(passes, sizeof passes, "%g", best.passes);
  best.note =
      std::string(a_name) + " x " + std::string(b_name) + ": no " + target.name +
      " rate class accepts both; run as " + passes + " " + best.rate_class +
      " passes per MAC (split operands: " +
      (best.rate_class == "tf32" ? "3xTF32, Ootomo & Yokota 2022" : "bf16x3/x6, Henry et al. ARITH 2019") +
      ")";
  return best;
}

std::string gemm_rate_class(const ElementWidth& a, const ElementWidth& b, const Target& target,
                            std::string_view a_name, std::string_view b_name) {
  for (const auto& c : rate_classes()) {
    if (fits_class(a, c) && fits_class(b, c) && target.find_rate(c) != nullptr) return c;
  }
  throw SpecError("target '" + target.name + "' has no rate class that accepts both " + std::string(a_name) +
                  " and " + std::string(b_name) + " (it has: " + listed_classes(target) + ")");
}

Workload build_workload(const ModelShape& s, const LayerwisePlan& p, const Target& target, Catalog& cat,
                        Phase phase, long long batch, long long context) {
  return build_workload(s, p, target, WorkloadResolver::of(cat), phase, batch, context);
}

Workload build_workload(const ModelShape& s, const PlanFormats& f, const Target& target,
                        const MacDatapath& dp, Phase phase, long long batch, long long context) {
  const WorkloadResolver r{[&f](const std::string& n) {
                             for (const CostFormat* c : {&f.weights, &f.activations, &f.kv_cache}) {
                               if (c->name == n) return *c;
                             }
                             throw SpecError("format '" + n + "' is not one of the plan's three formats");
                           },
                           [&dp](const std::string&) -> const MacDatapath& { return dp; }};
  const LayerwisePlan p =
      LayerwisePlan::uniform("uniform", f.weights.name, f.activations.name, f.kv_cache.name, s.n_layers);
  return build_workload(s, p, target, r, phase, batch, context);
}

Workload build_workload(const ModelShape& s, const LayerwisePlan& p, const Target& target,
                        const WorkloadResolver& cat, Phase phase, long long batch, long long context) {
  if (batch < 1) throw SpecError("batch = " + std::to_string(batch) + ": expected a positive integer");
  if (context < 1) throw SpecError("context = " + std::to_string(context) + ": expected a positive integer");
  if (static_cast<long long>(p.layers.size()) != s.n_layers) {
    throw SpecError("plan '" + p.name + "' has " + std::to_string(p.layers.size()) +
                    " blocks; model shape '" + s.name + "' has n_layers = " + std::to_string(s.n_layers));
  }
  Workload w;
  w.phase = phase;
  w.batch = batch;
  w.context = context;
  const double d = static_cast<double>(s.dim);
  const double kv = static_cast<double>(s.kv_dim());
  const double hid = static_cast<double>(s.hidden_dim);
  const double voc = static_cast<double>(s.vocab_size);
  const double heads = static_cast<double>(s.n_heads);
  const double hd = static_cast<double>(s.head_dim());
  const double B = static_cast<double>(batch);
  const double S = static_cast<double>(context);

  // Tokens processed by the GEMMs: the whole prompt in prefill, one new token per sequence in decode.
  const double T = phase == Phase::prefill ? B * S : B;
  w.tokens = T;
  Builder b{target, cat, w};
  const CostFormat emb = cat.format(p.embedding);
  const CostFormat in0 = cat.format(p.layers.empty() ? p.lm_head.inputs : p.layers[0].q_proj.inputs);
  b.memory("embedding", bytes_of(emb, T * d) + bytes_of(in0, T * d), emb.name);
  w.weight_bytes += bytes_of(emb, voc * d);
  for (std::size_t li = 0; li < p.layers.size(); ++li) {
    const LayerPlan& l = p.layers[li];
    b.where = "layer " + std::to_string(li);
    const CostFormat kvf = cat.format(l.kv_cache);
    b.gemm("attn.q_proj", T, d, d, l.q_proj, l.q);
    b.gemm("attn.k_proj", T, d, kv, l.k_proj, l.kv_cache);  // writes K into the cache
    b.gemm("attn.v_proj", T, d, kv, l.v_proj, l.kv_cache);  // writes V into the cache
    const CostFormat qf = wider(cat.format(l.q), cat.format(l.probs));
    if (phase == Phase::prefill) {
      // Causal: query i attends to i + 1 keys, sum = S(S+1)/2 per head; QK^T and PV each 2 flops/MAC.
      const double macs = 2.0 * B * heads * hd * S * (S + 1) / 2.0;
      b.attention(2.0 * macs, bytes_of(qf, 2 * T * d) + bytes_of(kvf, 2 * T * kv), qf, kvf,
                  l.attention_datapath);
    } else {
      // One query per sequence against S cached positions plus itself; the cache is read once.
      const double macs = 2.0 * B * heads * hd * (S + 1);
      b.attention(2.0 * macs, bytes_of(qf, 2 * T * d) + bytes_of(kvf, 2 * B * (S + 1) * kv), qf, kvf,
                  l.attention_datapath);
    }
    w.kv_cache_bytes += bytes_of(kvf, 2.0 * B * S * kv);
    b.gemm("attn.o_proj", T, d, d, l.o_proj, l.o_proj.inputs);
    if (s.moe()) {
      // Router logits, then each token's top_k experts as one grouped GEMM of T x top_k rows that
      // reads the weights of every expert some token was routed to (uniform routing).
      const double e = static_cast<double>(s.experts), rows = T * static_cast<double>(s.top_k);
      const double touched = experts_touched(s.experts, s.top_k, T);
      b.gemm("moe.router", T, d, e, l.gate, l.gate.inputs);
      if (s.gated_mlp) b.gemm("mlp.gate", rows, d, hid, l.gate, l.gate.inputs, e, touched);
      b.gemm("mlp.up", rows, d, hid, l.up, l.up.inputs, e, touched);
      b.gemm("mlp.down", rows, hid, d, l.down, l.down.inputs, e, touched);
    } else {
      if (s.gated_mlp) b.gemm("mlp.gate", T, d, hid, l.gate, l.gate.inputs);
      b.gemm("mlp.up", T, d, hid, l.up, l.up.inputs);
      b.gemm("mlp.down", T, hid, d, l.down, l.down.inputs);
    }
  }
  // Logits only for the last position of each sequence (the next token); a tied head reads the
  // embedding table, so its weights are counted once.
  const double before = w.weight_bytes;
  b.where = "LM head";
  b.gemm("lm_head", B, d, voc, p.lm_head, p.lm_head.inputs);
  if (s.tied_embeddings) w.weight_bytes = before;
  w.bits_per_weight = bits_per_weight(s, p, cat);
  w.mac_area_fa = b.macs > 0 ? b.area_macs / b.macs : 0.0;
  return w;
}

Roofline roofline(Workload& w, const Target& target, const GemmTimer& gemm_time) {
  Roofline r;
  r.tokens = w.tokens;
  const double bw = target.bandwidth_gb_s * 1e9;
  for (auto& op : w.ops) {
    op.memory_s = op.bytes / bw;
    op.compute_s = op.rate_class.empty() ? 0.0 : op.flops * op.passes / target.peak_ops(op.rate_class);
    op.time_s = std::max(op.compute_s, op.memory_s);
    op.compute_bound = op.compute_s > op.memory_s;
    if (gemm_time && op.kind == "gemm") gemm_time(op);
    op.energy_j =
        (op.flops / 2.0 * op.passes * op.energy_per_mac_pj + op.bytes * kDramEnergyPjPerByte45nm) * 1e-12;
    r.time_s += static_cast<double>(op.count) * op.time_s;
    r.energy_j += static_cast<double>(op.count) * op.energy_j;
    if (op.compute_bound) r.compute_bound_time_s += static_cast<double>(op.count) * op.time_s;
  }
  r.fits_in_memory = w.weight_bytes + w.kv_cache_bytes <= target.capacity_gb * 1e9;
  return r;
}

}  // namespace lpemu::cost
