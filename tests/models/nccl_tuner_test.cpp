// NCCL's tuner latencies and protocols (models/nccl_tuner), by hand from NVIDIA/nccl
// src/graph/tuning.cc's constants, and how the collectives of both tiers take them
// (models::collective_flows).
#include "models/nccl_tuner.hpp"

#include <gtest/gtest.h>

#include <string>

#include "models/comm.hpp"
#include "models/hardware.hpp"
#include "plan/plan_io.hpp"

namespace meshwork::models {
namespace {

using plan::CollectiveAlgorithm;

GroupNetwork dp_network(const std::string& cluster, std::int64_t dp, const std::string& precision = "bf16") {
  auto r = plan::load_plan_text("model: tiny\ntraining: {global_batch_size: " + std::to_string(dp) + ", precision: " + precision + "}\nparallelism: {dp: " +
                                    std::to_string(dp) + "}\ncluster: {" + cluster + "}\n",
                                plan::Format::yaml);
  EXPECT_TRUE(r.ok()) << cluster;
  return group_network(r.plan, hardware_profile(r.plan.cluster.gpu), plan::GroupKind::dp);
}

TEST(NcclTuner, RingLatencyIsTheBasePlusEachStepAtItsFabric) {
  // 8 GPUs on NVLink, all-gather: 8.4 us + 7 steps x 3.4 us (Simple); LL 6.6 + 7 x 0.6; LL128
  // 14 + 7 x 1.9.
  const TunerShape node{8, 1, true};
  EXPECT_NEAR(nccl_latency_s(CollectiveAlgorithm::ring, Collective::all_gather, Protocol::simple, node) * 1e6, 8.4 + 7 * 3.4, 1e-9);
  EXPECT_NEAR(nccl_latency_s(CollectiveAlgorithm::ring, Collective::all_gather, Protocol::ll, node) * 1e6, 6.6 + 7 * 0.6, 1e-9);
  EXPECT_NEAR(nccl_latency_s(CollectiveAlgorithm::ring, Collective::all_gather, Protocol::ll128, node) * 1e6, 14 + 7 * 1.9, 1e-9);
  // An all-reduce takes 2(n - 1) steps.
  EXPECT_NEAR(nccl_latency_s(CollectiveAlgorithm::ring, Collective::all_reduce, Protocol::simple, node) * 1e6, 8.4 + 14 * 3.4, 1e-9);
  // Over PCIe: 5.7 us a Simple step.
  EXPECT_NEAR(nccl_latency_s(CollectiveAlgorithm::ring, Collective::all_gather, Protocol::simple, {8, 1, false}) * 1e6, 8.4 + 7 * 5.7, 1e-9);
  // 80 ranks on 10 nodes, all-reduce, Simple: 158 steps, 18 of them between nodes at 14 us,
  // the other 140 at NVLink's 3.4 us (above the network overhead's 3 x 1 us), times the ring's
  // plateau factor 1.4 between nodes.
  const TunerShape ten{80, 10, true};
  EXPECT_NEAR(nccl_latency_s(CollectiveAlgorithm::ring, Collective::all_reduce, Protocol::simple, ten) * 1e6, (8.4 + 140 * 3.4 + 18 * 14) * 1.4, 1e-9);
  // The plateau factor only from 64 bytes per channel (16) and rank (80): 81,920 bytes.
  EXPECT_NEAR(nccl_latency_s(CollectiveAlgorithm::ring, Collective::all_reduce, Protocol::simple, ten, 81920) * 1e6, (8.4 + 140 * 3.4 + 18 * 14) * 1.4, 1e-9);
  EXPECT_NEAR(nccl_latency_s(CollectiveAlgorithm::ring, Collective::all_reduce, Protocol::simple, ten, 81919) * 1e6, 8.4 + 140 * 3.4 + 18 * 14, 1e-9);
  // LL between nodes: NVLink's 0.6 us a step is below the 1 us network overhead.
  EXPECT_NEAR(nccl_latency_s(CollectiveAlgorithm::ring, Collective::all_gather, Protocol::ll, ten) * 1e6, 6.6 + 70 * 1.0 + 9 * 2.7, 1e-9);
  // One rank per node: every step between nodes, at the tree's network latency (5 us for LL).
  EXPECT_NEAR(nccl_latency_s(CollectiveAlgorithm::ring, Collective::all_gather, Protocol::ll, {10, 10, true}) * 1e6, 6.6 + 9 * 5.0, 1e-9);
}

TEST(NcclTuner, TreeNvlsAndHierarchicalLatencies) {
  // The tree: up and down a chain of the node's 7 other GPUs and log2(16) = 4 levels of nodes.
  const TunerShape s{128, 16, true};
  EXPECT_NEAR(nccl_latency_s(CollectiveAlgorithm::tree, Collective::all_reduce, Protocol::simple, s) * 1e6, 8.4 + 2 * (7 * 4.0 + 4 * 14), 1e-9);
  // NCCL divides ranks by nodes in integers: 20 ranks on 3 nodes chain through 5 others.
  EXPECT_NEAR(nccl_latency_s(CollectiveAlgorithm::tree, Collective::all_reduce, Protocol::simple, {20, 3, true}) * 1e6, 8.4 + 2 * (5 * 4.0 + 1 * 14), 1e-9);
  // NVLink SHARP in a node: the switch's 25 us, Simple only.
  EXPECT_NEAR(nccl_latency_s(CollectiveAlgorithm::nvls, Collective::all_reduce, Protocol::simple, {8, 1, true}) * 1e6, 25, 1e-9);
  EXPECT_FALSE(protocol_applies(CollectiveAlgorithm::nvls, Protocol::ll, {8, 1, true}));
  // Hierarchical all-reduce: two in-node rings of 8 (reduce-scatter, all-gather) and an
  // all-reduce ring of the 16 nodes, one rank each (the tree's network latency, 14 us, and the
  // plateau factor).
  const double in_node = 8.4 + 7 * 3.4, between = (8.4 + 30 * 14) * 1.4;
  EXPECT_NEAR(nccl_latency_s(CollectiveAlgorithm::hierarchical, Collective::all_reduce, Protocol::simple, s) * 1e6, 2 * in_node + between, 1e-9);
}

TEST(NcclTuner, ProtocolsKeepTheirShareOfTheRate) {
  const TunerShape node{8, 1, true};
  EXPECT_DOUBLE_EQ(protocol_fraction(CollectiveAlgorithm::ring, Protocol::ll, node), 0.5);
  EXPECT_DOUBLE_EQ(protocol_fraction(CollectiveAlgorithm::ring, Protocol::ll128, node), 0.92);
  EXPECT_DOUBLE_EQ(protocol_fraction(CollectiveAlgorithm::ring, Protocol::simple, node), 1.0);
  EXPECT_DOUBLE_EQ(protocol_fraction(CollectiveAlgorithm::tree, Protocol::ll, node), 1 / 3.8);
  EXPECT_DOUBLE_EQ(protocol_fraction(CollectiveAlgorithm::tree, Protocol::ll128, node), 7.0 / 9);
  EXPECT_DOUBLE_EQ(protocol_fraction(CollectiveAlgorithm::tree, Protocol::ll128, {16, 2, true}), 120.0 / 128);
  // LL128 needs NVLink in the node.
  EXPECT_FALSE(protocol_applies(CollectiveAlgorithm::ring, Protocol::ll128, {8, 1, false}));
  // LL's ceiling: the GPU's in one node, the host's between nodes.
  EXPECT_DOUBLE_EQ(ll_busbw_ceiling_bytes_per_s(node, 141e9), 141e9);
  EXPECT_DOUBLE_EQ(ll_busbw_ceiling_bytes_per_s({16, 2, true}, 141e9), 39e9);
  EXPECT_DOUBLE_EQ(ll_busbw_ceiling_bytes_per_s({32, 4, true}, 141e9), 20.4e9);
}

TEST(NcclTuner, ACollectiveRunsTheFastestProtocolForItsSize) {
  // 8 H100 in a node, ring all-gather: LL for a few KiB, LL128 for some MiB, Simple for GiB.
  const GroupNetwork g = dp_network("gpu: h100-sxm, num_gpus: 8, gpus_per_node: 8, collective_algorithm: ring", 8);
  const auto ag = Collective::all_gather;
  EXPECT_EQ(collective_flows(g, ag, 4096, CollectiveAlgorithm::ring).protocol, Protocol::ll);
  EXPECT_EQ(collective_flows(g, ag, 8 << 20, CollectiveAlgorithm::ring).protocol, Protocol::ll128);
  EXPECT_EQ(collective_flows(g, ag, 1 << 30, CollectiveAlgorithm::ring).protocol, Protocol::simple);
  // Its time by hand at 1 GiB: 7/8 of the buffer at the ring's NVLink rate, and Simple's latency.
  const double big = 1 << 30;
  EXPECT_DOUBLE_EQ(collective_s(g, ag, big), 7.0 / 8 * big / g.nvlink_bytes_per_s + (8.4 + 7 * 3.4) * 1e-6);
  // At 4 KiB: LL at half the rate, but no more than its 141 GB/s ceiling on Hopper (half of
  // 370 GB/s is above it), and LL's latency.
  const double small = 4096, ll_rate = 141e9;
  ASSERT_GT(0.5 * g.nvlink_bytes_per_s, ll_rate);
  EXPECT_NEAR(collective_s(g, ag, small), 7.0 / 8 * small / ll_rate + (6.6 + 7 * 0.6) * 1e-6, 1e-15);
  // The simulator plays the same: the LL bytes are those that take as long at the full rate.
  const CollectiveFlows f = collective_flows(g, ag, small, CollectiveAlgorithm::ring);
  EXPECT_NEAR(f.edge_bytes, 7.0 / 8 * small * g.nvlink_bytes_per_s / ll_rate, 1e-9);
  EXPECT_DOUBLE_EQ(f.latency_s, (6.6 + 7 * 0.6) * 1e-6);
}

TEST(NcclTuner, ACpuHostKeepsItsLatencyPerStep) {
  // MPI on CPUs: no protocols, the plan's latency per ring step.
  const GroupNetwork g = dp_network("gpu: cpu-host, num_gpus: 4, gpus_per_node: 4, intra_node: {kind: shared_memory}", 4, "fp32");
  ASSERT_FALSE(g.nccl);
  const CollectiveFlows f = collective_flows(g, Collective::all_reduce, 1e6, CollectiveAlgorithm::ring);
  EXPECT_EQ(f.protocol, Protocol::simple);
  EXPECT_DOUBLE_EQ(f.latency_s, 6 * g.latency_s);
}

}  // namespace
}  // namespace meshwork::models
