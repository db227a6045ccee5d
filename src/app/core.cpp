#include "lpemu/app/core.hpp"

#include <algorithm>
#include <utility>

#include "lpemu/error.hpp"

namespace lpemu::app {

namespace {

// Attention's query blocks in `phase`: (first query position, positions) per block; one block of
// every position when decoding or when the causal mask is not exploited.
std::vector<std::pair<long long, long long>> query_blocks(cost::Phase phase, long long context,
                                                          long long causal_block) {
  if (phase == cost::Phase::decode) return {{context - 1, 1}};
  if (causal_block <= 0) return {{0, context}};
  std::vector<std::pair<long long, long long>> out;
  for (long long first = 0; first < context; first += causal_block)
    out.emplace_back(first, std::min(causal_block, context - first));
  return out;
}

}  // namespace

std::vector<core::Gemm> shape_gemms(const cost::ModelShape& s, std::string_view scope, cost::Phase phase,
                                    long long batch, long long context, long long causal_block) {
  if (scope != "layer" && scope != "step") {
    throw SpecError("core: scope '" + std::string(scope) + "': expected \"layer\" or \"step\"");
  }
  if (batch < 1 || context < 1) throw SpecError("core: batch and context: expected integers >= 1");
  const bool decode = phase == cost::Phase::decode;
  const long long tokens = decode ? batch : batch * context;  // rows entering the linear layers
  const long long group = s.n_heads / s.n_kv_heads;           // query heads sharing one K/V head
  std::vector<core::Gemm> g;
  g.push_back({"q_proj", tokens, s.dim, s.dim, 1});
  g.push_back({"k_proj", tokens, s.kv_dim(), s.dim, 1});
  g.push_back({"v_proj", tokens, s.kv_dim(), s.dim, 1});
  // Attention per sequence and K/V head: the group's queries against the keys they see (decode:
  // one position against the whole cache; prefill: per block of query positions, the keys up to
  // the block's last position, or the whole square without a causal block).
  const auto blocks = query_blocks(phase, context, causal_block);
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    const long long rows = blocks[j].second * group;
    const long long keys = decode ? context : blocks[j].first + blocks[j].second;
    const std::string tag = blocks.size() > 1 ? "[" + std::to_string(j) + "]" : "";
    g.push_back({"qk" + tag, rows, keys, s.head_dim(), batch * s.n_kv_heads});  // shape_softmax follows it
    g.push_back({"pv" + tag, rows, s.head_dim(), keys, batch * s.n_kv_heads});
  }
  g.push_back({"o_proj", tokens, s.dim, s.dim, 1});
  const long long mlps = s.mlps_per_token();  // each token's rows pass through top_k experts
  if (s.gated_mlp) g.push_back({"gate", tokens, s.hidden_dim, s.dim, mlps});
  g.push_back({"up", tokens, s.hidden_dim, s.dim, mlps});
  g.push_back({"down", tokens, s.dim, s.hidden_dim, mlps});
  if (scope == "step") {
    for (core::Gemm& x : g) x.count *= s.n_layers;
    g.push_back({"lm_head", batch, s.vocab_size, s.dim, 1});
  }
  return g;
}

std::vector<core::SoftmaxCycles> shape_softmax(const core::Core& c, const cost::ModelShape& s,
                                               std::string_view scope, cost::Phase phase, long long batch,
                                               long long context, long long causal_block) {
  // The scores of shape_gemms' "qk" runs: per query block, its positions x group rows by the keys
  // they see, per sequence and K/V head, once per block (every block with scope "step").
  const long long group = s.n_heads / s.n_kv_heads;
  const auto blocks = query_blocks(phase, context, causal_block);
  std::vector<core::SoftmaxCycles> out;
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    const long long keys = phase == cost::Phase::decode ? context : blocks[j].first + blocks[j].second;
    out.push_back(core::simulate_softmax(
        c, blocks.size() > 1 ? "softmax[" + std::to_string(j) + "]" : "softmax", blocks[j].second * group,
        keys, batch * s.n_kv_heads * (scope == "step" ? s.n_layers : 1)));
  }
  return out;
}

CoreResult simulate_core(experiment::Context& ctx, const CoreRequest& q) {
  CoreResult r;
  r.core = core::load_core(q.core, ctx.formats_dirs);
  if (!q.dataflow.empty()) r.core = core::with_dataflow(r.core, core::parse_dataflow(q.dataflow));
  if (q.rows != 0 || q.cols != 0) {
    r.core = core::with_array(r.core, q.rows != 0 ? q.rows : r.core.rows, q.cols != 0 ? q.cols : r.core.cols);
  }
  if (q.sram_scale < 1 || q.sram_scale > 1) r.core = core::with_scratchpads_scaled(r.core, q.sram_scale);
  r.datapath = q.datapath.empty() ? r.core.lane : q.datapath;
  const datapath::Datapath& lane = ctx.datapaths().get(r.datapath);
  r.lane = core::lane_of(r.core, lane);
  std::vector<core::Gemm> gemms;
  if (!q.model.empty()) {
    if (q.m != 0 || q.n != 0 || q.k != 0)
      throw SpecError("core: give either m, n and k or a model, not both");
    const cost::ModelShape& shape = ctx.costs().shape(q.model);
    const cost::Phase phase = cost::parse_phase(q.phase);
    if (q.causal_block < 0) {
      throw SpecError("core: causal_block = " + std::to_string(q.causal_block) +
                      ": expected query positions per block (>= 1) or 0 (the mask not exploited)");
    }
    gemms = shape_gemms(shape, q.scope, phase, q.batch, q.context, q.causal_block);
    if (r.core.softmax.elements_per_cycle > 0)
      r.softmax = shape_softmax(r.core, shape, q.scope, phase, q.batch, q.context, q.causal_block);
  } else {
    if (q.m < 1 || q.n < 1 || q.k < 1) {
      throw SpecError("core: m = " + std::to_string(q.m) + ", n = " + std::to_string(q.n) +
                      ", k = " + std::to_string(q.k) + ": expected a GEMM (m, n, k >= 1) or a model");
    }
    gemms.push_back({"gemm", q.m, q.n, q.k, 1});
  }
  for (const core::Gemm& g : gemms) r.gemms.push_back(core::simulate_gemm(r.core, lane, g));
  r.totals = core::totals(r.core, r.lane, r.gemms, r.softmax);
  return r;
}

namespace {

Fields traffic(const core::Traffic& t) {
  return {{"sram_reads", t.sram_reads}, {"sram_writes", t.sram_writes}, {"dram_bytes", t.dram_bytes}};
}

}  // namespace

Fields fields(const CoreResult& r) {
  Fields gemms = Fields::array();
  for (const core::GemmCycles& g : r.gemms) {
    gemms.push_back({{"name", g.gemm.name},
                     {"m", g.gemm.m},
                     {"n", g.gemm.n},
                     {"k", g.gemm.k},
                     {"count", g.gemm.count},
                     {"row_folds", g.row_folds},
                     {"col_folds", g.col_folds},
                     {"splits", g.splits},
                     {"cycles_per_fold", g.cycles_per_fold},
                     {"compute_cycles", g.compute_cycles},
                     {"latency_cycles", g.latency_cycles},
                     {"sram_stall_cycles", g.sram_stall_cycles},
                     {"dram_stall_cycles", g.dram_stall_cycles},
                     {"total_cycles", g.total_cycles},
                     {"seconds", g.seconds},
                     {"macs", g.macs},
                     {"mapping_efficiency", g.mapping_efficiency},
                     {"utilization", g.utilization},
                     {"compute_bound", g.compute_bound},
                     {"loop_order", g.loop_order},
                     {"a", traffic(g.a)},
                     {"b", traffic(g.b)},
                     {"c", traffic(g.c)},
                     {"dram_bytes", g.dram_bytes},
                     {"l2_bytes", g.l2_bytes},
                     {"energy_pj", g.energy_pj},
                     {"mac_energy_pj", g.mac_energy_pj},
                     {"sram_energy_pj", g.sram_energy_pj},
                     {"l2_energy_pj", g.l2_energy_pj},
                     {"dram_energy_pj", g.dram_energy_pj}});
  }
  Fields softmax = Fields::array();
  for (const core::SoftmaxCycles& s : r.softmax) {
    softmax.push_back({{"name", s.name},
                       {"rows", s.rows},
                       {"cols", s.cols},
                       {"count", s.count},
                       {"cycles", s.cycles},
                       {"seconds", s.seconds},
                       {"energy_pj", s.energy_pj}});
  }
  const core::GemmTotals& t = r.totals;
  return {{"core", r.core.name},
          {"kind", std::string(core::to_string(r.core.kind))},
          {"rows", r.core.rows},
          {"cols", r.core.cols},
          {"units", r.core.dot_units},
          {"terms", r.core.dot_terms},
          {"peak_macs_per_cycle", core::peak_macs_per_cycle(r.core, r.lane)},
          {"dataflow", std::string(core::to_string(r.core.dataflow))},
          {"clock_ghz", r.core.clock_ghz},
          {"sram_kib", {{"a", r.core.a.kib}, {"b", r.core.b.kib}, {"c", r.core.c.kib}}},
          {"datapath", r.datapath},
          {"lane",
           {{"a_bits", r.lane.a_bits},
            {"b_bits", r.lane.b_bits},
            {"pack", r.lane.pack},
            {"pipeline_depth", r.lane.pipeline_depth},
            {"c_bits", r.lane.c_bits}}},
          {"gemms", gemms},
          {"softmax", softmax},
          {"totals",
           {{"macs", t.macs},
            {"total_cycles", t.total_cycles},
            {"softmax_cycles", t.softmax_cycles},
            {"latency_cycles", t.latency_cycles},
            {"compute_cycles", t.compute_cycles},
            {"seconds", t.seconds},
            {"dram_bytes", t.dram_bytes},
            {"l2_bytes", t.l2_bytes},
            {"energy_pj", t.energy_pj},
            {"softmax_energy_pj", t.softmax_energy_pj},
            {"utilization", t.utilization}}}};
}

CoreRequest core_request(const Fields& f) {
  CoreRequest r;
  FieldReader in(f, "core");
  in.read("core", r.core);
  in.read("datapath", r.datapath);
  in.read("dataflow", r.dataflow);
  in.read("rows", r.rows);
  in.read("cols", r.cols);
  in.read("sram_scale", r.sram_scale);
  in.read("m", r.m);
  in.read("n", r.n);
  in.read("k", r.k);
  in.read("model", r.model);
  in.read("scope", r.scope);
  in.read("phase", r.phase);
  in.read("batch", r.batch);
  in.read("context", r.context);
  in.read("causal_block", r.causal_block);
  in.finish();
  if (r.core.empty()) throw SpecError("core: core (a core name or a .toml file) is required");
  return r;
}

}  // namespace lpemu::app
