// Collectives against hand arithmetic of the alpha-beta model: ring, tree, torus and
// hierarchical all-reduce / all-gather / reduce-scatter / all-to-all; placement on systems.
#include <catch2/catch.hpp>

#include "lpemu/cost/collectives.hpp"
#include "lpemu/cost/system.hpp"
#include "lpemu/error.hpp"

namespace {

using lpemu::cost::Collective;
using lpemu::cost::Link;
using lpemu::cost::System;

Link link(double gb_s, double us) {
  Link l;
  l.bandwidth_gb_s = gb_s;
  l.latency_us = us;
  return l;
}

System switch_system(long long domain, double up_gb_s, double out_gb_s) {
  System s;
  s.name = "test";
  s.scale_up_kind = "switch";
  s.scale_up_size = domain;
  s.devices_per_node = domain;
  s.scale_up = link(up_gb_s, 1.0);
  s.scale_out = link(out_gb_s, 5.0);
  return s;
}

TEST_CASE("ring all-reduce of N bytes over p devices: 2(p-1)/p N/B + 2(p-1) alpha", "[cost][cluster]") {
  const Link l = link(100, 1);  // 1e11 B/s, 1 us
  const auto r = lpemu::cost::ring(Collective::all_reduce, 1e9, 8, l);
  CHECK(r.bandwidth_s == Approx(2.0 * 7 / 8 * 1e9 / 1e11));  // 17.5 ms
  CHECK(r.latency_s == Approx(14e-6));
  CHECK(r.time_s == Approx(0.0175 + 14e-6));
  // All-gather and reduce-scatter: half the steps.
  for (auto c : {Collective::all_gather, Collective::reduce_scatter, Collective::all_to_all}) {
    const auto h = lpemu::cost::ring(c, 1e9, 8, l);
    CHECK(h.time_s == Approx(7.0 / 8 * 1e9 / 1e11 + 7e-6));
  }
  CHECK(lpemu::cost::ring(Collective::all_reduce, 1e9, 1, l).time_s == 0);
  CHECK_THROWS_AS(lpemu::cost::ring(Collective::all_reduce, 1e9, 0, l), lpemu::SpecError);
}

TEST_CASE("tree all-reduce: 2 N/B + 2 ceil(log2 p) alpha; wins for small messages", "[cost][cluster]") {
  const Link l = link(50, 5);
  const auto t = lpemu::cost::tree(Collective::all_reduce, 1e6, 100, l);
  CHECK(t.time_s == Approx(2e6 / 5e10 + 2 * 7 * 5e-6));
  const auto r = lpemu::cost::ring(Collective::all_reduce, 1e6, 100, l);
  CHECK(r.time_s == Approx(2.0 * 99 / 100 * 1e6 / 5e10 + 2 * 99 * 5e-6));
  CHECK(t.time_s < r.time_s);
}

TEST_CASE("torus all-reduce: bidirectional rings per dimension on a shrinking buffer", "[cost][cluster]") {
  const Link l = link(50, 2);  // per link per direction; a bidirectional ring moves 1e11 B/s
  const auto t = lpemu::cost::torus(Collective::all_reduce, 1e9, {4, 4}, l);
  const double rs = 3.0 / 4 * 1e9 / 1e11 + 3 * 2e-6 + 3.0 / 4 * 0.25e9 / 1e11 + 3 * 2e-6;
  CHECK(t.time_s == Approx(2 * rs));
  CHECK(t.algorithm == "torus(4x4)");
  const auto ag = lpemu::cost::torus(Collective::all_gather, 1e9, {4, 4}, l);
  CHECK(ag.time_s == Approx(rs));

  // Placement: 16 ranks, stride 1, on a 4x4x4 torus use the first two dimensions; stride 4 the last two.
  System s;
  s.scale_up_kind = "torus";
  s.torus_dims = {4, 4, 4};
  s.scale_up_size = 64;
  s.scale_up = l;
  s.scale_out = link(6.25, 10);
  CHECK(lpemu::cost::collective(s, Collective::all_reduce, 1e9, 16, 1).algorithm == "torus(4x4)");
  CHECK(lpemu::cost::collective(s, Collective::all_reduce, 1e9, 16, 1).time_s == Approx(2 * rs));
  CHECK(lpemu::cost::collective(s, Collective::all_reduce, 1e9, 16, 4).algorithm == "torus(4x4)");
  CHECK(lpemu::cost::collective(s, Collective::all_reduce, 1e9, 4, 16).algorithm == "torus(4)");
}

TEST_CASE("hierarchical all-reduce across scale-up domains", "[cost][cluster]") {
  const System s = switch_system(8, 450, 50);
  const double n = 1e9;
  // Inside one domain: a plain ring on NVLink.
  const auto in = lpemu::cost::collective(s, Collective::all_reduce, n, 8, 1);
  CHECK(in.time_s == Approx(2.0 * 7 / 8 * n / 450e9 + 14e-6));
  // 16 devices = 8 per domain x 2 domains: RS inside, AR of n/8 across (ring of 2 beats tree),
  // AG inside.
  const auto h = lpemu::cost::collective(s, Collective::all_reduce, n, 16, 1);
  const double inside = 7.0 / 8 * n / 450e9 + 7e-6;
  const double across = 2.0 * 1 / 2 * (n / 8) / 50e9 + 2 * 5e-6;
  CHECK(h.time_s == Approx(2 * inside + across));
  CHECK(h.algorithm == "hierarchical 8 x 2");
  // A data-parallel group with stride 8 never shares a domain: flat over the NICs.
  const auto dp = lpemu::cost::collective(s, Collective::all_reduce, n, 4, 8);
  CHECK(dp.time_s == Approx(2.0 * 3 / 4 * n / 50e9 + 6 * 5e-6));
  // Stride 2 in a domain of 8: 4 members per domain.
  CHECK(lpemu::cost::collective(s, Collective::all_reduce, n, 8, 2).algorithm == "hierarchical 4 x 2");
  // All-to-all over 16: 7/16 of the buffer on NVLink, 8/16 over the NICs, at the same time.
  const auto a2a = lpemu::cost::collective(s, Collective::all_to_all, n, 16, 1);
  CHECK(a2a.time_s == Approx(std::max(n * 7 / 16 / 450e9, n * 8 / 16 / 50e9) + 15 * 5e-6));
  CHECK(lpemu::cost::collective(s, Collective::all_reduce, n, 1, 1).time_s == 0);
}

TEST_CASE("shipped systems load with sources; bad files are rejected with the field", "[cost][cluster]") {
  for (const auto& name : lpemu::cost::system_names()) {
    const System s = lpemu::cost::load_system(name);
    CHECK(!s.source.empty());
    CHECK(!s.scale_up.source.empty());
    CHECK(!s.scale_out.source.empty());
    CHECK(!s.kernel_source.empty());
    CHECK(s.scale_up_size >= 1);
  }
  CHECK(lpemu::cost::load_system("dgx_h100").scale_up_size == 8);
  CHECK(lpemu::cost::load_system("gb200_nvl72").scale_up_size == 72);
  CHECK(lpemu::cost::load_system("tpu_v5p_pod").scale_up_size == 16 * 16 * 24);
  CHECK_THROWS_AS(lpemu::cost::load_system("dgx_h10"), lpemu::UnknownNameError);
  const char* bad = R"(name = "x"
device = "h100_sxm"
source = "s"
devices_per_node = 8
[scale_up]
kind = "mesh"
size = 8
bandwidth_gb_s = 1
latency_us = 1
source = "s"
[scale_out]
bandwidth_gb_s = 1
latency_us = 1
source = "s"
[kernel]
units = 1
tile_m = 1
tile_n = 1
source = "s"
)";
  CHECK_THROWS_WITH(lpemu::cost::parse_system_toml(bad, "bad.toml"), Catch::Contains("bad.toml") &&
                                                                         Catch::Contains("scale_up.kind") &&
                                                                         Catch::Contains("torus"));
}

TEST_CASE("collectives run at a link's measured bus bandwidth where one is published", "[cost][cluster]") {
  Link l = link(100, 1);
  l.achieved_gb_s = 80;  // e.g. nccl-tests busbw 80% of the line rate
  CHECK(l.effective_gb_s() == 80);
  const auto r = lpemu::cost::ring(Collective::all_reduce, 1e9, 8, l);
  CHECK(r.bandwidth_s == Approx(2.0 * 7 / 8 * 1e9 / 80e9));
  CHECK(r.latency_s == Approx(14e-6));
  // The shipped DGX systems carry nccl-tests figures: NVLink 4 at 370 of 450 GB/s, NDR at 47 of 50.
  const System h = lpemu::cost::load_system("dgx_h100");
  CHECK(h.scale_up.effective_gb_s() == 370);
  CHECK(h.scale_out.effective_gb_s() == 47);
  CHECK_FALSE(h.scale_up.achieved_source.empty());
  const auto ar = lpemu::cost::collective(h, Collective::all_gather, 8e6, 8, 1);
  CHECK(ar.bandwidth_s == Approx(7.0 / 8 * 8e6 / 370e9));
  // A measured bus bandwidth above the line rate is refused by name.
  const char* bad = R"(name = "x"
device = "h100_sxm"
source = "s"
devices_per_node = 8
[scale_up]
kind = "switch"
size = 8
bandwidth_gb_s = 100
achieved_gb_s = 120
achieved_source = "s"
latency_us = 1
source = "s"
[scale_out]
bandwidth_gb_s = 1
latency_us = 1
source = "s"
[kernel]
units = 1
tile_m = 1
tile_n = 1
source = "s"
)";
  CHECK_THROWS_WITH(lpemu::cost::parse_system_toml(bad, "bad.toml"),
                    Catch::Contains("bad.toml") && Catch::Contains("scale_up.achieved_gb_s") &&
                        Catch::Contains("at most bandwidth_gb_s"));
}

}  // namespace
