#include "lpemu/cost/workload.hpp"

#include <algorithm>

#include "lpemu/error.hpp"

namespace lpemu::cost {
namespace {

double bytes_of(const CostFormat& f, double elements) { return elements * f.bits_per_element() / 8.0; }

// The wider of two formats for the purpose of attention arithmetic: the unit must accept both.
struct Builder {
  const PlanFormats& p;
  const Target& target;
  const MacDatapath& dp;
  Workload& w;

  // y[m, n] = x[m, k] . W[k, n]: 2mkn flops; reads W once (+ tensor scale) and x, writes y.
  void gemm(const std::string& name, long long count, double m, double k, double n, const CostFormat& out) {
    Op op;
    op.name = name;
    op.kind = "gemm";
    op.count = count;
    op.flops = 2.0 * m * k * n;
    op.m = m;
    op.k = k;
    op.n = n;
    op.bytes = bytes_of(p.weights, k * n) + p.weights.tensor_scale_bytes + bytes_of(p.activations, m * k) +
               bytes_of(out, m * n);
    op.rate_class = gemm_rate_class(p.weights, p.activations, target);
    op.energy_per_mac_pj = mac_cost(p.weights, p.activations, dp).energy_pj_45nm();
    w.ops.push_back(op);
  }

  void attention(const std::string& name, long long count, double flops, double bytes) {
    Op op;
    op.name = name;
    op.kind = "attention";
    op.count = count;
    op.flops = flops;
    op.bytes = bytes;
    op.rate_class = gemm_rate_class(p.activations, p.kv_cache, target);
    op.energy_per_mac_pj = mac_cost(p.activations, p.kv_cache, dp).energy_pj_45nm();
    w.ops.push_back(op);
  }

  void memory(const std::string& name, long long count, double bytes) {
    Op op;
    op.name = name;
    op.kind = "memory";
    op.count = count;
    op.bytes = bytes;
    w.ops.push_back(op);
  }
};

}  // namespace

long long ModelShape::parameters() const {
  const long long per_layer = 2 * dim * dim + 2 * dim * kv_dim() + (gated_mlp ? 3 : 2) * dim * hidden_dim;
  return n_layers * per_layer + vocab_size * dim * (tied_embeddings ? 1 : 2);
}

std::string gemm_rate_class(const CostFormat& a, const CostFormat& b, const Target& target) {
  for (const auto& c : rate_classes()) {
    if (fits_class(a.element, c) && fits_class(b.element, c) && target.find_rate(c) != nullptr) return c;
  }
  std::string have;
  for (const auto& [k, v] : target.rates) have += (have.empty() ? "" : ", ") + k;
  throw SpecError("target '" + target.name + "' has no rate class that accepts both " + a.name + " and " + b.name +
                  " (it has: " + have + ")");
}

Workload build_workload(const ModelShape& s, const PlanFormats& p, const Target& target, const MacDatapath& dp,
                        Phase phase, long long batch, long long context) {
  if (batch < 1) throw SpecError("batch = " + std::to_string(batch) + ": expected a positive integer");
  if (context < 1) throw SpecError("context = " + std::to_string(context) + ": expected a positive integer");
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
  const long long L = s.n_layers;
  w.weight_bytes = bytes_of(p.weights, static_cast<double>(s.parameters()));
  w.kv_cache_bytes = bytes_of(p.kv_cache, 2.0 * static_cast<double>(L) * B * S * kv);

  // Tokens processed by the GEMMs: the whole prompt in prefill, one new token per sequence in decode.
  const double T = phase == Phase::prefill ? B * S : B;
  w.tokens = T;
  Builder b{p, target, dp, w};
  b.memory("embedding", 1, bytes_of(p.weights, T * d) + bytes_of(p.activations, T * d));
  b.gemm("attn.q_proj", L, T, d, d, p.activations);
  b.gemm("attn.k_proj", L, T, d, kv, p.kv_cache);  // writes K into the cache
  b.gemm("attn.v_proj", L, T, d, kv, p.kv_cache);  // writes V into the cache
  if (phase == Phase::prefill) {
    // Causal: query i attends to i + 1 keys, sum = S(S+1)/2 per head; QK^T and PV each 2 flops/MAC.
    const double macs = 2.0 * B * heads * hd * S * (S + 1) / 2.0;
    const double bytes = bytes_of(p.activations, 2 * T * d) + bytes_of(p.kv_cache, 2 * T * kv);
    b.attention("attn.sdpa", L, 2.0 * macs, bytes);
  } else {
    // One query per sequence against S cached positions plus itself; the cache is read once.
    const double macs = 2.0 * B * heads * hd * (S + 1);
    const double bytes = bytes_of(p.activations, 2 * T * d) + bytes_of(p.kv_cache, 2 * B * (S + 1) * kv);
    b.attention("attn.sdpa", L, 2.0 * macs, bytes);
  }
  b.gemm("attn.o_proj", L, T, d, d, p.activations);
  if (s.gated_mlp) b.gemm("mlp.gate", L, T, d, hid, p.activations);
  b.gemm("mlp.up", L, T, d, hid, p.activations);
  b.gemm("mlp.down", L, T, hid, d, p.activations);
  // Logits only for the last position of each sequence (the next token).
  b.gemm("lm_head", 1, B, d, voc, p.activations);
  return w;
}

Roofline roofline(Workload& w, const Target& target) {
  Roofline r;
  r.tokens = w.tokens;
  const double bw = target.bandwidth_gb_s * 1e9;
  for (auto& op : w.ops) {
    op.memory_s = op.bytes / bw;
    op.compute_s = op.rate_class.empty() ? 0.0 : op.flops / target.peak_ops(op.rate_class);
    op.time_s = std::max(op.compute_s, op.memory_s);
    op.compute_bound = op.compute_s > op.memory_s;
    op.energy_j = (op.flops / 2.0 * op.energy_per_mac_pj + op.bytes * kDramEnergyPjPerByte45nm) * 1e-12;
    r.time_s += static_cast<double>(op.count) * op.time_s;
    r.energy_j += static_cast<double>(op.count) * op.energy_j;
    if (op.compute_bound) r.compute_bound_time_s += static_cast<double>(op.count) * op.time_s;
  }
  r.fits_in_memory = w.weight_bytes + w.kv_cache_bytes <= target.capacity_gb * 1e9;
  return r;
}

}  // namespace lpemu::cost
