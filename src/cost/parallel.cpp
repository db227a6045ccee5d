#include "lpemu/cost/parallel.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <tuple>

#include "lpemu/cost/kernel.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::cost {
namespace {

// Device memory a training process holds beyond its tensors: the CUDA context and the loaded
// kernels. Hugging Face Transformers docs, "Model training anatomy"
// (huggingface.co/docs/transformers/model_memory_anatomy): "when a model is loaded to the GPU the
// kernels are also loaded, which can take up 1-2GB of memory" (a 1x1 tensor on the GPU: 1343 MB
// occupied). The upper end of that range; allocator fragmentation is not modelled.
constexpr double kFrameworkReserveBytes = 2e9;

// Host time to launch one kernel, eagerly (no CUDA Graph): "Usually, the launch time on the CPU
// side is between 5-20 microseconds. In some cases the GPU execution time is lower than the launch
// time itself" (Meta's Holistic Trace Analysis docs, "CUDA Kernel Launch Statistics",
// github.com/facebookresearch/HolisticTraceAnalysis).
// The low end of that range. A kernel that runs shorter than this leaves the device idle until the
// host has issued the next; CUDA Graphs launch a captured sequence at once and remove most of it
// (no per-kernel figure for them was found, so they are not modelled).
constexpr double kKernelLaunchS = 5e-6;

double byte_of(const CostFormat& f) { return f.bits_per_element() / 8.0; }
double dbl(long long v) { return static_cast<double>(v); }

void require(bool ok, const std::string& what) {
  if (!ok) throw SpecError(what);
}

// Times of one transformer layer and of the LM head for one micro-batch on one device.
struct PassTime {
  double compute = 0, memory = 0;  // split by bound
  double attention = 0;            // attention core (recomputed by selective recomputation)
  // The attention core's backward time less twice its forward time (the rest of the layer's
  // backward is taken as twice its forward): a fused kernel's backward runs at its own measured rate.
  double attention_backward_extra = 0;
  double total() const { return compute + memory; }
  void add(double t, bool compute_bound) { (compute_bound ? compute : memory) += t; }
};

struct LayerTimes {
  PassTime layer, head;
  std::string rate_class;
};

// Per-device forward time of one layer and of the head: the workload's ops (prefill of a
// micro-batch) with GEMMs split by TP (column-parallel q/k/v/gate/up, row-parallel o/down, the
// vocabulary for the head), attention heads split by TP, the sequence split by CP.
LayerTimes forward_times(const ModelShape& s, const PlanFormats& pf, const System& sys, const Target& target,
                         const MacDatapath& dp, const Parallel& par, long long micro_batch, long long seq,
                         bool flash_attention) {
  const long long local_seq = seq / par.cp;
  Workload w = build_workload(s, pf, target, dp, Phase::prefill, micro_batch, local_seq);
  const double t = dbl(par.tp);
  const double wb = byte_of(pf.weights), ab = byte_of(pf.activations);
  // Memory-bound kernels stream at the device's measured fraction of its peak bandwidth.
  const double bw = target.bandwidth_gb_s * 1e9 * target.memory_efficiency();
  // EP: each device holds experts / ep experts and, with balanced routing, computes the T x top_k
  // expert rows of its own tokens' share; the weights it reads are its experts that any of the
  // ep x T tokens of its EP group reached.
  const double local_experts =
      s.moe() ? experts_touched(s.experts, s.top_k, dbl(par.ep) * dbl(micro_batch * local_seq)) / dbl(par.ep)
              : 1.0;
  LayerTimes out;
  for (const auto& op : w.ops) {
    PassTime& dst = op.count == s.n_layers ? out.layer : out.head;
    if (op.kind == "gemm") {
      double m = op.m, k = op.k, n = op.n;
      const bool expert = s.moe() && op.name.rfind("mlp.", 0) == 0;
      if (op.name == "lm_head") m = dbl(micro_batch * local_seq);  // training: logits at every position
      if (op.name == "attn.o_proj" || op.name == "mlp.down") {
        k /= t;
      } else {
        n /= t;
      }
      const double bytes = (expert ? local_experts : 1.0) * k * n * wb + m * k * ab + m * n * ab;
      const KernelEstimate e = gemm_kernel(sys, target, op.rate_class, m, k, n, bytes, op.passes);
      const double mem_s = e.memory_s / target.memory_efficiency();
      dst.add(std::max(e.compute_s, mem_s), e.compute_s >= mem_s);
      out.rate_class = op.rate_class;
    } else if (op.kind == "attention") {
      // The workload's causal attention for local_seq tokens; with CP each device holds
      // local_seq queries against all seq keys: cp times the flops of a local_seq-token prompt.
      double flops = op.flops * dbl(par.cp) / t;
      double bytes = op.bytes / t;
      // A fused kernel runs at the rate measured for fused attention of its class (forward; the
      // backward below); unfused attention's two batched products are GEMMs at the class's
      // measured GEMM rate and its s x s passes are memory-bound kernels.
      double rate = target.peak_ops(op.rate_class) * target.attention_efficiency(op.rate_class, false);
      if (!flash_attention) {
        rate = target.peak_ops(op.rate_class) * target.gemm_efficiency(op.rate_class);
        // Unfused attention computes the whole s x s score matrix and masks it (twice the causal
        // flops), and the scores cross DRAM: QK^T writes them, softmax reads and writes, dropout
        // reads and writes them plus a 1-byte mask, PV reads them (6 passes + mask).
        const double lq = dbl(micro_batch * local_seq), lk = dbl(seq);
        flops = 4.0 * lq * lk * dbl(s.dim) / t;  // QK^T and PV, 2 flops per MAC each
        bytes += dbl(s.n_heads) / t * lq * lk * (6.0 * ab + 1.0);
      }
      const double c = flops * op.passes / rate, mem = bytes / bw;
      dst.add(std::max(c, mem), c >= mem);
      dst.attention += std::max(c, mem);
      if (flash_attention) {
        // FlashAttention's published backward rates count 2.5 x the forward flops (its benchmark's
        // convention: the backward recomputes QK^T), so that is the work timed at that rate.
        const double bwd_rate =
            target.peak_ops(op.rate_class) * target.attention_efficiency(op.rate_class, true);
        dst.attention_backward_extra +=
            std::max(2.5 * flops * op.passes / bwd_rate, 2.0 * mem) - 2.0 * std::max(c, mem);
      }
    } else {
      dst.add(op.bytes / t / bw, false);
    }
  }
  // Element-wise work the workload has no op for: two norms (read + write d), two residual adds
  // (read 2d, write d) and the MLP activation (gated: read 2H write H; dense: read H write H),
  // per token, in the activation format; SP shards the norms and residuals over TP.
  const double tokens = dbl(micro_batch * local_seq);
  const double norm_res = (2 * 2 + 2 * 3) * dbl(s.dim) / (par.sp ? t : 1.0);
  const double act = (s.gated_mlp ? 3.0 : 2.0) * dbl(s.hidden_dim) * dbl(s.mlps_per_token()) / t;
  out.layer.add(tokens * (norm_res + act) * ab / bw, false);
  return out;
}

// Parameters held by the device of the largest pipeline stage (its layers plus one embedding
// matrix, two when PP = 1 and they are untied), split by TP; the experts' MLPs (`expert`) are
// further split by EP, the rest (`dense`) is not.
struct DeviceParams {
  double dense = 0, expert = 0;
  double total() const { return dense + expert; }
};
DeviceParams params_per_device(const ModelShape& s, const Parallel& par) {
  const double emb = dbl(s.vocab_size) * dbl(s.dim);
  const double experts = dbl(s.expert_parameters()) / dbl(s.n_layers);
  const double per_layer =
      (dbl(s.parameters()) - emb * (s.tied_embeddings ? 1.0 : 2.0)) / dbl(s.n_layers) - experts;
  // The first stage holds the embedding, the last the LM head (a tied one keeps its own copy there,
  // as Megatron does); the device of the stage with the most parameters.
  const std::vector<long long> stages = stage_layers(par, s.n_layers);
  DeviceParams best;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    double embeddings = (i == 0 ? emb : 0.0) + (i + 1 == stages.size() ? emb : 0.0);
    if (stages.size() == 1 && s.tied_embeddings) embeddings = emb;
    const double layers = dbl(stages[i]);
    const DeviceParams d{(layers * per_layer + embeddings) / dbl(par.tp),
                         layers * experts / dbl(par.tp) / dbl(par.ep)};
    if (d.total() > best.total()) best = d;
  }
  return best;
}

// Activation bytes one layer keeps for backward, per micro-batch and device, from the tensors
// Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (2022, §4.1)
// list for GPT: s b h (34 + 5 a s / h) bytes at 16 bits, i.e. 4 s b h for the two LayerNorm
// inputs, 2 s b h each for the attention and MLP inputs (the norms' outputs), 6 s b h for Q, K, V,
// 2 s b h for the attention output (the projection's input), 8 + 8 s b h for the GeLU input and
// output (the MLP's second GEMM input), 2 s b h of dropout masks and, unfused, 5 a s^2 b for the
// softmax output, its dropout mask and the dropout output; TP splits all but the norm, input and
// mask terms, SP those too (§4.2.2: s b h (34 / t + 5 a s / (h t))). Generalised to GQA (K and V of
// width kv_dim), gated MLPs (two H-wide inputs to the activation), top_k experts per token, the
// activation format; dropout (its masks and the attention dropout output) only for GPT-style
// (dense-MLP) shapes. A fused attention kernel keeps no s x s tensor (FlashAttention: Dao et al.
// 2022, §3.1, only the output and its softmax statistics, O(s) per head).
double activation_bytes_per_layer(const ModelShape& s, const TrainFormats& f, const TrainConfig& c) {
  const Parallel& p = c.par;
  const double sb = dbl(c.micro_batch) * dbl(c.seq) / dbl(p.cp);
  const double h = dbl(s.dim), kv = dbl(s.kv_dim()), H = dbl(s.hidden_dim), t = dbl(p.tp);
  const double a = byte_of(f.activations);
  if (c.recompute == Recompute::full) return sb * h * a / (p.sp ? t : 1.0);  // the layer's input only
  const bool dropout = !s.gated_mlp;
  const double masks = dropout ? 2.0 * sb * h : 0.0;  // attention-output and MLP-output dropout
  // Replicated across TP unless SP: the two norm inputs, the attention and MLP inputs, masks.
  const double replicated = sb * (4 * h * a) + masks;
  // Split by TP: Q, K, V; attention output; MLP inputs of the activation and its output (for
  // each of the top_k experts a token passes through).
  const double routed = dbl(s.mlps_per_token());
  const double split = sb * ((h + 2 * kv) * a + h * a + routed * ((s.gated_mlp ? 2 : 1) * H + H) * a) / t;
  double bytes = replicated / (p.sp ? t : 1.0) + split;
  if (c.recompute == Recompute::none && !c.flash_attention) {
    // Softmax output (activation format) and, with dropout, its mask (1 byte) and the dropout
    // output: a s x s per sequence and head (5 a s^2 b at 16 bits).
    bytes += dbl(s.n_heads) / t * sb * dbl(c.seq) * (a + (dropout ? 1.0 + a : 0.0));
  }
  return bytes;
}

}  // namespace

std::string Parallel::str() const {
  std::ostringstream o;
  o << "tp=" << tp << ",pp=" << pp << ",dp=" << dp;
  if (cp != 1) o << ",cp=" << cp;
  if (ep != 1) o << ",ep=" << ep;
  if (vpp != 1) o << ",vpp=" << vpp;
  if (sp) o << ",sp=1";
  if (first != 0) o << ",first=" << first;
  if (last != 0) o << ",last=" << last;
  o << ",zero=" << zero;
  return o.str();
}

Parallel parse_parallel(std::string_view spec, long long devices) {
  Parallel p;
  bool have_dp = false;
  std::string s(spec);
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string val = eq == std::string::npos ? "" : item.substr(eq + 1);
    long long v = 0;
    try {
      std::size_t used = 0;
      v = std::stoll(val, &used);
      if (used != val.size()) throw std::invalid_argument(val);
    } catch (const std::exception&) {
      throw SpecError("--parallel \"" + s + "\": '" + item + "': expected key=integer");
    }
    if (v < 0 || (v < 1 && key != "sp" && key != "zero" && key != "first" && key != "last")) {
      throw SpecError("--parallel \"" + s + "\": " + key + " = " + val + ": expected a positive integer");
    }
    if (v > kMaxParallelDegree) {
      throw SpecError("--parallel \"" + s + "\": " + key + " = " + val + ": expected at most " +
                      std::to_string(kMaxParallelDegree));
    }
    if (key == "tp")
      p.tp = v;
    else if (key == "pp")
      p.pp = v;
    else if (key == "dp") {
      p.dp = v;
      have_dp = true;
    } else if (key == "cp")
      p.cp = v;
    else if (key == "ep")
      p.ep = v;
    else if (key == "vpp")
      p.vpp = v;
    else if (key == "first")
      p.first = v;
    else if (key == "last")
      p.last = v;
    else if (key == "sp") {
      if (v > 1) throw SpecError("--parallel \"" + s + "\": sp = " + val + ": expected 0 or 1");
      p.sp = v == 1;
    } else if (key == "zero") {
      if (v > 3) throw SpecError("--parallel \"" + s + "\": zero = " + val + ": expected 0, 1, 2 or 3");
      p.zero = static_cast<int>(v);
    } else {
      throw SpecError("--parallel \"" + s + "\": unknown key '" + key +
                      "': expected tp, pp, dp, cp, ep, vpp, sp, zero, first or last");
    }
  }
  long long product = 1;
  for (const long long d : {p.tp, p.pp, p.dp, p.cp, p.vpp}) {
    if (__builtin_mul_overflow(product, d, &product)) {
      throw SpecError("--parallel \"" + s + "\": tp x pp x dp x cp x vpp overflows a 64-bit integer");
    }
  }
  // Each degree is at most 2^20, so the products below cannot overflow before this check.
  const double all = dbl(p.tp) * dbl(p.pp) * dbl(p.dp) * dbl(p.cp);
  if (all > dbl(kMaxParallelDegree)) {
    throw SpecError("--parallel \"" + s +
                    "\": tp x pp x dp x cp = " + io::format_number(all, io::NumberStyle::shortest) +
                    " devices: expected at most " + std::to_string(kMaxParallelDegree));
  }
  if (devices > kMaxParallelDegree) {
    throw SpecError("--devices " + std::to_string(devices) + ": expected at most " +
                    std::to_string(kMaxParallelDegree));
  }
  if (devices > 0) {
    const long long rest = p.tp * p.pp * p.cp;
    if (!have_dp) {
      if (devices % rest != 0) {
        throw SpecError("--devices " + std::to_string(devices) +
                        " is not a multiple of tp x pp x cp = " + std::to_string(rest));
      }
      p.dp = devices / rest;
    } else if (p.devices() != devices) {
      throw SpecError("--parallel \"" + s + "\" uses " + std::to_string(p.devices()) +
                      " devices; --devices is " + std::to_string(devices));
    }
  }
  return p;
}

namespace {
constexpr lpemu::detail::EnumName<Recompute> kRecomputeNames[] = {
    {"none", Recompute::none}, {"selective", Recompute::selective}, {"full", Recompute::full}};
}  // namespace

Recompute parse_recompute(std::string_view s) {
  if (const auto r = lpemu::detail::enum_value(kRecomputeNames, s)) return *r;
  throw SpecError("--recompute \"" + std::string(s) + "\": expected " +
                  lpemu::detail::join_names(lpemu::detail::enum_spellings(kRecomputeNames), " or "));
}

std::string_view to_string(Recompute r) { return lpemu::detail::enum_name(kRecomputeNames, r); }

const char* recompute_name(Recompute r) { return to_string(r).data(); }

std::vector<long long> stage_layers(const Parallel& p, long long n_layers) {
  const long long pp = p.pp;
  const std::string what = "pp = " + std::to_string(pp) +
                           (p.vpp > 1 ? " x vpp = " + std::to_string(p.vpp) : "") +
                           (p.first > 0 ? ", first = " + std::to_string(p.first) : "") +
                           (p.last > 0 ? ", last = " + std::to_string(p.last) : "") +
                           ", n_layers = " + std::to_string(n_layers) + ": ";
  require(pp >= 1 && pp <= n_layers, what + "expected 1 <= pp <= n_layers");
  std::vector<long long> st(static_cast<std::size_t>(pp), 0);
  if (pp == 1) {
    require((p.first == 0 || p.first == n_layers) && (p.last == 0 || p.last == n_layers),
            what + "one stage holds every layer");
    st[0] = n_layers;
  } else {
    long long first = p.first > 0 ? p.first : p.last;
    long long last = p.last > 0 ? p.last : p.first;
    if (first == 0 && n_layers % pp == 0) {
      first = last = n_layers / pp;
    } else if (first == 0) {
      // Middle stages take ceil(L / pp); the first and last stage share the remainder.
      const long long per = (n_layers + pp - 1) / pp;
      const long long rest = n_layers - (pp - 2) * per;
      first = rest / 2;
      last = rest - first;
    }
    const long long middle = n_layers - first - last;
    require(
        first >= 1 && last >= 1 && middle >= 0 &&
            (pp > 2 ? middle % (pp - 2) == 0 && middle > 0 : middle == 0),
        what +
            "no split gives every stage at least one layer; expected first + (pp - 2) x k + last = n_layers "
            "with first, last and k at least 1");
    st.front() = first;
    st.back() = last;
    for (long long i = 1; i + 1 < pp; ++i) st[static_cast<std::size_t>(i)] = middle / (pp - 2);
  }
  // Interleaving splits each stage into vpp virtual stages of at least one layer; they need not be
  // equal (Llama 3 405B interleaved stages of 7 and 8 layers: Llama Team, arXiv:2407.21783, §3.3.2).
  for (const long long l : st) {
    require(l >= p.vpp, what + "a stage of " + std::to_string(l) + " layers cannot hold vpp = " +
                            std::to_string(p.vpp) + " virtual stages of at least one layer");
  }
  return st;
}

std::vector<std::string> parallel_warnings(const Parallel& par, const System& sys, long long seq) {
  std::vector<std::string> w;
  if (sys.scale_up_size > 0 && par.tp > sys.scale_up_size) {
    w.push_back("tp = " + std::to_string(par.tp) + " is wider than system '" + sys.name +
                "''s scale-up domain of " + std::to_string(sys.scale_up_size) +
                " devices: its all-reduces cross the scale-out network in every layer");
  }
  constexpr long long kAttentionTileRows = 128;  // FlashAttention-2 §3.3: query blocks of 64-128 rows
  if (par.cp > 1 && seq > 0 && seq / par.cp < kAttentionTileRows) {
    w.push_back("cp = " + std::to_string(par.cp) + " leaves " + std::to_string(seq / par.cp) +
                " tokens per rank of a " + std::to_string(seq) + "-token sequence, fewer than one " +
                std::to_string(kAttentionTileRows) +
                "-row attention tile: the K/V exchange outweighs the work it splits");
  }
  return w;
}

double bubble_fraction(long long p, long long m, long long v) {
  require(p >= 1 && m >= 1 && v >= 1, "bubble_fraction: p, m and v must be positive");
  return dbl(p - 1) / (dbl(v) * dbl(m) + dbl(p - 1));
}

TrainResult training_step(const ModelShape& s, const TrainFormats& f, const System& sys, const Target& target,
                          const MacDatapath& mac, const TrainConfig& c) {
  const Parallel& p = c.par;
  const std::string cfg = "parallel " + p.str() + ", model '" + s.name + "': ";
  require(p.ep == 1 || s.moe(), cfg + "ep = " + std::to_string(p.ep) +
                                    ": the shape is dense (no experts); expected " +
                                    "ep = 1, or a shape with experts (e.g. mixtral_8x7b)");
  require(!s.moe() || s.experts % p.ep == 0,
          cfg + "ep = " + std::to_string(p.ep) + " must divide experts = " + std::to_string(s.experts));
  require((p.dp * p.cp) % p.ep == 0, cfg + "ep = " + std::to_string(p.ep) +
                                         " must divide dp x cp = " + std::to_string(p.dp * p.cp) +
                                         " (expert parallelism reuses those ranks)");
  require(s.n_heads % p.tp == 0, cfg + "tp must divide n_heads = " + std::to_string(s.n_heads));
  require(s.n_kv_heads % p.tp == 0 || p.tp % s.n_kv_heads == 0,
          cfg + "tp must divide or be a multiple of n_kv_heads = " + std::to_string(s.n_kv_heads));
  std::vector<long long> stages;
  try {
    stages = stage_layers(p, s.n_layers);
  } catch (const SpecError& e) {
    throw SpecError(cfg + e.what());
  }
  require(c.seq % p.cp == 0, cfg + "cp must divide seq = " + std::to_string(c.seq));
  require(c.global_batch % (p.dp * c.micro_batch) == 0,
          cfg + "global batch " + std::to_string(c.global_batch) +
              " is not a multiple of dp x micro-batch = " + std::to_string(p.dp * c.micro_batch));
  require(p.vpp == 1 || p.pp > 1, cfg + "vpp > 1 needs pp > 1");
  // Megatron-LM's interleaved schedule runs micro-batches in groups of pp (Narayanan et al. 2021,
  // §2.2.2; its scheduler refuses other counts).
  require(p.vpp == 1 || (c.global_batch / (p.dp * c.micro_batch)) % p.pp == 0,
          cfg + "vpp > 1 needs the micro-batches per pipeline (" +
              std::to_string(c.global_batch / std::max(1LL, p.dp * c.micro_batch)) +
              ") to be a multiple of pp");
  require(sys.max_devices == 0 || p.devices() <= sys.max_devices,
          cfg + "needs " + std::to_string(p.devices()) + " devices; system '" + sys.name + "' has at most " +
              std::to_string(sys.max_devices));

  TrainResult r;
  r.config = c;
  const long long m = c.global_batch / (p.dp * c.micro_batch);
  r.microbatches = m;
  const PlanFormats pf{f.weights, f.activations, f.activations};
  const LayerTimes lt = forward_times(s, pf, sys, target, mac, p, c.micro_batch, c.seq, c.flash_attention);
  r.rate_class = lt.rate_class;
  // The critical stage: the last (its layers and the LM head) unless a middle or first stage's
  // layers take longer (uneven stages put fewer layers beside the head).
  double layers = dbl(stages.back()), head = 1.0;
  if (stages.size() > 1) {
    const double busiest = dbl(*std::max_element(stages.begin(), stages.end() - 1));
    if (busiest * lt.layer.total() > layers * lt.layer.total() + lt.head.total()) {
      layers = busiest;
      head = 0.0;
    }
  }

  // One micro-batch on the critical stage: forward, backward = 2 x forward (input and
  // weight gradients), recomputation, TP and CP communication.
  const double fwd_c = layers * lt.layer.compute + head * lt.head.compute;
  const double fwd_m = layers * lt.layer.memory + head * lt.head.memory;
  double rc_c = 0, rc_m = 0;
  if (c.recompute == Recompute::full) {
    rc_c = layers * lt.layer.compute;
    rc_m = layers * lt.layer.memory;
  } else if (c.recompute == Recompute::selective) {
    rc_c = layers * lt.layer.attention;  // attention core: compute or memory, counted as compute
  }
  const double mb_compute =
      3 * fwd_c + rc_c + layers * lt.layer.attention_backward_extra + head * lt.head.attention_backward_extra;
  const double mb_memory = 3 * fwd_m + rc_m;

  // TP: two all-reduces (or, with SP, all-gather + reduce-scatter pairs of the same volume)
  // per layer forward, two backward, two more when the forward is recomputed.
  const double act = dbl(c.micro_batch) * dbl(c.seq / p.cp) * dbl(s.dim) * byte_of(f.act_comm);
  double tp_mb = 0;
  if (p.tp > 1) {
    const int n = 4 + (c.recompute == Recompute::full ? 2 : 0);
    const double one = p.sp ? collective(sys, Collective::all_gather, act, p.tp, 1).time_s +
                                  collective(sys, Collective::reduce_scatter, act, p.tp, 1).time_s
                            : 2 * collective(sys, Collective::all_reduce, act, p.tp, 1).time_s;
    tp_mb = layers * n / 2.0 * one;
  }
  // CP: K and V all-gathered before each layer's attention (again when full recomputation reruns
  // the forward), their gradients reduce-scattered in the backward. All-gather-based context
  // parallelism leaves that exchange on the critical path ("the all-gather communication latency is
  // exposed in the critical path": Llama Team, "The Llama 3 Herd of Models", arXiv:2407.21783,
  // §3.3.2), so it is not overlapped here.
  double cp_mb = 0;
  if (p.cp > 1) {
    const double kv = 2.0 * dbl(c.micro_batch) * dbl(c.seq) * dbl(s.kv_dim()) /
                      dbl(std::min(p.tp, s.n_kv_heads)) * byte_of(f.act_comm);
    const double ag = collective(sys, Collective::all_gather, kv, p.cp, p.tp).time_s;
    const double rs = collective(sys, Collective::reduce_scatter, kv, p.cp, p.tp).time_s;
    cp_mb = layers * ((c.recompute == Recompute::full ? 2.0 : 1.0) * ag + rs);
  }
  // PP: each micro-batch sends its activations forward and their gradients back, per virtual stage.
  double pp_step = 0;
  if (p.pp > 1) {
    const double bytes = act / (p.sp ? dbl(p.tp) : 1.0);
    pp_step = 2.0 * dbl(p.vpp) * dbl(m) * send_recv(sys, bytes, p.tp * p.cp * p.dp).time_s;
  }
  // EP: per MoE layer the routed tokens are sent to their experts' devices and the results sent
  // back (two all-to-alls) forward, two backward, two more when the forward is recomputed; each
  // device sends its tokens' top_k copies (split over TP with SP). Not overlapped.
  double ep_mb = 0;
  if (p.ep > 1) {
    const int n = 4 + (c.recompute == Recompute::full ? 2 : 0);
    const double bytes = dbl(s.top_k) * act / (p.sp ? dbl(p.tp) : 1.0);
    ep_mb = layers * n * collective(sys, Collective::all_to_all, bytes, p.ep, p.tp * p.cp).time_s;
  }
  const double t_mb = mb_compute + mb_memory + tp_mb + cp_mb + ep_mb;
  const double bubble = dbl(p.pp - 1) / dbl(p.vpp) * t_mb;

  // DP (over dp x cp ranks, stride tp): gradients reduced in the communication format; ZeRO-2/3
  // reduce-scatter them and all-gather the updated weights; ZeRO-3 gathers weights again for
  // forward and backward of every micro-batch.
  const DeviceParams dev = params_per_device(s, p);
  const double params = dev.total();
  const long long dpg = p.dp * p.cp;
  // Expert weights are replicated over the dp x cp / ep ranks holding the same experts.
  const long long epg = dpg / p.ep;
  double dp_s = 0;
  if (dpg > 1) {
    double reduce = 0, gather = 0;
    // The dense parameters over all dp x cp ranks (stride tp), the experts over their replicas
    // (stride tp x ep: the EP group is the inner part of the DP x CP ranks).
    for (const auto& [n, group, stride] :
         {std::tuple{dev.dense, dpg, p.tp}, std::tuple{dev.expert, epg, p.tp * p.ep}}) {
      if (n <= 0 || group <= 1) continue;
      const double g = n * byte_of(f.grad_comm), wbytes = n * byte_of(f.weights);
      if (p.zero <= 1) {
        reduce += collective(sys, Collective::all_reduce, g, group, stride).time_s;
      } else {
        reduce += collective(sys, Collective::reduce_scatter, g, group, stride).time_s;
        gather += collective(sys, Collective::all_gather, wbytes, group, stride).time_s;
      }
    }
    // ZeRO-2/3 keep only their shard of the gradients, so every micro-batch's backward
    // reduce-scatters its gradients before the next one accumulates ("gradient reduction is required
    // after every backward because of gradient partitioning. Each rank retains only the accumulated
    // gradients of its partition": DeepSpeed maintainers, github.com/deepspeedai/DeepSpeed/issues/2252);
    // each overlaps at most its own micro-batch's backward. ZeRO-0/1 hold a full gradient buffer
    // (Megatron-Core's distributed optimizer: "6 + 12/d" bytes per parameter, the 4-byte FP32
    // gradient unsharded; docs.nvidia.com/megatron-core, "Distributed Optimizer") and reduce once.
    const double reductions = p.zero >= 2 ? dbl(m) : 1.0;
    double exposed = reductions * (c.overlap_dp ? std::max(0.0, reduce - (2 * fwd_c + 2 * fwd_m)) : reduce);
    exposed += gather;
    if (p.zero == 3) {
      const double regather = 2.0 * dbl(m) * gather;
      exposed += std::max(0.0, regather - dbl(m) * (mb_compute + mb_memory));
    }
    dp_s = exposed;
  }
  // Optimizer (Adam): read and write master weights and both states, read gradients, write weights.
  // ZeRO shards each kind of parameter over the ranks that hold a replica of it.
  const auto sharded = [&](int stage) {
    return stage > 0 && p.zero >= stage ? dev.dense / dbl(dpg) + dev.expert / dbl(epg) : params;
  };
  const double opt_params = sharded(1);
  const double opt_bytes = opt_params * (2 * byte_of(f.master_weights) + 4 * byte_of(f.optimizer_states) +
                                         byte_of(f.gradients) + byte_of(f.weights));
  const double opt_s = opt_bytes / (target.bandwidth_gb_s * 1e9 * target.memory_efficiency());

  StepTime& st = r.time;
  st.compute_s = dbl(m) * mb_compute;
  st.memory_s = dbl(m) * mb_memory;
  st.tp_s = dbl(m) * tp_mb;
  st.cp_s = dbl(m) * cp_mb;
  st.ep_s = dbl(m) * ep_mb;
  st.pp_s = pp_step;
  st.bubble_s = bubble;
  st.dp_s = dp_s;
  st.optimizer_s = opt_s;
  st.recompute_s = dbl(m) * (rc_c + rc_m);
  st.step_s = st.compute_s + st.memory_s + st.tp_s + st.cp_s + st.ep_s + st.pp_s + st.bubble_s + st.dp_s +
              st.optimizer_s;

  // Memory per device.
  DeviceMemory& mem = r.memory;
  mem.capacity = target.capacity_gb * 1e9;
  mem.reserve = kFrameworkReserveBytes;
  mem.weights = sharded(3) * byte_of(f.weights);
  mem.gradients = sharded(2) * byte_of(f.gradients);
  mem.optimizer = sharded(1) * (byte_of(f.master_weights) + 2 * byte_of(f.optimizer_states));
  // 1F1B keeps min(m, pp) micro-batches in flight on the first stage; interleaving adds
  // (pp - 1) / (pp vpp) (Narayanan et al. 2021, §2.2.2). Full recomputation also needs one
  // layer's full set while it runs; the last stage holds FP32 logits of its micro-batch.
  const double in_flight =
      dbl(std::min(m, p.pp)) * (p.vpp > 1 ? 1.0 + dbl(p.pp - 1) / dbl(p.pp * p.vpp) : 1.0);
  double acts = dbl(stages.front()) * in_flight * activation_bytes_per_layer(s, f, c);
  if (c.recompute == Recompute::full) {
    TrainConfig full = c;
    full.recompute = Recompute::selective;
    acts += activation_bytes_per_layer(s, f, full);
  }
  acts += dbl(c.micro_batch) * dbl(c.seq / p.cp) * dbl(s.vocab_size) / dbl(p.tp) * 4.0;
  mem.activations = acts;
  mem.total = mem.weights + mem.gradients + mem.optimizer + mem.activations + mem.reserve;
  mem.fits = mem.total <= mem.capacity;
  if (!mem.fits) {
    std::ostringstream o;
    o.precision(3);
    o << "needs " << mem.total / 1e9 << " GB per device > " << target.capacity_gb << " GB: weights "
      << mem.weights / 1e9 << ", gradients " << mem.gradients / 1e9 << ", optimizer " << mem.optimizer / 1e9
      << ", activations " << mem.activations / 1e9 << ", framework reserve " << mem.reserve / 1e9 << " GB";
    mem.why = o.str();
  }

  r.warnings = parallel_warnings(p, sys, c.seq);
  if (p.zero == 3 && dpg > 1) {
    // ZeRO-3 shards the weights so that a model too large for one device fits (Rajbhandari et
    // al., SC'20, §5); where the unsharded weights, gradients and optimizer states already fit,
    // it only adds the weight all-gathers.
    const double whole = params * (byte_of(f.weights) + byte_of(f.gradients) + byte_of(f.master_weights) +
                                   2 * byte_of(f.optimizer_states));
    if (whole + mem.activations + mem.reserve <= mem.capacity) {
      std::ostringstream o;
      o.precision(3);
      o << "zero = 3 shards " << whole / 1e9
        << " GB of weights, gradients and optimizer states that fit unsharded in " << target.capacity_gb
        << " GB per device: it only adds weight all-gathers";
      r.warnings.push_back(o.str());
    }
  }

  // Model flops: forward of the whole model for every token, x3 for backward, no recomputation.
  Workload whole = build_workload(s, pf, target, mac, Phase::prefill, 1, c.seq);
  double fwd = 0;
  for (const auto& op : whole.ops) {
    fwd += dbl(op.count) * op.flops * (op.name == "lm_head" ? dbl(c.seq) : 1.0);
  }
  r.model_flops = 3.0 * fwd * dbl(c.global_batch);
  r.tokens_per_s = dbl(c.global_batch) * dbl(c.seq) / st.step_s;
  r.tflops_per_device = r.model_flops / st.step_s / dbl(p.devices()) / 1e12;
  r.mfu = r.tflops_per_device * 1e12 / target.peak_ops(r.rate_class);
  return r;
}

std::vector<TrainResult> search_training(const ModelShape& s, const TrainFormats& f, const System& sys,
                                         const Target& target, const MacDatapath& mac, long long devices,
                                         const TrainConfig& base) {
  std::vector<TrainResult> out;
  const long long max_tp = std::min<long long>(sys.scale_up_size, s.n_heads);
  for (long long tp = 1; tp <= max_tp; tp *= 2) {
    for (long long pp = 1; pp <= s.n_layers && pp <= devices; ++pp) {
      try {
        stage_layers(Parallel{1, pp, 1, 1, 1, 1, false, 1, 0, 0}, s.n_layers);
      } catch (const SpecError&) {
        continue;  // no split of the layers over pp stages
      }
      for (long long cp : {1LL, 2LL, 4LL, 8LL}) {
        const long long rest = tp * pp * cp;
        if (devices % rest != 0) continue;
        for (long long mb : {1LL, 2LL, 4LL}) {
          for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
            for (long long ep = 1; ep <= (s.moe() ? s.experts : 1); ep *= 2) {
              if (s.moe() && (s.experts % ep != 0 || (devices / rest) % ep != 0)) continue;
              for (long long vpp : {1LL, 2LL, 4LL}) {
                if (vpp > 1 && pp == 1) continue;
                for (int zero : {1, 2, 3}) {
                  TrainConfig c = base;
                  c.par.ep = ep;
                  c.par.tp = tp;
                  c.par.pp = pp;
                  c.par.cp = cp;
                  c.par.dp = devices / rest;
                  c.par.sp = tp > 1;
                  c.par.vpp = vpp;
                  c.par.zero = zero;
                  c.par.first = c.par.last = 0;
                  c.micro_batch = mb;
                  c.recompute = rc;
                  try {
                    out.push_back(training_step(s, f, sys, target, mac, c));
                  } catch (const SpecError&) {
                    // Inconsistent for this model or batch: not a candidate.
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const TrainResult& a, const TrainResult& b) {
    if (a.memory.fits != b.memory.fits) return a.memory.fits;
    return a.tokens_per_s > b.tokens_per_s;
  });
  return out;
}

std::vector<TrainResult> fewest_devices_for_step(const ModelShape& s, const TrainFormats& f,
                                                 const System& sys, const Target& target,
                                                 const MacDatapath& mac, const TrainConfig& base,
                                                 double max_step_s, long long max_devices) {
  require(max_step_s > 0, "step-time target " + std::to_string(max_step_s) + " s: expected a positive time");
  for (long long n = sys.scale_up_size; n <= max_devices; n *= 2) {
    if (sys.max_devices > 0 && n > sys.max_devices) break;
    auto all = search_training(s, f, sys, target, mac, n, base);
    if (!all.empty() && all.front().memory.fits && all.front().time.step_s <= max_step_s) return all;
  }
  return {};
}

namespace {

// Per-device weight and KV-cache bytes under TP x PP (K/V heads split by TP while there are
// enough of them; beyond that each device keeps a copy of one head).
std::pair<double, double> inference_bytes(const ModelShape& s, const PlanFormats& f, const Parallel& par,
                                          long long batch, long long context) {
  const double weights = dbl(s.parameters()) * byte_of(f.weights) / dbl(par.tp * par.pp);
  const double kv_split = dbl(std::min(par.tp, s.n_kv_heads));
  const double kv = 2.0 * dbl(s.n_layers) * dbl(batch) * dbl(context) * dbl(s.kv_dim()) *
                    byte_of(f.kv_cache) / (kv_split * dbl(par.pp));
  return {weights, kv};
}

}  // namespace

InferenceResult inference_step(const ModelShape& s, const PlanFormats& f, const System& sys,
                               const Target& target, const MacDatapath& mac, const Parallel& par, Phase phase,
                               long long batch, long long context) {
  require(
      par.dp == 1 && par.cp == 1 && par.ep == 1,
      "inference: parallel " + par.str() + ": expected only tp and pp (replicas scale throughput linearly)");
  require(s.n_heads % par.tp == 0, "inference: tp = " + std::to_string(par.tp) +
                                       " must divide n_heads = " + std::to_string(s.n_heads));
  try {
    stage_layers(par, s.n_layers);
  } catch (const SpecError& e) {
    throw SpecError(std::string("inference: ") + e.what());
  }
  InferenceResult r;
  r.par = par;
  r.phase = phase;
  r.batch = batch;
  r.context = context;
  Workload w = build_workload(s, f, target, mac, phase, batch, context);
  const double t = dbl(par.tp), bw = target.bandwidth_gb_s * 1e9 * target.memory_efficiency();
  const double layers = dbl(s.n_layers) / dbl(par.pp);
  double layer_c = 0, layer_m = 0, head_c = 0, head_m = 0, layer_launch = 0, head_launch = 0;
  for (const auto& op : w.ops) {
    const bool per_layer = op.count == s.n_layers;
    double c = 0, mem = 0;
    if (op.kind == "gemm") {
      double k = op.k, n = op.n;
      if (op.name == "attn.o_proj" || op.name == "mlp.down")
        k /= t;
      else
        n /= t;
      // op.weight_copies: the experts this step's tokens reach (1 for a dense op).
      const double bytes = op.weight_copies * (k * n * byte_of(f.weights) + f.weights.tensor_scale_bytes) +
                           op.m * k * byte_of(f.activations) + op.m * n * byte_of(f.activations);
      const KernelEstimate e = gemm_kernel(sys, target, op.rate_class, op.m, k, n, bytes, op.passes);
      const double mem_s = e.memory_s / target.memory_efficiency();
      (e.compute_s >= mem_s ? c : mem) = std::max(e.compute_s, mem_s);
    } else if (op.kind == "attention") {
      // K/V heads split over min(tp, n_kv_heads) devices; queries over tp. A fused kernel at the
      // class's measured fused-attention forward rate.
      const double cc = op.flops * op.passes / t /
                        (target.peak_ops(op.rate_class) * target.attention_efficiency(op.rate_class, false));
      const double mm = op.bytes / dbl(std::min(par.tp, s.n_kv_heads)) / bw;
      (cc >= mm ? c : mem) = std::max(cc, mm);
    } else {
      mem = op.bytes / t / bw;
    }
    (per_layer ? layer_c : head_c) += c;
    (per_layer ? layer_m : head_m) += mem;
    // Each op is one kernel the host launches: a kernel shorter than the launch leaves the device
    // waiting for the next one (see kKernelLaunchS).
    (per_layer ? layer_launch : head_launch) += std::max(0.0, kKernelLaunchS - (c + mem));
  }
  // Two all-reduces of the layer's activations per layer (after attention and after the MLP).
  const double act = w.tokens * dbl(s.dim) * byte_of(f.activations);
  const double ar = par.tp > 1 ? collective(sys, Collective::all_reduce, act, par.tp, 1).time_s : 0.0;
  // Without micro-batching the stages run one after another for the whole batch.
  r.compute_s = dbl(par.pp) * layers * layer_c + head_c;
  r.memory_s = dbl(par.pp) * layers * layer_m + head_m;
  r.tp_s = dbl(par.pp) * layers * 2 * ar;
  r.pp_s = par.pp > 1 ? dbl(par.pp - 1) * send_recv(sys, act, par.tp).time_s : 0.0;
  r.launch_s = dbl(par.pp) * layers * layer_launch + head_launch;
  r.step_s = r.compute_s + r.memory_s + r.tp_s + r.pp_s + r.launch_s;
  r.tokens_per_s = (phase == Phase::decode ? dbl(batch) : w.tokens) / r.step_s;
  const auto [wb, kvb] = inference_bytes(s, f, par, batch, context);
  r.weight_bytes = wb;
  r.kv_bytes = kvb;
  r.capacity = target.capacity_gb * 1e9;
  r.fits = wb + kvb <= r.capacity;
  if (!r.fits) {
    std::ostringstream o;
    o.precision(3);
    o << "weights " << wb / 1e9 << " GB + KV cache " << kvb / 1e9 << " GB per device > " << target.capacity_gb
      << " GB";
    r.why = o.str();
  }
  r.warnings = parallel_warnings(par, sys, phase == Phase::prefill ? context : 0);
  return r;
}

long long max_batch_for_kv(const ModelShape& s, const PlanFormats& f, const Target& target,
                           const Parallel& par, long long context) {
  const auto [wb, kv1] = inference_bytes(s, f, par, 1, context);
  const double free = target.capacity_gb * 1e9 - wb;
  if (free < kv1) return 0;
  return static_cast<long long>(std::floor(free / kv1));
}

}  // namespace lpemu::cost
