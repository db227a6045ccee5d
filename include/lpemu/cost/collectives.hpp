// Collective communication on a system's topology with the alpha-beta model: each step costs a
// latency plus bytes / bandwidth. Ring, tree and hierarchical algorithms follow NCCL's
// (Thakur, Rabenseifner & Gropp, "Optimization of collective communication operations in
// MPICH", IJHPCA 2005; NCCL docs); the torus runs one bidirectional ring per dimension.
#pragma once

#include <string>

#include "lpemu/cost/system.hpp"

namespace lpemu::cost {

/// The collectives of data-, tensor-, context- and expert-parallel training.
enum class Collective { all_reduce, all_gather, reduce_scatter, all_to_all };

/// Name of a collective as printed ("all_reduce", ...).
const char* collective_name(Collective c);

/// Time of a collective and how it was computed.
struct CollectiveCost {
  double time_s = 0;
  double bandwidth_s = 0;  ///< the bytes / bandwidth terms
  double latency_s = 0;    ///< the per-step latency terms
  std::string algorithm;   ///< e.g. "ring(8) on scale-up", "hierarchical 8 x 16"
};

/// Ring on one flat network of `p` devices: all-reduce 2(p-1) steps of bytes/p, all-gather and
/// reduce-scatter (p-1) steps of bytes/p, all-to-all (p-1) exchanges of bytes/p. `bytes` is the
/// full buffer (all-reduce: per device; all-gather: the gathered output; reduce-scatter: the
/// input; all-to-all: what one device sends in all, its own share included).
CollectiveCost ring(Collective c, double bytes, long long p, const Link& link);

/// Pipelined binary-tree all-reduce (reduce then broadcast): 2 x bytes / bandwidth plus
/// 2 ceil(log2 p) latencies. Other collectives fall back to `ring`.
CollectiveCost tree(Collective c, double bytes, long long p, const Link& link);

/// Bidirectional rings along the torus dimensions in `rings` (sizes, one per dimension used):
/// reduce-scatter dimension by dimension on a shrinking buffer, then all-gather back.
CollectiveCost torus(Collective c, double bytes, const std::vector<long long>& rings, const Link& link);

/// A collective over a group of `p` devices whose ranks are `stride` apart (tensor parallel is
/// stride 1, data parallel stride tp x cp, ...), placed on `sys`: inside one scale-up domain the
/// faster of ring and tree (switch) or per-dimension rings (torus); across domains hierarchical
/// (reduce-scatter inside, the collective across domains on each device's own NIC, all-gather
/// inside), the faster of ring and tree on each level as NCCL's tuner chooses.
CollectiveCost collective(const System& sys, Collective c, double bytes, long long p, long long stride = 1);

/// A point-to-point transfer of `bytes` between two devices `stride` ranks apart.
CollectiveCost send_recv(const System& sys, double bytes, long long stride);

}  // namespace lpemu::cost
