#include "lpemu/cost/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "lpemu/error.hpp"

namespace lpemu::cost {
namespace {

// Collectives run at the bus bandwidth measured on the link where it is published (nccl-tests'
// busBw: the wire rate less the protocol overhead), else at the link's rate.
double bw(const Link& l) { return l.effective_gb_s() * 1e9; }
double lat(const Link& l) { return l.latency_us * 1e-6; }

CollectiveCost make(double bandwidth_s, double latency_s, std::string algorithm) {
  return {bandwidth_s + latency_s, bandwidth_s, latency_s, std::move(algorithm)};
}

CollectiveCost add(CollectiveCost a, const CollectiveCost& b) {
  a.time_s += b.time_s;
  a.bandwidth_s += b.bandwidth_s;
  a.latency_s += b.latency_s;
  return a;
}

void check_group(double bytes, long long p) {
  if (p < 1) throw SpecError("collective group size " + std::to_string(p) + ": expected a positive integer");
  if (!(bytes >= 0))
    throw SpecError("collective of " + std::to_string(bytes) + " bytes: expected bytes >= 0");
}

// Ring sizes along the torus dimensions for a group of p ranks `stride` apart, ranks laid out
// with the first dimension fastest. Whatever does not map onto whole dimensions is put on the
// next dimension with room (a partial ring).
std::vector<long long> torus_rings(const std::vector<long long>& dims, long long p, long long stride) {
  std::vector<long long> cap = dims;
  for (auto& c : cap) {
    const long long g = std::gcd(stride, c);
    c /= g;
    stride /= g;
  }
  std::vector<long long> rings;
  for (auto c : cap) {
    if (p == 1) break;
    const long long g = std::gcd(p, c);
    if (g > 1) rings.push_back(g);
    p /= g;
  }
  if (p > 1) rings.push_back(p);
  return rings;
}

}  // namespace

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_to_all: return "all_to_all";
  }
  return "?";
}

CollectiveCost ring(Collective c, double bytes, long long p, const Link& link) {
  check_group(bytes, p);
  const std::string name = "ring(" + std::to_string(p) + ")";
  if (p == 1) return make(0, 0, name);
  const double steps = static_cast<double>(p - 1) * (c == Collective::all_reduce ? 2.0 : 1.0);
  const double chunk = bytes / static_cast<double>(p);
  return make(steps * chunk / bw(link), steps * lat(link), name);
}

CollectiveCost tree(Collective c, double bytes, long long p, const Link& link) {
  if (c != Collective::all_reduce) return ring(c, bytes, p, link);
  check_group(bytes, p);
  const std::string name = "tree(" + std::to_string(p) + ")";
  if (p == 1) return make(0, 0, name);
  const double depth = std::ceil(std::log2(static_cast<double>(p)));
  return make(2.0 * bytes / bw(link), 2.0 * depth * lat(link), name);
}

CollectiveCost torus(Collective c, double bytes, const std::vector<long long>& rings, const Link& link) {
  std::string name = "torus(";
  for (std::size_t i = 0; i < rings.size(); ++i) name += (i ? "x" : "") + std::to_string(rings[i]);
  name += ")";
  // A bidirectional ring moves half the data each way: twice one link's bandwidth.
  Link both = link;
  both.bandwidth_gb_s = 2.0 * link.bandwidth_gb_s;
  both.achieved_gb_s = 2.0 * link.achieved_gb_s;
  CollectiveCost total = make(0, 0, name);
  if (c == Collective::all_to_all) {
    // Each dimension in turn exchanges the whole buffer among its ring (dimension-ordered routing).
    for (auto r : rings) total = add(total, ring(c, bytes, r, both));
    total.algorithm = name;
    return total;
  }
  // Reduce-scatter along each dimension on a buffer shrunk by the rings before it; all-gather
  // retraces the same steps. An all-reduce does both.
  double b = bytes;
  CollectiveCost half = make(0, 0, name);
  for (auto r : rings) {
    half = add(half, ring(Collective::reduce_scatter, b, r, both));
    b /= static_cast<double>(r);
  }
  total = c == Collective::all_reduce ? add(half, half) : half;
  total.algorithm = name;
  return total;
}

CollectiveCost collective(const System& sys, Collective c, double bytes, long long p, long long stride) {
  check_group(bytes, p);
  if (stride < 1)
    throw SpecError("collective stride " + std::to_string(stride) + ": expected a positive integer");
  if (p == 1) return make(0, 0, "none");
  const long long domain = sys.scale_up_size;
  // Members of the group that share one scale-up domain.
  const long long inner = stride >= domain ? 1 : std::min(p, std::max(1LL, domain / stride));
  const long long outer = (p + inner - 1) / inner;
  auto inside = [&](Collective cc, double b) {
    if (sys.scale_up_kind == "torus")
      return torus(cc, b, torus_rings(sys.torus_dims, inner, stride), sys.scale_up);
    CollectiveCost r = ring(cc, b, inner, sys.scale_up);
    const CollectiveCost t = tree(cc, b, inner, sys.scale_up);
    if (t.time_s < r.time_s) r = t;
    r.algorithm += " scale-up";
    return r;
  };
  auto across = [&](Collective cc, double b) {
    CollectiveCost r = ring(cc, b, outer, sys.scale_out);
    const CollectiveCost t = tree(cc, b, outer, sys.scale_out);
    if (t.time_s < r.time_s) r = t;
    r.algorithm += " scale-out";
    return r;
  };
  if (outer == 1) return inside(c, bytes);
  if (inner == 1) return across(c, bytes);
  const double ni = static_cast<double>(inner);
  CollectiveCost out;
  switch (c) {
    case Collective::all_reduce:
      // Reduce-scatter inside, all-reduce of 1/inner across (each device on its own NIC), all-gather inside.
      out = add(add(inside(Collective::reduce_scatter, bytes), across(Collective::all_reduce, bytes / ni)),
                inside(Collective::all_gather, bytes));
      break;
    case Collective::all_gather:
      out = add(across(Collective::all_gather, bytes / ni), inside(Collective::all_gather, bytes));
      break;
    case Collective::reduce_scatter:
      out = add(inside(Collective::reduce_scatter, bytes), across(Collective::reduce_scatter, bytes / ni));
      break;
    case Collective::all_to_all: {
      // (inner - 1)/p of the buffer stays in the domain, (p - inner)/p leaves it; both run at once.
      const double pd = static_cast<double>(p);
      const double in_s = bytes * (ni - 1) / pd / bw(sys.scale_up);
      const double out_s = bytes * (pd - ni) / pd / bw(sys.scale_out);
      const double l = static_cast<double>(p - 1) * sys.scale_out.latency_us * 1e-6;
      out = make(std::max(in_s, out_s), l, "");
      break;
    }
  }
  out.algorithm = "hierarchical " + std::to_string(inner) + " x " + std::to_string(outer);
  return out;
}

CollectiveCost send_recv(const System& sys, double bytes, long long stride) {
  const Link& l = stride < sys.scale_up_size ? sys.scale_up : sys.scale_out;
  return make(bytes / bw(l), l.latency_us * 1e-6,
              stride < sys.scale_up_size ? "p2p scale-up" : "p2p scale-out");
}

}  // namespace lpemu::cost
