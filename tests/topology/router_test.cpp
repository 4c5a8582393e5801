// The up*/down* router against a plain breadth-first search over the whole graph, on every
// fabric the builders make; paths drawn by hash cover the equal-cost set evenly; an even
// spread conserves the flow. Multi-plane and pod fabrics against their closed forms.
#include <gtest/gtest.h>

#include <map>
#include <queue>
#include <random>
#include <set>

#include "plan/plan_io.hpp"
#include "plan/rank_layout.hpp"
#include "topology/analysis.hpp"
#include "topology/builders.hpp"
#include "topology/faults.hpp"
#include "topology/router.hpp"
#include "topology/routing.hpp"

namespace meshwork::topology {
namespace {

plan::Plan load(const std::string& cluster, std::int64_t gpus) {
  auto r = plan::load_plan_text("model: tiny\ntraining: {global_batch_size: " + std::to_string(gpus) +
                                    ", precision: bf16}\ncluster: {gpu: h100-sxm, num_gpus: " + std::to_string(gpus) + ", " +
                                    cluster + "}\n",
                                plan::Format::yaml);
  EXPECT_TRUE(r.ok()) << cluster << (r.diagnostics.empty() ? "" : r.diagnostics.items().front().message);
  return r.plan;
}

Topology fabric(const std::string& cluster, std::int64_t gpus) {
  const auto b = build(load(cluster, gpus).cluster);
  EXPECT_TRUE(b.topology) << b.error;
  return *b.topology;
}

// Reference: shortest paths that never pass through a GPU or bridge at a NIC, by BFS over
// the whole graph (distance and path count to every vertex).
PathInfo reference(const Topology& t, std::int64_t src, std::int64_t dst) {
  const auto n = boost::num_vertices(t.graph);
  std::vector<std::int64_t> dist(n, -1);
  std::vector<double> paths(n, 0);
  const VertexId s = t.gpus[static_cast<std::size_t>(src)], d = t.gpus[static_cast<std::size_t>(dst)];
  std::queue<VertexId> q;
  dist[s] = 0;
  paths[s] = 1;
  q.push(s);
  while (!q.empty()) {
    const VertexId v = q.front();
    q.pop();
    if (v != s && t.graph[v].kind == VertexKind::gpu) continue;
    for (auto e : boost::make_iterator_range(boost::out_edges(v, t.graph))) {
      const VertexId w = boost::target(e, t.graph);
      if (t.graph[e].bandwidth_gbytes_per_s <= 0) continue;
      // A NIC passes traffic between its GPU and the fabric: out to a switch when reached from
      // the source GPU (distance 1), in to a GPU when reached from a switch.
      if (t.graph[v].kind == VertexKind::nic && (dist[v] == 1) != (t.graph[w].kind != VertexKind::gpu)) continue;
      if (dist[w] < 0) {
        dist[w] = dist[v] + 1;
        q.push(w);
      }
      if (dist[w] == dist[v] + 1) paths[w] += paths[v];
    }
  }
  return PathInfo{dist[d], paths[d], 0};
}

struct Case {
  const char* name;
  std::string cluster;
  std::int64_t gpus;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"2-tier", "topology: {tiers: 2, switch_radix: 16}", 128},
      {"2-tier 2:1", "topology: {tiers: 2, switch_radix: 12, oversubscription: 2}", 64},
      {"3-tier k=8", "topology: {tiers: 3, switch_radix: 8}", 128},
      {"3-tier pods", "topology: {tiers: 3, switch_radix: 8, pod_gpus: 32, pod_oversubscription: 3}", 192},
      {"rails", "topology: {kind: rail_optimized, switch_radix: 32}", 128},
      {"rails, 3 tiers", "topology: {kind: rail_optimized, tiers: 3, switch_radix: 8}", 120},
      {"two planes", "topology: {kind: multi_plane, planes: 2, tiers: 2, switch_radix: 16}", 128},
      {"two planes, 3 tiers", "topology: {kind: multi_plane, planes: 2, tiers: 3, switch_radix: 8}", 128},
  };
  return all;
}

TEST(Router, AgreesWithBreadthFirstSearchOnEveryFabric) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    const Topology t = fabric(c.cluster, c.gpus);
    Router router(t);
    std::mt19937_64 rng(5);
    for (int i = 0; i < 300; ++i) {
      const auto s = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c.gpus));
      const auto d = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c.gpus));
      const PathInfo got = router.info(s, d), want = reference(t, s, d);
      ASSERT_EQ(got.hops, want.hops) << s << " -> " << d;
      ASSERT_DOUBLE_EQ(got.paths, s == d ? 1 : want.paths) << s << " -> " << d;
    }
  }
}

// Follows a route hop by hop: each hop starts where the last ended; returns the end.
VertexId walk(const Topology& t, VertexId from, const std::vector<Hop>& hops, std::vector<std::int64_t>& ids) {
  std::map<std::int64_t, Graph::edge_descriptor> by_id;
  for (auto e : boost::make_iterator_range(boost::edges(t.graph))) by_id[t.graph[e].id] = e;
  VertexId at = from;
  for (const Hop& h : hops) {
    const auto e = by_id.at(h.link);
    const VertexId a = boost::source(e, t.graph), b = boost::target(e, t.graph);
    EXPECT_TRUE(at == a || at == b);
    const VertexId to = at == a ? b : a;
    EXPECT_EQ(h.forward, at < to);
    ids.push_back(h.link);
    at = to;
  }
  return at;
}

TEST(Router, HashedRoutesAreShortestAndCoverEveryEqualCostPath) {
  const Topology t = build_k_ary_fat_tree(8, 50, 1);
  Router router(t);
  // Other pod: (k/2)^2 = 16 paths of 6 hops (GPU-NIC... here hosts are NICs' GPUs).
  const PathInfo info = router.info(0, 127);
  std::set<std::vector<std::int64_t>> seen;
  for (std::uint64_t h = 0; h < 2000; ++h) {
    const auto hops = router.route(0, 127, h);
    ASSERT_EQ(static_cast<std::int64_t>(hops.size()), info.hops);
    std::vector<std::int64_t> ids;
    EXPECT_EQ(walk(t, t.gpus[0], hops, ids), t.gpus[127]);
    seen.insert(ids);
  }
  EXPECT_EQ(static_cast<double>(seen.size()), info.paths);
  // Deterministic for a hash.
  EXPECT_EQ(router.route(0, 127, 42).front().link, router.route(0, 127, 42).front().link);
}

TEST(Router, DestinationModKRoutesShiftsWithoutCollisions) {
  // Shift permutations (what ring collectives are) on full k-ary trees of 2 and 3 tiers: with
  // destination-mod-k no link direction carries two flows (Zahavi et al. 2010).
  // The third fabric has two links from each leaf to each spine (8 leaves of 8 up-links, 4
  // spines): destinations dst and dst + 4 share a spine and, picked by dst mod 2 on the way
  // down, shared its link to their leaf too (issue 21: every leaf-to-node shift, 8 here, put
  // two flows on half of the down-links, and the README's Llama-3-70B plan's pipeline
  // boundaries ran at 23.5 of the NIC's 47 GB/s on rails and fat trees alike).
  for (const auto& t : {fabric("topology: {tiers: 2, switch_radix: 16, routing: d_mod_k}", 128), build_k_ary_fat_tree(8, 50, 1),
                        fabric("topology: {tiers: 2, switch_radix: 16, routing: d_mod_k}", 64)}) {
    Router router(t);
    const auto n = static_cast<std::int64_t>(t.gpus.size());
    for (std::int64_t shift : {1, 4, 8, 9, 16, 33}) {
      std::vector<int> load(2 * boost::num_edges(t.graph), 0);
      int worst = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        for (const Hop& h : router.route_d_mod_k(i, (i + shift) % n)) worst = std::max(worst, ++load[h.slot()]);
      }
      EXPECT_EQ(worst, 1) << "shift " << shift << " on " << n << " GPUs";
    }
  }
}

// The same on a rail-optimized fabric, for what crosses it: node shifts of same-index GPUs
// (pipeline transfers, and the DP and CP rings of a TP-innermost mesh), every rail at once.
// Numbered by GPU index, a rail's destinations are every 8th number, and a leaf's flows took 1
// of its 8 up-links (issue 21: a Llama-3-70B plan's pipeline receives 2.4 times as long as on
// a fat tree, spine0 -> leaf1 the hottest link).
TEST(Router, DestinationModKRoutesNodeShiftsOnRailsWithoutCollisions) {
  // 16 nodes x 8 rails; 8 ports down a leaf, so each rail spans two leaves and crosses the spines.
  const Topology t = fabric("topology: {kind: rail_optimized, tiers: 2, switch_radix: 16, routing: d_mod_k}", 128);
  Router router(t);
  const std::int64_t gpn = t.gpus_per_node, nodes = t.nodes;
  ASSERT_EQ(nodes, 16);
  ASSERT_EQ(t.port_order.size(), t.gpus.size());
  EXPECT_EQ(t.port_order[static_cast<std::size_t>(1 * gpn + 0)], 1);      // node 1, rail 0: the rail's second port
  EXPECT_EQ(t.port_order[static_cast<std::size_t>(0 * gpn + 1)], nodes);  // node 0, rail 1: after rail 0's ports
  for (std::int64_t shift = 1; shift < nodes; ++shift) {
    std::vector<int> load(2 * boost::num_edges(t.graph), 0);
    int worst = 0;
    for (std::int64_t n = 0; n < nodes; ++n) {
      for (std::int64_t r = 0; r < gpn; ++r) {
        for (const Hop& h : router.route_d_mod_k(n * gpn + r, (n + shift) % nodes * gpn + r)) worst = std::max(worst, ++load[h.slot()]);
      }
    }
    EXPECT_EQ(worst, 1) << "node shift " << shift;
  }
}

TEST(Router, AnEvenSpreadConservesTheFlow) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    const Topology t = fabric(c.cluster, c.gpus);
    Router router(t);
    std::vector<double> loads(2 * boost::num_edges(t.graph), 0.0);
    const std::int64_t dst = c.gpus - 1;
    ASSERT_TRUE(router.spread(0, dst, 10, loads));
    const PathInfo info = router.info(0, dst);
    // Every path carries 10 / paths over each of its hops.
    double total = 0;
    for (double l : loads) total += l;
    EXPECT_NEAR(total, 10.0 * static_cast<double>(info.hops), 1e-9);
    // What leaves the source GPU is the whole flow.
    double out = 0;
    for (auto e : boost::make_iterator_range(boost::out_edges(t.gpus[0], t.graph))) {
      const VertexId w = boost::target(e, t.graph);
      out += loads[Hop{t.graph[e].id, t.gpus[0] < w}.slot()];
    }
    EXPECT_NEAR(out, 10.0, 1e-9);
  }
}

TEST(Analysis, DiameterIsTwiceTheHighestTierClimbed) {
  // Host - NIC - edge - aggregation - core and down again: 8 hops in a k-ary tree.
  EXPECT_EQ(diameter_hops(build_k_ary_fat_tree(4, 50, 1)), 8);
  EXPECT_EQ(diameter_hops(fabric("topology: {tiers: 2, switch_radix: 16}", 128)), 6);
  EXPECT_EQ(diameter_hops(fabric("topology: {kind: single_node}", 8)), 2);
}

TEST(MultiPlane, EveryNicHasAPortOnEachPlaneAtHalfItsBandwidth) {
  // 16 nodes x 8 NICs of 400 Gb/s, two planes of leaf/spine with radix 16 (8 down, 8 up).
  const Topology one = fabric("topology: {tiers: 2, switch_radix: 16}", 128);
  const Topology two = fabric("topology: {kind: multi_plane, planes: 2, tiers: 2, switch_radix: 16}", 128);
  EXPECT_EQ(two.count(VertexKind::leaf), 2 * one.count(VertexKind::leaf));
  EXPECT_EQ(two.count(VertexKind::spine), 2 * one.count(VertexKind::spine));
  EXPECT_EQ(two.count(LinkTier::nic_to_leaf), 2 * 128);
  // The same bisection: twice the links at half the speed.
  EXPECT_DOUBLE_EQ(bisection_gbytes_per_s(two), bisection_gbytes_per_s(one));
  // Across leaves: twice the equal-cost paths, each half as wide.
  Router r1(one), r2(two);
  const PathInfo p1 = r1.info(0, 127), p2 = r2.info(0, 127);
  EXPECT_EQ(p1.hops, p2.hops);
  EXPECT_DOUBLE_EQ(p2.paths, 2 * p1.paths);
  EXPECT_DOUBLE_EQ(p2.bottleneck_gbytes_per_s, p1.bottleneck_gbytes_per_s / 2);
  // Every switch knows its plane.
  for (auto v : boost::make_iterator_range(boost::vertices(two.graph))) {
    if (tier_of(two.graph[v].kind) >= 2) {
      EXPECT_TRUE(two.graph[v].plane == 0 || two.graph[v].plane == 1);
    }
  }
}

TEST(Pods, OversubscriptionAboveThePodIsTheConfiguredRatio) {
  // Llama 3's shape (arXiv:2407.21783 §3.3.1): pods of 3,072 GPUs, 1:7 above them; radix 64.
  const Topology t = fabric("topology: {tiers: 3, switch_radix: 64, pod_gpus: 3072, pod_oversubscription: 7}", 24576);
  const double pods = 8;
  const double nic_links = static_cast<double>(t.count(LinkTier::nic_to_leaf)) / pods;
  const double core_links = static_cast<double>(t.count(LinkTier::spine_to_core)) / pods;
  // 96 leaves of 32 up-links, each linked once to each of the pod's 32 spines, and 3,072 / 7
  // rounded = 439 core links.
  EXPECT_EQ(nic_links, 3072);
  EXPECT_EQ(core_links, 439);
  EXPECT_NEAR(nic_links / core_links, 7, 0.05);
  EXPECT_EQ(t.count(VertexKind::spine), 8 * 32);
  // Inside a pod the tree is non-blocking: leaf up-links equal its down-links.
  EXPECT_EQ(t.count(LinkTier::leaf_to_spine), t.count(LinkTier::nic_to_leaf));
  // And every pair of its leaves has 32 equal-cost paths, one through each spine. Before, the
  // leaves' 32 up-links went round-robin over the fewest spines of 56 down-ports (55), so
  // neighbouring leaves shared 9 spines and a DP ring's edge between them had 9 paths.
  Router r(t);
  EXPECT_DOUBLE_EQ(r.info(0, 32).paths, 32);        // leaf 0 to leaf 1 (GPU 0 to GPU 0 of node 4)
  EXPECT_DOUBLE_EQ(r.info(0, 3071 - 7).paths, 32);  // leaf 0 to the pod's last leaf
}

TEST(Pods, BadPodParametersAreDiagnostics) {
  const struct {
    const char* cluster;
    std::int64_t gpus;
    const char* path;
  } bad[] = {
      {"topology: {tiers: 2, pod_gpus: 32}", 64, "cluster.topology.pod_gpus"},                 // pods need 3 tiers
      {"topology: {tiers: 3, pod_gpus: 12}", 64, "cluster.topology.pod_gpus"},                 // not whole nodes
      {"topology: {kind: multi_plane, planes: 1}", 64, "cluster.topology.planes"},             // one plane
      {"topology: {tiers: 3, switch_radix: 8, pod_gpus: 64}", 4096, "cluster.num_gpus"},       // 64 pods > radix 8
  };
  for (const auto& b : bad) {
    auto r = plan::load_plan_text("model: tiny\ntraining: {global_batch_size: " + std::to_string(b.gpus) +
                                      "}\ncluster: {gpu: h100-sxm, num_gpus: " + std::to_string(b.gpus) + ", " + b.cluster + "}\n",
                                  plan::Format::yaml);
    EXPECT_NE(r.diagnostics.find(b.path), nullptr) << b.cluster;
  }
}

// A switch taken down leaves its peers the other equal-cost paths, by every routing. Radix 8
// on 16 one-GPU nodes: 4 leaves of 4 up-links, 2 spines each reached by 2 parallel cables.
TEST(Router, EveryRoutingGoesAroundASpineThatIsDown) {
  const Topology whole = fabric("gpus_per_node: 1, nics_per_node: 1, topology: {tiers: 2, switch_radix: 8}", 16);
  Topology t = whole;
  ASSERT_FALSE(apply_fault(t, {FaultKind::down, "spine0", 0}));
  Router before(whole), r(t);
  const double paths = before.info(3, 4).paths;
  ASSERT_GT(paths, 1);
  EXPECT_EQ(r.info(3, 4).paths, paths / 2);
  std::set<std::int64_t> down;
  for (auto e : boost::make_iterator_range(boost::edges(t.graph))) {
    if (t.graph[e].bandwidth_gbytes_per_s <= 0) down.insert(t.graph[e].id);
  }
  auto avoids = [&](const std::vector<Hop>& hops) {
    return !hops.empty() && std::none_of(hops.begin(), hops.end(), [&](const Hop& h) { return down.count(h.link) > 0; });
  };
  for (std::uint64_t h = 0; h < 8; ++h) EXPECT_TRUE(avoids(r.route(3, 4, h)));
  for (int n = 0; n < static_cast<int>(paths / 2); ++n) EXPECT_TRUE(avoids(r.route_number(3, 4, n)));
  EXPECT_TRUE(avoids(r.route_d_mod_k(3, 4)));
  EXPECT_TRUE(avoids(r.route_d_mod_k(15, 0)));
}

}  // namespace
}  // namespace meshwork::topology
