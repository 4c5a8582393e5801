// Collective algorithms (models/comm) against published collective bandwidths
// (docs/reference/published-runs.md C2) and against their own definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "models/comm.hpp"
#include "models/estimate.hpp"
#include "models/hardware.hpp"
#include "plan/plan_io.hpp"
#include "topology/fabric_share.hpp"

namespace meshwork::models {
namespace {

plan::Plan load(const std::string& yaml) {
  auto r = plan::load_plan_text(yaml, plan::Format::yaml);
  EXPECT_TRUE(r.ok()) << (r.diagnostics.empty() ? "" : r.diagnostics.items().front().message);
  return r.plan;
}

GroupNetwork dp_network(const std::string& cluster, std::int64_t dp, const std::string& algorithm = "auto") {
  const plan::Plan p = load("model: tiny\ntraining: {global_batch_size: " + std::to_string(dp) + ", precision: bf16}\nparallelism: {dp: " +
                            std::to_string(dp) + ", zero_stage: 0}\ncluster: {" + cluster + ", collective_algorithm: " + algorithm + "}\n");
  return group_network(p, hardware_profile(p.cluster.gpu), plan::GroupKind::dp);
}

// nccl-tests' bus bandwidth of an all-reduce of `bytes` (doc/PERFORMANCE.md).
double all_reduce_busbw(const GroupNetwork& g, double bytes, CollectiveAlgorithm a) {
  const double n = static_cast<double>(g.size);
  return bytes / collective_s(g, Collective::all_reduce, bytes, a) * 2 * (n - 1) / n;
}

TEST(Collectives, NvlsAndRingOnEightH100MatchNcclTests) {
  const GroupNetwork g = dp_network("gpu: h100-sxm, num_gpus: 8, gpus_per_node: 8", 8);
  ASSERT_FALSE(g.crosses_nodes);
  // 8 x H100, 4 GiB: NVLS ~480 GB/s busbw (nccl-tests#212), ring ~370 (nccl#1455).
  EXPECT_NEAR(all_reduce_busbw(g, 4.0 * (1 << 30), CollectiveAlgorithm::nvls) / 1e9, 480, 480 * 0.01);
  EXPECT_NEAR(all_reduce_busbw(g, 4.0 * (1 << 30), CollectiveAlgorithm::ring) / 1e9, 370, 370 * 0.01);
  // NCCL's tuner takes NVLS for a large all-reduce on Hopper; A100 has none.
  EXPECT_EQ(algorithm_for(g, Collective::all_reduce, 1e9), CollectiveAlgorithm::nvls);
  const GroupNetwork a100 = dp_network("gpu: a100-sxm-80gb, num_gpus: 8, gpus_per_node: 8", 8, "nvls");
  EXPECT_FALSE(applies(a100, Collective::all_reduce, CollectiveAlgorithm::nvls));
  EXPECT_EQ(algorithm_for(a100, Collective::all_reduce, 1e9), CollectiveAlgorithm::ring);  // asked for, not there: the ring
}

TEST(Collectives, ARingBetweenNodesUsesEveryNicOfTheNode) {
  // 4 nodes x 8 B200, 8 x 400G each, 16 GiB: 381.8 GB/s busbw (docs/reference/published-runs.md C2, STAS), the
  // node's eight NICs together; one GPU's own NIC would give an eighth of it.
  const GroupNetwork g = dp_network("gpu: b200, num_gpus: 32, gpus_per_node: 8, nics_per_node: 8, nic_bandwidth_gbps: 400", 32, "ring");
  ASSERT_TRUE(g.crosses_nodes);
  EXPECT_EQ(g.per_node, 8);
  EXPECT_EQ(g.nodes, 4);
  EXPECT_NEAR(all_reduce_busbw(g, 16.0 * (1 << 30), CollectiveAlgorithm::ring) / 1e9, 381.8, 381.8 * 0.03);
}

TEST(Collectives, TheTreeWinsOnLatencyAndTheRingOnBandwidth) {
  // One-GPU nodes: a ring pays 2(n-1) steps, the double binary tree 2 log2(n) steps but moves
  // 2S instead of 2(n-1)/n S through each NIC (Sanders et al. 2009).
  const std::string one_gpu = "gpu: h100-sxm, gpus_per_node: 1, nics_per_node: 1, topology: {tiers: 3, switch_radix: 64}, num_gpus: ";
  const GroupNetwork wide = dp_network(one_gpu + "512", 512), narrow = dp_network(one_gpu + "16", 16);
  const double small = 1 << 20, large = 4.0 * (1 << 30);
  const auto ar = Collective::all_reduce;
  EXPECT_LT(collective_s(wide, ar, small, CollectiveAlgorithm::tree), collective_s(wide, ar, small, CollectiveAlgorithm::ring) / 10);
  EXPECT_GT(collective_s(narrow, ar, large, CollectiveAlgorithm::tree), collective_s(narrow, ar, large, CollectiveAlgorithm::ring));
  EXPECT_EQ(algorithm_for(wide, ar, small), CollectiveAlgorithm::tree);
  EXPECT_EQ(algorithm_for(narrow, ar, large), CollectiveAlgorithm::ring);
  // The tree's time by its definition: 2S through the NIC, and NCCL's latency for it (Simple):
  // 8.4 us and 2 log2(512) = 18 levels at the network's 14 us (models/nccl_tuner).
  EXPECT_DOUBLE_EQ(collective_s(wide, ar, large, CollectiveAlgorithm::tree), 2 * large / wide.nic_bytes_per_s + (8.4 + 18 * 14) * 1e-6);
  // NCCL's trees run all-reduce only: a reduce-scatter asked of the tree runs on the ring.
  const GroupNetwork tree = dp_network(one_gpu + "512", 512, "tree");
  EXPECT_EQ(algorithm_for(tree, Collective::reduce_scatter, small), CollectiveAlgorithm::ring);
  EXPECT_EQ(algorithm_for(tree, ar, large), CollectiveAlgorithm::tree);
}

TEST(Collectives, HierarchicalIsInNodeReduceScatterAllReduceBetweenNodesAllGather) {
  const GroupNetwork g = dp_network("gpu: h100-sxm, num_gpus: 32, gpus_per_node: 8", 32);
  ASSERT_EQ(g.per_node, 8);
  const double s = 1e9, k = 8, m = 4;
  const double in_node = (k - 1) / k * s / g.nvlink_bytes_per_s;
  const double between = 2 * (m - 1) / m * (s / k) / g.nic_bytes_per_s;
  // NCCL's latencies of its three calls (Simple): two in-node rings of 8, an all-reduce ring of
  // the 4 nodes, one rank each, with the ring's plateau factor between nodes.
  const double latency = (2 * (8.4 + 7 * 3.4) + (8.4 + 6 * 14) * 1.4) * 1e-6;
  EXPECT_NEAR(collective_s(g, Collective::all_reduce, s, CollectiveAlgorithm::hierarchical), in_node + between + in_node + latency, 1e-15);
  // Fewer steps between nodes than the flat ring of 32: it wins on latency for small buffers.
  EXPECT_LT(collective_s(g, Collective::all_reduce, 1e5, CollectiveAlgorithm::hierarchical), collective_s(g, Collective::all_reduce, 1e5, CollectiveAlgorithm::ring));
  // One member per node: nothing to do in the node, so it does not apply.
  const GroupNetwork one = dp_network("gpu: h100-sxm, num_gpus: 8, gpus_per_node: 1, nics_per_node: 1", 8);
  EXPECT_FALSE(applies(one, Collective::all_reduce, CollectiveAlgorithm::hierarchical));
}

TEST(Collectives, AllToAllSendsOnlyOtherNodesShareThroughTheNic) {
  const GroupNetwork g = dp_network("gpu: h100-sxm, num_gpus: 16, gpus_per_node: 8", 16);
  const double s = 1e9;
  // Pairwise exchange: 8 of 16 destinations are off the node, through the member's own NIC.
  EXPECT_DOUBLE_EQ(collective_s(g, Collective::all_to_all, s), 8.0 / 16 * s / g.nic_bytes_per_s + 15 * g.latency_s);
}

// A pipeline transfer between nodes shares its GPU's NIC with the DP collectives that stage
// runs under its compute (models::p2p_s with NicSharing): for the busy share of its bytes it gets
// the NIC less the other flow, at least half, or its own bottleneck if lower.
TEST(Collectives, APipelineTransferSharesItsNicWithDataParallelFlows) {
  const plan::Plan p = load("model: tiny\ntraining: {global_batch_size: 4, precision: bf16}\nparallelism: {tp: 4, pp: 2, dp: 2}\n"
                            "cluster: {gpu: h100-sxm, num_gpus: 16, gpus_per_node: 4}\n");
  GroupNetwork g = group_network(p, hardware_profile(p.cluster.gpu), plan::GroupKind::pp);
  ASSERT_TRUE(g.crosses_nodes);
  const double bytes = 1e8, nic = g.nic_alone_bytes_per_s;
  const BoundaryLink link = boundary_link(g, 0);
  ASSERT_FALSE(link.inside_node);
  const double alone = bytes / link.bytes_per_s + link.latency_s;
  EXPECT_DOUBLE_EQ(p2p_s(g, bytes, 0, NicSharing{}), alone);
  // A DP flow as fast as the NIC, busy half the time: half the bytes at half the NIC.
  EXPECT_DOUBLE_EQ(p2p_s(g, bytes, 0, {0.5, nic}), 0.5 * bytes / link.bytes_per_s + 0.5 * bytes / std::min(link.bytes_per_s, nic / 2) + link.latency_s);
  // A DP flow held to a tenth of the NIC elsewhere leaves the transfer nine tenths of it.
  EXPECT_DOUBLE_EQ(p2p_s(g, bytes, 0, {1.0, 0.1 * nic}), bytes / std::min(link.bytes_per_s, 0.9 * nic) + link.latency_s);
  // A transfer held to a quarter of the NIC by an oversubscribed tier loses nothing.
  g.edge_fractions = {0.25, 0.25};
  EXPECT_DOUBLE_EQ(p2p_s(g, bytes, 0, {1.0, nic}), p2p_s(g, bytes, 0));
  // A boundary inside a node runs on NVLink and shares nothing.
  g.edge_crosses_nodes = {0, 1};
  EXPECT_DOUBLE_EQ(p2p_s(g, bytes, 0, {1.0, nic}), p2p_s(g, bytes, 0));
}

// The same rule from the DP ring's side (models::nic_bytes_per_s_beside): the NIC's share a
// ring member gets while a pipeline transfer runs through its NIC, by hand.
TEST(Collectives, ADataParallelRingSharesItsNicsWithThePipelinesTransfers) {
  const plan::Plan p = load("model: tiny\ntraining: {global_batch_size: 4, precision: bf16}\nparallelism: {tp: 4, pp: 2, dp: 2}\n"
                            "cluster: {gpu: h100-sxm, num_gpus: 16, gpus_per_node: 4}\n");
  const HardwareProfile hw = hardware_profile(p.cluster.gpu);
  GroupNetwork g = group_network(p, hw, plan::GroupKind::dp);
  ASSERT_TRUE(g.crosses_nodes);
  const double nic = g.nic_alone_bytes_per_s;
  ASSERT_DOUBLE_EQ(g.nic_bytes_per_s, nic);
  EXPECT_DOUBLE_EQ(nic_bytes_per_s_beside(g, NicSharing{}), nic);
  // A transfer as fast as the NIC leaves half; one held to a tenth elsewhere, nine tenths.
  EXPECT_DOUBLE_EQ(nic_bytes_per_s_beside(g, {0.2, nic}), nic / 2);
  EXPECT_DOUBLE_EQ(nic_bytes_per_s_beside(g, {1.0, 0.1 * nic}), 0.9 * nic);
  // Never more than the group's own share (a tier above held it lower).
  g.nic_bytes_per_s = 0.3 * nic;
  EXPECT_DOUBLE_EQ(nic_bytes_per_s_beside(g, {1.0, 0.1 * nic}), 0.3 * nic);
  // A collective timed at that share (CollectivePrices::at_nic_rate) takes longer at half the
  // NIC, its latency unchanged: less than twice as long.
  g.nic_bytes_per_s = nic;
  CollectivePrices price;
  const double bytes = 1e9, alone = price(g, Collective::reduce_scatter, bytes), beside = price.at_nic_rate(g, Collective::reduce_scatter, bytes, nic / 2);
  EXPECT_GT(beside, alone);
  EXPECT_LT(beside, 2 * alone);
  // A group inside a node shares no NIC.
  const GroupNetwork tp = group_network(p, hw, plan::GroupKind::tp);
  ASSERT_FALSE(tp.crosses_nodes);
  EXPECT_DOUBLE_EQ(nic_bytes_per_s_beside(tp, {1.0, nic}), tp.nic_bytes_per_s);
}

TEST(Collectives, NvlsNeedsAnNvSwitch) {
  auto r = plan::load_plan_text("model: tiny\ntraining: {global_batch_size: 8, precision: bf16}\nparallelism: {tp: 4}\n"
                                "cluster: {gpu: h100-sxm, num_gpus: 4, gpus_per_node: 4, intra_node: {kind: pcie}, collective_algorithm: nvls}\n",
                                plan::Format::yaml);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.diagnostics.items().front().path, "cluster.collective_algorithm");
}

// Issue 21: the estimate prices the share of an oversubscribed tier a group's traffic gets
// (topology/fabric_share), for the groups that cross it and no other.
TEST(Fabric, AnOversubscribedLeafSlowsOnlyTheGroupsThatLeaveIt) {
  // 6 nodes on radix-32 leaves at 3:1 (24 ports, 3 nodes a leaf). DP 6 rings go node by node
  // and leave each leaf by one edge: their NIC's rate. PP 2 pairs node n with n + 3 on the
  // other leaf: every GPU of a leaf crosses it, a third of the NIC (tests/topology).
  // Spread evenly (adaptive routing): destination-mod-k's own collisions are the next tests'.
  const std::string head = "model: llama3-8b\ntraining: {global_batch_size: 48, precision: bf16}\n"
                           "cluster: {gpu: h100-sxm, num_gpus: 48, nic_bandwidth_gbps: 400, topology: {tiers: 2, switch_radix: 32, routing: adaptive, oversubscription: ";
  for (const char* ratio : {"1", "3"}) {
    SCOPED_TRACE(ratio);
    const plan::Plan dp = load(head + ratio + "}}\nparallelism: {tp: 8, dp: 6, zero_stage: 1}\n");
    const GroupNetwork dp_net = group_network(dp, hardware_profile(dp.cluster.gpu), plan::GroupKind::dp_cp);
    EXPECT_DOUBLE_EQ(dp_net.fabric_fraction, 1.0);
    const plan::Plan pp = load(head + ratio + "}}\nparallelism: {tp: 8, dp: 3, pp: 2, zero_stage: 1}\n");
    const GroupNetwork pp_net = group_network(pp, hardware_profile(pp.cluster.gpu), plan::GroupKind::pp);
    EXPECT_DOUBLE_EQ(pp_net.fabric_fraction, std::string(ratio) == "1" ? 1.0 : 1.0 / 3);
  }
}

// The figure: pod_oversubscription 1 and 7 gave the Llama 3 405B 16K plan the same
// estimated step (7,321.5 ms). Its pipeline crosses the 1:7 core; its DP stays in the pods.
TEST(Fabric, PodOversubscriptionSlowsTheLlama3PlanWhosePipelineCrossesTheCore) {
  const auto loaded = plan::load_plan(std::filesystem::path(MESHWORK_SOURCE_DIR) / "scenarios/heldout/llama3-405b-h100-16384.yaml");
  ASSERT_TRUE(loaded.ok());
  plan::Plan flat = loaded.plan;
  flat.cluster.topology.pod_oversubscription = 1;
  const auto hw = hardware_profile(flat.cluster.gpu);
  const double pp_at_7 = group_network(loaded.plan, hw, plan::GroupKind::pp).fabric_fraction;
  EXPECT_LT(pp_at_7, 0.2);
  EXPECT_DOUBLE_EQ(group_network(loaded.plan, hw, plan::GroupKind::dp_cp).fabric_fraction, 1.0);
  // Destination-mod-k collides at the core even at 1:1 (0.25: four of a stage's 1,024 streams
  // come down one core link into the next pod), less than at 1:7; spread evenly, 1:1 leaves
  // every stream its NIC's rate.
  EXPECT_GT(group_network(flat, hw, plan::GroupKind::pp).fabric_fraction, pp_at_7);
  EXPECT_GT(estimate(loaded.plan).step_time_s, estimate(flat).step_time_s);
  flat.cluster.topology.routing = plan::Routing::adaptive;
  EXPECT_DOUBLE_EQ(group_network(flat, hw, plan::GroupKind::pp).fabric_fraction, 1.0);
}

// Done-when of issue 21: on every fabric kind, raising oversubscription never shortens the
// estimated step, and 7:1 is slower than 1:1 (a plan whose DP rings, strided by the order,
// leave their leaf or pod on every edge).
TEST(Fabric, RaisingOversubscriptionNeverShortensTheEstimatedStep) {
  const std::string head = "model: llama3-8b\ntraining: {global_batch_size: 256, micro_batch_size: 1, precision: bf16}\n"
                           "parallelism: {tp: 8, dp: 16, pp: 1, zero_stage: 1, order: tp-cp-ep-pp-dp}\n"
                           "cluster: {gpu: h100-sxm, num_gpus: 128, nic_bandwidth_gbps: 400, topology: ";
  const std::vector<std::string> kinds = {"{tiers: 2, switch_radix: 16, oversubscription: ", "{kind: rail_optimized, tiers: 2, switch_radix: 16, oversubscription: ",
                                          "{kind: multi_plane, planes: 2, tiers: 2, switch_radix: 16, oversubscription: ",
                                          "{tiers: 3, switch_radix: 16, pod_gpus: 16, oversubscription: 1, pod_oversubscription: "};
  for (const std::string routing : {"adaptive", "d_mod_k"}) {
    for (const auto& kind : kinds) {
      // Destination-mod-k on pods: see the next test.
      if (routing == "d_mod_k" && kind.find("pod_gpus") != std::string::npos) continue;
      double previous = 0, first = 0;
      for (const char* ratio : {"1", "1.5", "2", "3", "4", "7"}) {
        SCOPED_TRACE(kind + ratio + " " + routing);
        const double step = estimate(load(head + kind + ratio + ", routing: " + routing + "}}\n")).step_time_s;
        EXPECT_GE(step, previous);
        if (first == 0) first = step;
        previous = step;
      }
      // On rails, each of these rings joins same-position GPUs and stays on its rail's leaves.
      if (kind.find("rail_optimized") == std::string::npos) EXPECT_GT(previous, first) << kind;
      else EXPECT_DOUBLE_EQ(previous, first) << kind;
    }
  }
}

// Where the property does not hold, in both tiers: destination-mod-k on pods whose links to
// the core are dealt unevenly. Pods of 2 nodes at 1.5:1 have 11 links to the core on 8 spines
// (three with two, five with one), dealt over 6 cores; at 2:1, 8 links, one a spine, over 4
// cores. A pod's 8 leaving DP streams take spine d mod 8 and come down into the next pod by
// link d mod the links that core has there: the busiest link carries three at 1.5:1 and two at
// 2:1. The simulator plays the same routes to the same step: DP 0.228 s at 1.5:1 and 0.108 s
// at 2:1, estimated 0.229 and 0.109 s (meshwork simulate and estimate of this plan, 2026-12-05).
TEST(Fabric, DestinationModKOnUnevenCoreWiringCanBeSlowerAtALowerRatio) {
  const std::string head = "model: llama3-8b\ntraining: {global_batch_size: 256, micro_batch_size: 1, precision: bf16}\n"
                           "parallelism: {tp: 8, dp: 16, pp: 1, zero_stage: 1, order: tp-cp-ep-pp-dp}\n"
                           "cluster: {gpu: h100-sxm, num_gpus: 128, nic_bandwidth_gbps: 400, topology: "
                           "{tiers: 3, switch_radix: 16, pod_gpus: 16, oversubscription: 1, pod_oversubscription: ";
  const plan::Plan at_1_5 = load(head + "1.5}}\n"), at_2 = load(head + "2}}\n");
  const auto hw = hardware_profile(at_2.cluster.gpu);
  EXPECT_DOUBLE_EQ(group_network(at_1_5, hw, plan::GroupKind::dp_cp).fabric_fraction, 1.0 / 3);
  EXPECT_DOUBLE_EQ(group_network(at_2, hw, plan::GroupKind::dp_cp).fabric_fraction, 0.5);
  EXPECT_GT(estimate(at_1_5).breakdown.dp_s, 1.9 * estimate(at_2).breakdown.dp_s);
}

// The gradient collectives of data parallelism are counted one pipeline stage at a time: the
// schedule staggers them stage by stage (1F1B: a micro-batch apart, the last stage first), so
// rings of different stages seldom run at once. The default scenario (GPT-3 175B, TP 8 x PP 8
// x DP 16 on a radix-40 3-tier tree, destination-mod-k): within the worst stage two rings come
// down one link (1/2 of the NIC); counted with every stage at once, three do (1/3). The
// stages' reductions at the step's end, which do overlap, are played stage by stage beside
// each other (models/end_of_step, with the pairs' shares: Fabric.EachStagesOwnRingsHaveTheirOwnShare).
TEST(Fabric, DataParallelRingsCollideOnlyWithinTheirStage) {
  const auto loaded = plan::load_plan(std::filesystem::path(MESHWORK_SOURCE_DIR) / "scenarios/gpt3-175b-a100-1024.yaml");
  ASSERT_TRUE(loaded.ok());
  const auto layout = plan::RankLayout::from_plan(loaded.plan.parallelism);
  EXPECT_DOUBLE_EQ(topology::tier_shares(loaded.plan.cluster, layout, plan::GroupKind::dp_cp, topology::Pattern::ring).above_nic_fraction(), 0.5);
  // The pipeline's boundaries all run at once in the steady state: they are not split by stage.
  EXPECT_EQ(topology::tier_shares(loaded.plan.cluster, layout, plan::GroupKind::pp, topology::Pattern::pipeline, true).edge_above_nic_fraction.size(), 8u);
}

// Each stage's own rings' share (the estimate times the reported stage's end-of-step reductions
// on them): on the default scenario only stage 6's rings collide, and a collective at another
// NIC share is the same collective timed at that share, its algorithm and protocol the tuner's.
TEST(Fabric, EachStagesOwnRingsHaveTheirOwnShare) {
  const auto loaded = plan::load_plan(std::filesystem::path(MESHWORK_SOURCE_DIR) / "scenarios/gpt3-175b-a100-1024.yaml");
  ASSERT_TRUE(loaded.ok());
  const plan::Plan& p = loaded.plan;
  const GroupNetwork g = group_network(p, hardware_profile(p.cluster.gpu), plan::GroupKind::dp_cp);
  ASSERT_EQ(g.stage_fabric_fractions.size(), 8u);
  for (std::size_t s = 0; s < 8; ++s) EXPECT_DOUBLE_EQ(g.stage_fabric_fractions[s], s == 6 ? 0.5 : 1.0) << "stage " << s;
  EXPECT_DOUBLE_EQ(g.fabric_fraction, 0.5);  // the worst stage's
  EXPECT_DOUBLE_EQ(stage_nic_bytes_per_s(g, 7), g.nic_alone_bytes_per_s);
  EXPECT_DOUBLE_EQ(stage_nic_bytes_per_s(g, 6), g.nic_bytes_per_s);
  EXPECT_DOUBLE_EQ(stage_nic_bytes_per_s(g, 99), g.nic_bytes_per_s);  // no such stage: the group's
  // Beside another stage: never above the stage alone, the stage beside itself alone, and
  // stages 5 and 6, neighbours on the fabric, slow each other (three rings on one link).
  ASSERT_EQ(g.stage_pair_fractions.size(), 64u);
  for (std::int64_t k = 0; k < 8; ++k) {
    EXPECT_DOUBLE_EQ(stage_pair_nic_bytes_per_s(g, k, k), stage_nic_bytes_per_s(g, k));
    for (std::int64_t j = 0; j < 8; ++j) EXPECT_LE(stage_pair_nic_bytes_per_s(g, k, j), stage_nic_bytes_per_s(g, k));
  }
  EXPECT_DOUBLE_EQ(stage_pair_nic_bytes_per_s(g, 6, 5), g.nic_alone_bytes_per_s / 3);
  EXPECT_DOUBLE_EQ(stage_pair_nic_bytes_per_s(g, 5, 6), g.nic_alone_bytes_per_s / 3);
  EXPECT_DOUBLE_EQ(stage_pair_nic_bytes_per_s(g, 7, 0), g.nic_alone_bytes_per_s);
  EXPECT_DOUBLE_EQ(stage_pair_nic_bytes_per_s(g, 99, 0), g.nic_bytes_per_s);
  // The group with stage 7's share, as group_network would make it.
  GroupNetwork alone = g;
  alone.nic_bytes_per_s = stage_nic_bytes_per_s(g, 7);
  alone.busbw_bytes_per_s = std::min(alone.nvlink_bytes_per_s, alone.nic_bytes_per_s);
  CollectivePrices prices;
  for (const Collective c : {Collective::all_reduce, Collective::reduce_scatter, Collective::all_gather}) {
    for (const double bytes : {1e5, 5e7, 2e9}) {
      EXPECT_EQ(prices.at_nic_rate(g, c, bytes, alone.nic_bytes_per_s), collective_s(alone, c, bytes)) << to_string(c) << " " << bytes;
      EXPECT_EQ(prices.at_nic_rate(g, c, bytes, g.nic_bytes_per_s), collective_s(g, c, bytes));
      EXPECT_EQ(prices(g, c, bytes), collective_s(g, c, bytes));
    }
  }
  EXPECT_LT(prices.at_nic_rate(g, Collective::all_reduce, 2e9, alone.nic_bytes_per_s), 0.6 * collective_s(g, Collective::all_reduce, 2e9));
}

// A stage beside another: its own share (never under the group's) slowed as the pair's count
// slows it from its count alone; without the pairs' figures (more than 64 stages), the
// group's share, the worst stage's, as the step's end was priced before them.
TEST(Fabric, AStageBesideAnotherKeepsItsFloorAndFallsBackToTheGroupsShare) {
  GroupNetwork g;
  g.nic_alone_bytes_per_s = 100;
  g.nic_bytes_per_s = 60;                    // the group's: above stage 1's count alone (50)
  g.stage_fabric_fractions = {1.0, 0.5};
  g.stage_pair_fractions = {1.0, 0.5, 0.25, 0.5};  // [k * 2 + j]
  EXPECT_DOUBLE_EQ(stage_nic_bytes_per_s(g, 0), 100);
  EXPECT_DOUBLE_EQ(stage_nic_bytes_per_s(g, 1), 60);  // the floor
  EXPECT_DOUBLE_EQ(stage_pair_nic_bytes_per_s(g, 0, 0), 100);
  EXPECT_DOUBLE_EQ(stage_pair_nic_bytes_per_s(g, 1, 1), 60);
  EXPECT_DOUBLE_EQ(stage_pair_nic_bytes_per_s(g, 0, 1), 50);  // 100 x 0.5 / 1.0
  EXPECT_DOUBLE_EQ(stage_pair_nic_bytes_per_s(g, 1, 0), 30);  // 60 x 0.25 / 0.5: the floor slowed alike
  EXPECT_DOUBLE_EQ(stage_pair_nic_bytes_per_s(g, 0, 7), 100); // no such stage: alone
  g.stage_pair_fractions.clear();
  EXPECT_DOUBLE_EQ(stage_pair_nic_bytes_per_s(g, 0, 1), 60);
  EXPECT_DOUBLE_EQ(stage_pair_nic_bytes_per_s(g, 1, 0), 60);
  EXPECT_DOUBLE_EQ(stage_pair_nic_bytes_per_s(g, 0, 0), 100);
}

}  // namespace
}  // namespace meshwork::models
