// Builders against closed forms: the k-ary fat tree (Al-Fares et al. 2008 §3), leaf/spine,
// rail-optimized scalable units; bisection; group paths under the default placement.
#include <gtest/gtest.h>

#include "plan/plan_io.hpp"
#include "plan/rank_layout.hpp"
#include "topology/analysis.hpp"
#include "topology/builders.hpp"

namespace meshwork::topology {
namespace {

TEST(FatTree, KAryCountsAreTheClosedForms) {
  for (std::int64_t k : {4, 8, 16, 64}) {
    SCOPED_TRACE(k);
    const Topology t = build_k_ary_fat_tree(k, 50, 1);
    EXPECT_EQ(t.count(VertexKind::gpu), k * k * k / 4);  // hosts
    EXPECT_EQ(t.count(VertexKind::leaf) + t.count(VertexKind::spine) + t.count(VertexKind::core), 5 * k * k / 4);
    EXPECT_EQ(t.count(VertexKind::core), k * k / 4);
    // k^3/4 host links, then k^3/4 edge-aggregation and k^3/4 aggregation-core links.
    EXPECT_EQ(t.count(LinkTier::nic_to_leaf), k * k * k / 4);
    EXPECT_EQ(t.count(LinkTier::leaf_to_spine), k * k * k / 4);
    EXPECT_EQ(t.count(LinkTier::spine_to_core), k * k * k / 4);
  }
}

plan::Plan load(const std::string& yaml) {
  auto r = plan::load_plan_text(yaml, plan::Format::yaml);
  EXPECT_TRUE(r.ok()) << yaml;
  return r.plan;
}

TEST(FatTree, BisectionOfANonBlockingTreeIsTwiceThatOfATwoToOneTree) {
  // 192 NICs on radix-48 leaves: 24 down / 24 up at 1:1, 32 down / 16 up at 2:1, leaves full.
  const std::string base = "model: tiny\ntraining: {global_batch_size: 192, precision: bf16}\n"
                           "cluster: {gpu: h100-sxm, num_gpus: 192, nic_bandwidth_gbps: 400, topology: {kind: fat_tree, tiers: 2, switch_radix: 48, oversubscription: ";
  const auto one = build(load(base + "1}}\n").cluster);
  const auto two = build(load(base + "2}}\n").cluster);
  ASSERT_TRUE(one.topology && two.topology) << one.error << two.error;
  EXPECT_DOUBLE_EQ(bisection_gbytes_per_s(*one.topology), 192 * 50.0 / 2);
  EXPECT_DOUBLE_EQ(bisection_gbytes_per_s(*one.topology) / bisection_gbytes_per_s(*two.topology), 2.0);
}

// Issue 21: the share a ring gets through an oversubscribed tier, with every ring of its kind
// running. 16 one-GPU nodes, pipeline pairs (i, i + 8) on two leaves: all 8 edges of a leaf
// leave it. At 1:1 (radix 16: 8 up-links) each keeps its NIC's 50 GB/s; at 2:1 (radix 12: 4
// up-links) two share each up-link, 25 GB/s, though a path alone still has 50 GB/s.
TEST(FatTree, ARingsShareThroughAnOversubscribedTierIsItsRatioOfTheNic) {
  const std::string head = "model: tiny\ntraining: {global_batch_size: 8, precision: bf16}\nparallelism: {pp: 2, dp: 8, zero_stage: 0}\n"
                           "cluster: {gpu: h100-sxm, num_gpus: 16, gpus_per_node: 1, nics_per_node: 1, nic_bandwidth_gbps: 400, topology: ";
  for (const auto& [topo, share] : {std::pair{"{tiers: 2, switch_radix: 16}", 50.0}, std::pair{"{tiers: 2, switch_radix: 12, oversubscription: 2}", 25.0}}) {
    SCOPED_TRACE(topo);
    const plan::Plan p = load(head + topo + "}\n");
    const auto b = build(p.cluster);
    ASSERT_TRUE(b.topology) << b.error;
    const auto layout = plan::RankLayout::from_plan(p.parallelism);
    EXPECT_DOUBLE_EQ(ring_share_gbytes_per_s(*b.topology, layout, plan::GroupKind::pp), share);
    EXPECT_DOUBLE_EQ(group_path(*b.topology, layout, plan::GroupKind::pp).bottleneck_gbytes_per_s, 50.0);
  }
}

TEST(RailOptimized, ScalableUnitOf32DgxNodes) {
  // 32 nodes x 8 GPUs and 8 NICs at 400 Gb/s; radix 64, non-blocking: one 32-down / 32-up
  // leaf per rail (8 leaves), 256 up-links over 4 spines.
  const auto b = build(load("model: tiny\ntraining: {global_batch_size: 256}\n"
                            "cluster: {gpu: h100-sxm, num_gpus: 256, topology: {kind: rail_optimized, switch_radix: 64}}\n")
                           .cluster);
  ASSERT_TRUE(b.topology) << b.error;
  const Topology& t = *b.topology;
  EXPECT_EQ(t.count(VertexKind::gpu), 256);
  EXPECT_EQ(t.count(VertexKind::nic), 256);
  EXPECT_EQ(t.count(VertexKind::nvswitch), 32);
  EXPECT_EQ(t.count(VertexKind::leaf), 8);
  EXPECT_EQ(t.count(VertexKind::spine), 4);
  EXPECT_EQ(t.count(LinkTier::nic_to_leaf), 256);
  EXPECT_EQ(t.count(LinkTier::leaf_to_spine), 256);
  const auto bom = bill_of_materials(t);
  EXPECT_EQ(bom.cables, 512);
  EXPECT_EQ(bom.transceivers, 1024);
}

TEST(RailOptimized, EveryDataParallelRingStaysOnItsRail) {
  // TP 8 fills a node, so DP peers are the same local GPU on other nodes: the same rail, up to
  // the rail's leaf and back down, never a spine.
  const plan::Plan p = load("model: llama3-8b\ntraining: {global_batch_size: 256}\nparallelism: {tp: 8, sp: true}\n"
                            "cluster: {gpu: h100-sxm, num_gpus: 256, topology: {kind: rail_optimized, switch_radix: 64}}\n");
  const auto b = build(p.cluster);
  ASSERT_TRUE(b.topology);
  const auto layout = plan::RankLayout::from_plan(p.parallelism);
  for (std::int64_t g = 0; g < layout.num_groups(plan::GroupKind::dp); ++g) {
    const auto members = layout.group(plan::GroupKind::dp, g);
    // All members sit at the same local index modulo the NIC they use.
    for (auto m : members) EXPECT_EQ(m % 8, members.front() % 8);
  }
  const auto path = group_path(*b.topology, layout, plan::GroupKind::dp);
  EXPECT_EQ(path.hops, 4);  // GPU - NIC - leaf - NIC - GPU
}

TEST(Placement, DefaultOrderKeepsEachTpGroupInOneNode) {
  const plan::Plan p = load("model: gpt3-175b\ntraining: {global_batch_size: 64}\nparallelism: {tp: 8, pp: 8}\n"
                            "cluster: {gpu: a100-sxm-80gb, num_gpus: 128, nic_bandwidth_gbps: 200, topology: {tiers: 3, switch_radix: 40}}\n");
  const auto b = build(p.cluster);
  ASSERT_TRUE(b.topology) << b.error;
  const auto layout = plan::RankLayout::from_plan(p.parallelism);
  const auto tp = group_path(*b.topology, layout, plan::GroupKind::tp);
  EXPECT_EQ(tp.hops, 2);  // GPU - NVSwitch - GPU
  EXPECT_DOUBLE_EQ(tp.bottleneck_gbytes_per_s, 300);
  const auto pp = group_path(*b.topology, layout, plan::GroupKind::pp);
  EXPECT_GE(pp.hops, 4);
  EXPECT_DOUBLE_EQ(pp.bottleneck_gbytes_per_s, 25);  // a 200 Gb/s NIC
}

TEST(Builders, MoreGpusThanTheTreeHoldsIsAnError) {
  // The plan's validation says so, and the builder refuses too.
  auto r = plan::load_plan_text("model: tiny\ntraining: {global_batch_size: 4096}\n"
                                "cluster: {gpu: h100-sxm, num_gpus: 4096, topology: {tiers: 2, switch_radix: 64}}\n",
                                plan::Format::yaml);
  const auto* d = r.diagnostics.find("cluster.num_gpus");
  ASSERT_NE(d, nullptr);
  EXPECT_NE(d->message.find("a 2-tier fat tree of radix 64 holds 2048"), std::string::npos) << d->message;
  const auto b = build(r.plan.cluster);
  EXPECT_FALSE(b.topology);
  EXPECT_NE(b.error.find("a 2-tier tree of radix 64 holds 2048"), std::string::npos) << b.error;
}

TEST(Builders, OddRadixAndSingleNodeOverflowAreDiagnostics) {
  auto odd = plan::load_plan_text("model: tiny\ntraining: {global_batch_size: 64}\n"
                                  "cluster: {gpu: h100-sxm, num_gpus: 64, topology: {switch_radix: 63}}\n", plan::Format::yaml);
  EXPECT_NE(odd.diagnostics.find("cluster.topology.switch_radix"), nullptr);
  auto single = plan::load_plan_text("model: tiny\ntraining: {global_batch_size: 64}\n"
                                     "cluster: {gpu: h100-sxm, num_gpus: 64, topology: {kind: single_node}}\n", plan::Format::yaml);
  EXPECT_NE(single.diagnostics.find("cluster.topology.kind"), nullptr);
}

}  // namespace
}  // namespace meshwork::topology

#include <numeric>
#include <random>

#include "topology/routing.hpp"

namespace meshwork::topology {
namespace {

std::vector<Flow> permutation(std::int64_t hosts, double rate, std::uint64_t seed) {
  std::vector<std::int64_t> dst(static_cast<std::size_t>(hosts));
  std::iota(dst.begin(), dst.end(), 0);
  std::shuffle(dst.begin(), dst.end(), std::mt19937_64(seed));
  std::vector<Flow> flows;
  for (std::int64_t s = 0; s < hosts; ++s) flows.push_back({s, dst[static_cast<std::size_t>(s)], rate});
  return flows;
}

// A non-blocking fat tree is non-blocking for any permutation when each flow is spread evenly
// over its equal-cost paths; hashing each flow onto one path overloads some links.
TEST(Routing, PermutationTrafficOnANonBlockingTreeFitsWhenSpreadEvenly) {
  const Topology t = build_k_ary_fat_tree(8, 50, 1);  // 128 hosts
  for (std::uint64_t seed : {1, 2, 3}) {
    const auto flows = permutation(128, 50, seed);
    EXPECT_LE(max_utilisation(t, link_loads(t, flows, Spreading::even)), 1.0 + 1e-9) << seed;
  }
  const double hashed = max_utilisation(t, link_loads(t, permutation(128, 50, 1), Spreading::hashed, 7));
  EXPECT_GE(hashed, 1.0);  // collisions: reported, not hidden
  std::printf("k=8 fat tree, random permutation, per-flow hashing: max link load %.2f x capacity\n", hashed);
}

TEST(Routing, EqualCostPathsInAKAryFatTree) {
  const Topology t = build_k_ary_fat_tree(4, 50, 1);
  EXPECT_DOUBLE_EQ(equal_cost_paths(t, 0, 1), 1);    // same edge switch
  EXPECT_DOUBLE_EQ(equal_cost_paths(t, 0, 2), 2);    // same pod: k/2 aggregation switches
  EXPECT_DOUBLE_EQ(equal_cost_paths(t, 0, 15), 4);   // other pod: (k/2)^2 cores
}

}  // namespace
}  // namespace meshwork::topology

#include "topology/faults.hpp"

namespace meshwork::topology {
namespace {

TEST(Faults, ALinkTakenDownReroutesAndNamesTheGroupsThatLostPaths) {
  // 16 nodes of 8 on a 2-tier tree of radix 16 (8 down, 8 up): DP groups cross leaves.
  auto r = plan::load_plan_text("model: llama3-8b\ntraining: {global_batch_size: 64}\nparallelism: {tp: 8, sp: true}\n"
                                "cluster: {gpu: h100-sxm, num_gpus: 128, topology: {tiers: 2, switch_radix: 16}}\n",
                                plan::Format::yaml);
  ASSERT_TRUE(r.ok());
  const auto built = build(r.plan.cluster);
  ASSERT_TRUE(built.topology) << built.error;
  const auto layout = plan::RankLayout::from_plan(r.plan.parallelism);
  Topology faulted = *built.topology;
  ASSERT_FALSE(apply_fault(faulted, {FaultKind::down, "leaf0-spine3", 1}));
  const auto impact = fault_impact(*built.topology, faulted, layout);
  ASSERT_FALSE(impact.empty());
  bool dp_hit = false;
  for (const auto& i : impact) {
    EXPECT_FALSE(i.disconnected);              // re-routed over the other spines
    EXPECT_LT(i.paths_after, i.paths_before);  // with fewer equal-cost paths
    dp_hit = dp_hit || i.group == plan::GroupKind::dp;
    EXPECT_NE(i.group, plan::GroupKind::tp);   // TP stays inside its node
  }
  EXPECT_TRUE(dp_hit);

  // A NIC's cable: its GPU leaves the fabric.
  Topology cut = *built.topology;
  ASSERT_FALSE(apply_fault(cut, {FaultKind::down, "nic0-leaf0", 1}));
  const auto lost = fault_impact(*built.topology, cut, layout);
  ASSERT_FALSE(lost.empty());
  EXPECT_TRUE(lost.front().disconnected);

  // Degrading a leaf's up-link lowers the bottleneck of the groups that use it.
  Topology slow = *built.topology;
  for (int s = 0; s < 8; ++s) ASSERT_FALSE(apply_fault(slow, {FaultKind::degrade, "leaf0-spine" + std::to_string(s), 0.5}));
  const auto slower = fault_impact(*built.topology, slow, layout);
  ASSERT_FALSE(slower.empty());
  EXPECT_DOUBLE_EQ(slower.front().bottleneck_after, slower.front().bottleneck_before / 2);

  Topology unknown = *built.topology;
  EXPECT_TRUE(apply_fault(unknown, {FaultKind::down, "leaf99-spine0", 1}));
}

}  // namespace
}  // namespace meshwork::topology
