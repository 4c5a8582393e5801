// Collective algorithms (models/comm) against published collective bandwidths
// (docs/reference/published-runs.md C2) and against their own definitions.
#include <gtest/gtest.h>

#include <filesystem>

#include "models/comm.hpp"
#include "models/estimate.hpp"
#include "models/hardware.hpp"
#include "plan/plan_io.hpp"

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
  // The tree's time by its definition: 2S through the NIC, 2 log2(512) = 18 steps.
  EXPECT_DOUBLE_EQ(collective_s(wide, ar, large, CollectiveAlgorithm::tree), 2 * large / wide.nic_bytes_per_s + 18 * wide.latency_s);
  // NCCL's trees run all-reduce only: a reduce-scatter asked of the tree runs on the ring.
  const GroupNetwork tree = dp_network(one_gpu + "512", 512, "tree");
  EXPECT_EQ(algorithm_for(tree, Collective::reduce_scatter, small), CollectiveAlgorithm::ring);
  EXPECT_EQ(algorithm_for(tree, ar, large), CollectiveAlgorithm::tree);
}

TEST(Collectives, HierarchicalIsInNodeReduceScatterAllReduceBetweenNodesAllGather) {
  const GroupNetwork g = dp_network("gpu: h100-sxm, num_gpus: 32, gpus_per_node: 8", 32);
  ASSERT_EQ(g.per_node, 8);
  const double s = 1e9, k = 8, m = 4;
  const double in_node = (k - 1) / k * s / g.nvlink_bytes_per_s + (k - 1) * g.nvlink_latency_s;
  const double between = 2 * (m - 1) / m * (s / k) / g.nic_bytes_per_s + 2 * (m - 1) * g.latency_s;
  EXPECT_DOUBLE_EQ(collective_s(g, Collective::all_reduce, s, CollectiveAlgorithm::hierarchical), in_node + between + in_node);
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
  const std::string head = "model: llama3-8b\ntraining: {global_batch_size: 48, precision: bf16}\n"
                           "cluster: {gpu: h100-sxm, num_gpus: 48, nic_bandwidth_gbps: 400, topology: {tiers: 2, switch_radix: 32, oversubscription: ";
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
  EXPECT_LT(group_network(loaded.plan, hw, plan::GroupKind::pp).fabric_fraction, 0.2);
  EXPECT_DOUBLE_EQ(group_network(loaded.plan, hw, plan::GroupKind::dp_cp).fabric_fraction, 1.0);
  EXPECT_DOUBLE_EQ(group_network(flat, hw, plan::GroupKind::pp).fabric_fraction, 1.0);
  EXPECT_GT(estimate(loaded.plan).step_time_s, estimate(flat).step_time_s);
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
  for (const auto& kind : kinds) {
    double previous = 0, first = 0;
    for (const char* ratio : {"1", "1.5", "2", "3", "4", "7"}) {
      SCOPED_TRACE(kind + ratio);
      const double step = estimate(load(head + kind + ratio + "}}\n")).step_time_s;
      EXPECT_GE(step, previous);
      if (first == 0) first = step;
      previous = step;
    }
    // On rails, each of these rings joins same-position GPUs and stays on its rail's leaves.
    if (kind.find("rail_optimized") == std::string::npos) EXPECT_GT(previous, first) << kind;
    else EXPECT_DOUBLE_EQ(previous, first) << kind;
  }
}

// ECMP hashing's collisions in the closed form (topology/fabric_share): NAR21's 7.5B plan,
// whose DP rings cross the leaves of a 3-tier tree, is slower hashed than destination-mod-k,
// and less so the more flows each edge is split into (bench/RESULTS.md compares the simulator:
// DP 0.313, 0.313 and 0.157 s at 1, 2 and 16 flows; estimated 0.469, 0.314 and 0.158 s).
TEST(Fabric, EcmpHashingCollidesLessWithMoreFlowsPerPeer) {
  const auto loaded = plan::load_plan(std::filesystem::path(MESHWORK_SOURCE_DIR) / "scenarios/published/nar21-7.5b.yaml");
  ASSERT_TRUE(loaded.ok());
  auto dp_s = [&](plan::Routing routing, std::int64_t flows) {
    plan::Plan p = loaded.plan;
    p.cluster.topology.routing = routing;
    p.cluster.topology.flows_per_peer = flows;
    return estimate(p).breakdown.dp_s;
  };
  const double d_mod_k = dp_s(plan::Routing::d_mod_k, 2);
  EXPECT_DOUBLE_EQ(dp_s(plan::Routing::adaptive, 2), d_mod_k);
  EXPECT_GT(dp_s(plan::Routing::ecmp_hash, 1), dp_s(plan::Routing::ecmp_hash, 2));
  EXPECT_GT(dp_s(plan::Routing::ecmp_hash, 2), d_mod_k);
  // 16 flows an edge: even the busiest link leaves each edge its NIC's rate.
  EXPECT_DOUBLE_EQ(dp_s(plan::Routing::ecmp_hash, 16), d_mod_k);
}

}  // namespace
}  // namespace meshwork::models
